package sink

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// StatsCollection holds each writer's running totals, which GetStats sums instead
// of reading the rejections collection (services/common/src/stats-counters.ts, ADR 0025).
const StatsCollection = "stats_counters"

// statsCounters is one recorder's share of the refusal totals. It is the only
// writer of its document, so replacing it with the running totals loses nothing.
type statsCounters struct {
	coll    *mongo.Collection
	id      string
	service string
	started time.Time

	mu       sync.Mutex
	total    int64
	byReason map[string]int64
	byTool   map[string]int64
	version  int64
	written  int64
}

func newStatsCounters(db *mongo.Database, service string) *statsCounters {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return &statsCounters{
		coll:     db.Collection(StatsCollection),
		id:       "refusals:" + service + ":" + hex.EncodeToString(b[:]),
		service:  service,
		started:  time.Now().UTC(),
		byReason: map[string]int64{},
		byTool:   map[string]int64{},
		written:  -1,
	}
}

func (s *statsCounters) add(reason, toolID string, n int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.total += n
	s.byReason[reason] += n
	s.byTool[toolID] += n
	s.version++
}

// flush replaces the document with the running totals when they changed.
func (s *statsCounters) flush(ctx context.Context) error {
	s.mu.Lock()
	version := s.version
	if version == s.written {
		s.mu.Unlock()
		return nil
	}
	// {k, n} items: a tool id may hold "." or "$", and FerretDB v1 refuses nested arrays.
	pairs := func(m map[string]int64) bson.A {
		out := bson.A{}
		for k, n := range m {
			out = append(out, bson.D{{Key: "k", Value: k}, {Key: "n", Value: n}})
		}
		return out
	}
	doc := bson.D{
		{Key: "_id", Value: s.id},
		{Key: "kind", Value: "refusals"},
		{Key: "service", Value: s.service},
		{Key: "pid", Value: int32(os.Getpid())},
		{Key: "started_at", Value: s.started},
		{Key: "updated_at", Value: time.Now().UTC()},
		{Key: "counts", Value: bson.D{{Key: "rejections", Value: s.total}}},
		{Key: "by_reason", Value: pairs(s.byReason)},
		{Key: "by_tool", Value: pairs(s.byTool)},
	}
	s.mu.Unlock()
	if _, err := s.coll.ReplaceOne(ctx, bson.D{{Key: "_id", Value: s.id}}, doc, options.Replace().SetUpsert(true)); err != nil {
		return err
	}
	s.mu.Lock()
	if version > s.written {
		s.written = version
	}
	s.mu.Unlock()
	return nil
}
