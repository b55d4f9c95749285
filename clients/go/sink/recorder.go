package sink

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/keycap/keycap/clients/go/reasons"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// RefusalRecord is what is known about one refused request, in the terms of
// keycap's refusal store (services/common/src/rejection-audit.ts). Strings
// default to "".
type RefusalRecord struct {
	Method string
	Reason string
	// Code is the gRPC code name, e.g. PERMISSION_DENIED.
	Code string
	// ToolID is the verified claims' tool id, or the unverified payload's with
	// ToolIDVerified false.
	ToolID         string
	ToolIDVerified bool
	Principal      string
	AttemptedKey   string
	CapabilityKey  string
	// CapabilityRequestID is the capability's request id (queryable).
	CapabilityRequestID string
	CallID              string
	CapabilityID        string
	KeyID               string
	Effect              string
	// Peer is the caller's "ip:port".
	Peer    string
	Message string
}

// Recorder is where refusals are recorded. Record never fails the request:
// a record that cannot be written is the recorder's to log.
type Recorder interface {
	Record(ctx context.Context, r RefusalRecord)
}

// RejectionsCollection is keycap's refusal store.
const RejectionsCollection = "rejections"

// Summary reasons (the ledger's).
const (
	ReasonRateLimitedRefusals = reasons.RateLimitedRefusals
	ReasonUnavailableRefusals = reasons.UnavailableRefusals
)

// Refusals caused by keycap's own unavailability, not by the caller: counted per
// peer and minute, never stored one by one as if the tool had misbehaved.
var availabilityReasons = map[string]bool{"SIGNING_KEYS_UNAVAILABLE": true, "LEDGER_UNAVAILABLE": true, "DATABASE_UNAVAILABLE": true}

const maxRecordField = 256

// MongoRecorderOptions configures OpenMongoRecorder.
type MongoRecorderOptions struct {
	// UnverifiedPerMinute: individual records of unverified refusals per peer IP
	// per minute; the rest are summarised. Default 60.
	UnverifiedPerMinute int
	// FlushInterval is how often summaries are written. Default 1 s.
	FlushInterval time.Duration
	// Logger gets the records that could not be written. Default slog.Default().
	Logger *slog.Logger
	Now    func() time.Time
}

// MongoRecorder writes a sink's refusals into keycap's `rejections`
// collection with the ledger's record shape, under service "sink:<name>":
// `keycap rejections --service sink:<name>` lists them. Unverified callers
// cannot flood it: their records are rate limited per peer IP (a token bucket),
// the rest counted into one upserted summary per peer and minute.
type MongoRecorder struct {
	coll     *mongo.Collection
	marks    *mongo.Collection
	memo     markMemo
	service  string
	opts     MongoRecorderOptions
	limiter  *peerLimiter
	counters *statsCounters

	mu      sync.Mutex
	pending map[string]*pendingSummary
	flushMu sync.Mutex
	stop    chan struct{}
	stopped chan struct{}
	once    sync.Once
}

type pendingSummary struct {
	unavailable bool
	ip          string
	minute      int64
	first, last time.Time
	count       int64
	reasons     map[string]int64
}

// OpenMongoRecorder opens the rejections collection (and the ledger's indexes
// on it) for the sink named sinkName.
func OpenMongoRecorder(ctx context.Context, db *mongo.Database, sinkName string, opts MongoRecorderOptions) (*MongoRecorder, error) {
	service, err := SinkService(sinkName)
	if err != nil {
		return nil, err
	}
	if opts.UnverifiedPerMinute <= 0 {
		opts.UnverifiedPerMinute = 60
	}
	if opts.FlushInterval <= 0 {
		opts.FlushInterval = time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	coll := db.Collection(RejectionsCollection)
	// One index per command, as the ledger creates them (FerretDB).
	for _, ix := range []struct {
		name string
		keys bson.D
	}{
		{"newest_first", bson.D{{Key: "rejected_at", Value: -1}, {Key: "_id", Value: -1}}},
		{"tool_newest_first", bson.D{{Key: "tool_id", Value: 1}, {Key: "rejected_at", Value: -1}, {Key: "_id", Value: -1}}},
		{"reason_newest_first", bson.D{{Key: "reason", Value: 1}, {Key: "rejected_at", Value: -1}, {Key: "_id", Value: -1}}},
		// The listings read a second's records by equality on lb (ADR 0033).
		{"eq_lb", bson.D{{Key: "lb", Value: 1}}},
	} {
		if _, err := coll.Indexes().CreateOne(ctx, mongo.IndexModel{Keys: ix.keys, Options: options.Index().SetName(ix.name)}); err != nil {
			return nil, fmt.Errorf("sink: creating the rejections index %s: %w", ix.name, err)
		}
	}
	marks := db.Collection(ListingMarksCollection)
	if _, err := marks.Indexes().CreateOne(ctx, mongo.IndexModel{Keys: bson.D{{Key: "up", Value: 1}}, Options: options.Index().SetName("eq_up")}); err != nil {
		return nil, fmt.Errorf("sink: creating the listing_marks index eq_up: %w", err)
	}
	r := &MongoRecorder{
		coll: coll, marks: marks, service: service, opts: opts, counters: newStatsCounters(db, service),
		limiter: &peerLimiter{perMinute: float64(opts.UnverifiedPerMinute), buckets: map[string]bucket{}},
		pending: map[string]*pendingSummary{}, stop: make(chan struct{}), stopped: make(chan struct{}),
	}
	go r.flushLoop()
	return r, nil
}

// Record implements Recorder.
func (r *MongoRecorder) Record(ctx context.Context, in RefusalRecord) {
	ip := ipOfPeer(in.Peer)
	now := r.opts.Now()
	if availabilityReasons[in.Reason] {
		r.accumulate(true, ip, in.Reason, now)
		return
	}
	if !in.ToolIDVerified && !r.limiter.take(ip, now) {
		r.accumulate(false, ip, in.Reason, now)
		return
	}
	toolID := clip(in.ToolID, maxRecordField)
	doc := bson.D{
		{Key: "_id", Value: bson.NewObjectID().Hex()},
		{Key: "service", Value: r.service},
		{Key: "principal", Value: clip(in.Principal, maxRecordField)},
		{Key: "tool_id", Value: toolID},
		{Key: "tool_id_verified", Value: in.ToolIDVerified},
		{Key: "reason", Value: in.Reason},
		{Key: "code", Value: in.Code},
		{Key: "method", Value: in.Method},
		{Key: "attempted_key", Value: clip(in.AttemptedKey, maxRecordField)},
		{Key: "capability_key", Value: clip(in.CapabilityKey, maxRecordField)},
		{Key: "attempted_request_id", Value: ""},
		{Key: "capability_request_id", Value: clip(in.CapabilityRequestID, maxRecordField)},
		{Key: "call_id", Value: clip(in.CallID, maxRecordField)},
		{Key: "capability_id", Value: clip(in.CapabilityID, maxRecordField)},
		{Key: "key_id", Value: clip(in.KeyID, maxRecordField)},
		{Key: "effect", Value: clip(in.Effect, maxRecordField)},
		{Key: "peer", Value: clip(in.Peer, maxRecordField)},
		{Key: "message", Value: clip(in.Message, 1024)},
		{Key: "rejected_at", Value: now.UTC()},
		{Key: "lb", Value: SecondBucket(now)},
		{Key: "count", Value: int32(1)},
	}
	// The request's own deadline must not cancel its refusal record.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	// The marks first: a record is never written where the listings cannot find it.
	err := r.insertMarks(wctx, now, r.scopesOf(toolID, in.Reason))
	if err == nil {
		_, err = r.coll.InsertOne(wctx, doc)
	}
	if err != nil {
		r.opts.Logger.Error("could not record a refusal; refusing anyway", "err", err, "reason", in.Reason, "service", r.service, "peer", in.Peer)
		return
	}
	r.counters.add(in.Reason, toolID, 1)
}

// scopesOf is the listings a refusal record of this recorder belongs to: all,
// and by tool, reason and service (ADR 0033; empty values are none).
func (r *MongoRecorder) scopesOf(toolID, reason string) []Scope {
	return ScopesOf(Scope{"tool", toolID}, Scope{"reason", reason}, Scope{"service", r.service})
}

// insertMarks writes the listing marks of a record listed at `at` that this
// recorder has not written yet. Marks another writer inserted first are
// duplicates, which is success.
func (r *MongoRecorder) insertMarks(ctx context.Context, at time.Time, scopes []Scope) error {
	missing := r.memo.missing(MarksFor(RejectionsCollection, at, scopes))
	if len(missing) == 0 {
		return nil
	}
	docs := make([]any, len(missing))
	for i := range missing {
		docs[i] = missing[i]
	}
	if _, err := r.marks.InsertMany(ctx, docs, options.InsertMany().SetOrdered(false)); err != nil && !onlyDuplicateKeys(err) {
		return fmt.Errorf("writing listing marks: %w", err)
	}
	r.memo.add(missing)
	return nil
}

// onlyDuplicateKeys: err is a bulk write whose every error is a duplicate key
// (11000), and without a write concern error.
func onlyDuplicateKeys(err error) bool {
	var bwe mongo.BulkWriteException
	if !errors.As(err, &bwe) || bwe.WriteConcernError != nil || len(bwe.WriteErrors) == 0 {
		return false
	}
	for _, we := range bwe.WriteErrors {
		if we.Code != 11000 {
			return false
		}
	}
	return true
}

// maxMemoMarks bounds markMemo: past it, the memo starts over (the marks are
// then inserted once more, as duplicates).
const maxMemoMarks = 50_000

// markMemo is the mark ids a recorder has inserted (or found inserted), so
// that the common case, a bucket already marked, adds no insert.
type markMemo struct {
	mu  sync.Mutex
	ids map[string]struct{}
}

func (m *markMemo) missing(marks []ListingMark) []ListingMark {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []ListingMark
	for _, mk := range marks {
		if _, ok := m.ids[mk.ID]; !ok {
			out = append(out, mk)
		}
	}
	return out
}

func (m *markMemo) add(marks []ListingMark) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ids == nil || len(m.ids)+len(marks) > maxMemoMarks {
		m.ids = make(map[string]struct{}, len(marks))
	}
	for _, mk := range marks {
		m.ids[mk.ID] = struct{}{}
	}
}

func (r *MongoRecorder) accumulate(unavailable bool, ip, reason string, t time.Time) {
	minute := t.UnixMilli() / 60_000
	kind := "rl"
	if unavailable {
		kind = "ua"
	}
	id := fmt.Sprintf("%s\x00%s\x00%d", kind, ip, minute)
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.pending[id]
	if p == nil {
		p = &pendingSummary{unavailable: unavailable, ip: ip, minute: minute, first: t, reasons: map[string]int64{}}
		r.pending[id] = p
	}
	p.count++
	p.last = t
	p.reasons[reason]++
}

func (r *MongoRecorder) flushLoop() {
	defer close(r.stopped)
	t := time.NewTicker(r.opts.FlushInterval)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			r.Flush(ctx)
			cancel()
		}
	}
}

// Flush writes the pending summaries now (also runs every FlushInterval).
func (r *MongoRecorder) Flush(ctx context.Context) {
	// One flush at a time, so two cannot write the same pending counts twice.
	r.flushMu.Lock()
	defer r.flushMu.Unlock()
	r.limiter.prune(r.opts.Now())
	r.mu.Lock()
	batch := r.pending
	r.pending = map[string]*pendingSummary{}
	r.mu.Unlock()
	for _, p := range batch {
		if err := r.upsertSummary(ctx, p); err != nil {
			r.opts.Logger.Error("could not record a summary of refusals", "err", err, "peer", p.ip, "count", p.count)
			continue
		}
		reason := ReasonRateLimitedRefusals
		if p.unavailable {
			reason = ReasonUnavailableRefusals
		}
		r.counters.add(reason, "", p.count)
	}
	if err := r.counters.flush(ctx); err != nil {
		r.opts.Logger.Warn("stats counters not written; will retry", "err", err, "service", r.service)
	}
}

// Close stops the flush timer and writes what is pending.
func (r *MongoRecorder) Close(ctx context.Context) {
	r.once.Do(func() { close(r.stop) })
	<-r.stopped
	r.Flush(ctx)
}

// upsertSummary: one summary document per peer IP and minute; replicas add to
// the same one. A race between two first upserts surfaces as a duplicate key
// and is retried as an update.
func (r *MongoRecorder) upsertSummary(ctx context.Context, p *pendingSummary) error {
	kind, reason, code := "rl", ReasonRateLimitedRefusals, "UNAUTHENTICATED"
	message := fmt.Sprintf("unauthenticated refusals from %s beyond %d per minute, summarised (count = how many; reasons in the record)", clip(p.ip, 64), r.opts.UnverifiedPerMinute)
	if p.unavailable {
		kind, reason, code = "ua", ReasonUnavailableRefusals, "UNAVAILABLE"
		message = fmt.Sprintf("calls from %s refused because keycap could not serve them (count = how many; reasons in the record); not the caller's fault", clip(p.ip, 64))
	}
	// JSON keeps the parts apart whatever they contain (an IPv6 peer has colons).
	idJSON, _ := json.Marshal([]string{kind, r.service, p.ip, isoMillis(time.UnixMilli(p.minute * 60_000))})
	inc := bson.D{{Key: "count", Value: int32(p.count)}}
	for reason, n := range p.reasons {
		inc = append(inc, bson.E{Key: "reasons." + reason, Value: int32(n)})
	}
	onInsert := bson.D{
		{Key: "service", Value: r.service}, {Key: "principal", Value: ""}, {Key: "tool_id", Value: ""},
		{Key: "tool_id_verified", Value: false}, {Key: "reason", Value: reason}, {Key: "code", Value: code},
		{Key: "method", Value: ""}, {Key: "attempted_key", Value: ""}, {Key: "capability_key", Value: ""},
		{Key: "attempted_request_id", Value: ""}, {Key: "capability_request_id", Value: ""}, {Key: "call_id", Value: ""},
		{Key: "capability_id", Value: ""}, {Key: "key_id", Value: ""}, {Key: "effect", Value: ""},
		{Key: "peer", Value: clip(p.ip, maxRecordField)}, {Key: "message", Value: message},
		{Key: "rejected_at", Value: p.first.UTC()}, {Key: "lb", Value: SecondBucket(p.first)},
	}
	// The marks first, as for a record (ADR 0033).
	if err := r.insertMarks(ctx, p.first, r.scopesOf("", reason)); err != nil {
		return err
	}
	update := bson.D{{Key: "$inc", Value: inc}, {Key: "$setOnInsert", Value: onInsert}, {Key: "$max", Value: bson.D{{Key: "last_rejected_at", Value: p.last.UTC()}}}}
	filter := bson.D{{Key: "_id", Value: string(idJSON)}}
	_, err := r.coll.UpdateOne(ctx, filter, update, options.UpdateOne().SetUpsert(true))
	if err != nil && mongo.IsDuplicateKeyError(err) {
		_, err = r.coll.UpdateOne(ctx, filter, update, options.UpdateOne().SetUpsert(true))
	}
	return err
}

// isoMillis is JavaScript's Date.toISOString.
func isoMillis(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }

type bucket struct {
	tokens float64
	at     time.Time
}

// peerLimiter is a token bucket per peer IP, refilled continuously; buckets
// full again are dropped by prune, so memory follows the recent set of peers.
type peerLimiter struct {
	mu        sync.Mutex
	perMinute float64
	buckets   map[string]bucket
}

func (l *peerLimiter) take(ip string, t time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	perMs := l.perMinute / 60_000
	tokens := l.perMinute
	if b, ok := l.buckets[ip]; ok {
		tokens = min(l.perMinute, b.tokens+float64(t.Sub(b.at).Milliseconds())*perMs)
	}
	if tokens < 1 {
		l.buckets[ip] = bucket{tokens, t}
		return false
	}
	l.buckets[ip] = bucket{tokens - 1, t}
	return true
}

func (l *peerLimiter) prune(t time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	perMs := l.perMinute / 60_000
	for ip, b := range l.buckets {
		if b.tokens+float64(t.Sub(b.at).Milliseconds())*perMs >= l.perMinute {
			delete(l.buckets, ip)
		}
	}
}

var (
	bracketPeer = regexp.MustCompile(`^\[([^\]]+)\](?::\d+)?$`)
	digits      = regexp.MustCompile(`^\d+$`)
)

// ipOfPeer is the IP part of a peer address ("127.0.0.1:5000", "[::1]:5000",
// "ipv4:127.0.0.1:5000"); unknown shapes are returned whole.
func ipOfPeer(peer string) string {
	p := strings.TrimPrefix(strings.TrimPrefix(peer, "ipv4:"), "ipv6:")
	if m := bracketPeer.FindStringSubmatch(p); m != nil {
		return m[1]
	}
	if at := strings.LastIndexByte(p, ':'); at > 0 && digits.MatchString(p[at+1:]) {
		p = p[:at]
	}
	if p == "" {
		return "unknown"
	}
	return p
}

func clip(s string, max int) string {
	if jsLength(s) <= max {
		return s
	}
	n := 0
	for i, r := range s {
		w := 1
		if r > 0xFFFF {
			w = 2
		}
		if n+w > max {
			return s[:i] + "…"
		}
		n += w
	}
	return s
}

var sinkName = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)

// SinkService is the `service` of a sink's refusal records, "sink:<name>";
// a name is 1-63 of [a-z0-9._-], starting with a letter or digit.
func SinkService(name string) (string, error) {
	if !sinkName.MatchString(name) {
		return "", fmt.Errorf("sink name %q: expected 1-63 of [a-z0-9._-], starting with a letter or digit", name)
	}
	return "sink:" + name, nil
}
