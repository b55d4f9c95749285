package sink

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// SpentCapability is one capability being spent.
type SpentCapability struct {
	Sink, JTI, ToolID, CallID, Effect string
	// ExpiresAt: after this the capability is refused as expired anyway, so its
	// record may go.
	ExpiresAt time.Time
}

// SpentStore is where a sink remembers spent unsafe and queryable capabilities
// (ADR 0013 §6). Spend's answer decides, so two presentations racing each
// other cannot both run the effect.
type SpentStore interface {
	// Spend returns true the first time a capability is spent, false every
	// later time, and an error when it cannot tell (the request is then
	// refused DATABASE_UNAVAILABLE and nothing runs).
	Spend(ctx context.Context, c SpentCapability) (bool, error)
}

// MemorySpentStore is one process's memory: for tests and single-replica sinks.
type MemorySpentStore struct {
	mu    sync.Mutex
	spent map[string]time.Time
	now   func() time.Time
}

// NewMemorySpentStore makes an empty store; now is its clock (nil: time.Now).
func NewMemorySpentStore(now func() time.Time) *MemorySpentStore {
	if now == nil {
		now = time.Now
	}
	return &MemorySpentStore{spent: map[string]time.Time{}, now: now}
}

// Spend implements SpentStore.
func (m *MemorySpentStore) Spend(_ context.Context, c SpentCapability) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t := m.now()
	// Forgetting expired ids on the way keeps the map bounded by live capabilities.
	if len(m.spent) > 1024 {
		for id, exp := range m.spent {
			if exp.Before(t) {
				delete(m.spent, id)
			}
		}
	}
	id := c.Sink + "/" + c.JTI
	if _, ok := m.spent[id]; ok {
		return false, nil
	}
	m.spent[id] = c.ExpiresAt
	return true, nil
}

// SpentCollection is the MongoDB collection of spent capabilities.
const SpentCollection = "spent_capabilities"

// spentDoc is a stored spent capability; the insert of its _id decides first use.
type spentDoc struct {
	ID        string    `bson:"_id"`
	Sink      string    `bson:"sink"`
	JTI       string    `bson:"jti"`
	ToolID    string    `bson:"tool_id"`
	CallID    string    `bson:"call_id"`
	Effect    string    `bson:"effect"`
	SpentAt   time.Time `bson:"spent_at"`
	ExpiresAt time.Time `bson:"expires_at"`
}

// MongoSpentStoreOptions configures OpenMongoSpentStore.
type MongoSpentStoreOptions struct {
	// SweepInterval is how often expired records are deleted. Default 1 min;
	// negative: never (call Sweep yourself).
	SweepInterval time.Duration
	Now           func() time.Time
}

// MongoSpentStore keeps spent capabilities in MongoDB (collection
// spent_capabilities, shared by every replica of a sink).
type MongoSpentStore struct {
	coll *mongo.Collection
	now  func() time.Time
	stop chan struct{}
	once sync.Once
}

// OpenMongoSpentStore opens the collection and its sweep index, and starts the
// sweep (FerretDB has no TTL indexes, so expired records are deleted here).
func OpenMongoSpentStore(ctx context.Context, db *mongo.Database, opts MongoSpentStoreOptions) (*MongoSpentStore, error) {
	coll := db.Collection(SpentCollection)
	_, err := coll.Indexes().CreateOne(ctx, mongo.IndexModel{Keys: bson.D{{Key: "expires_at", Value: 1}}, Options: options.Index().SetName("expires_at")})
	if err != nil {
		return nil, fmt.Errorf("sink: creating the %s index: %w", SpentCollection, err)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	s := &MongoSpentStore{coll: coll, now: opts.Now, stop: make(chan struct{})}
	every := opts.SweepInterval
	if every == 0 {
		every = time.Minute
	}
	if every > 0 {
		go func() {
			t := time.NewTicker(every)
			defer t.Stop()
			for {
				select {
				case <-s.stop:
					return
				case <-t.C:
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					_, _ = s.Sweep(ctx)
					cancel()
				}
			}
		}()
	}
	return s, nil
}

// Spend implements SpentStore.
func (s *MongoSpentStore) Spend(ctx context.Context, c SpentCapability) (bool, error) {
	_, err := s.coll.InsertOne(ctx, spentDoc{
		ID: c.Sink + "/" + c.JTI, Sink: c.Sink, JTI: c.JTI, ToolID: c.ToolID, CallID: c.CallID,
		Effect: c.Effect, SpentAt: s.now().UTC(), ExpiresAt: c.ExpiresAt.UTC(),
	})
	if err == nil {
		return true, nil
	}
	if mongo.IsDuplicateKeyError(err) {
		return false, nil
	}
	// Any other failure leaves first use undecided: refuse, retryably, run nothing.
	return false, err
}

// Sweep deletes the records of capabilities past their expiry; it returns how many.
func (s *MongoSpentStore) Sweep(ctx context.Context) (int64, error) {
	res, err := s.coll.DeleteMany(ctx, bson.D{{Key: "expires_at", Value: bson.D{{Key: "$lt", Value: s.now().UTC()}}}})
	if err != nil {
		return 0, err
	}
	return res.DeletedCount, nil
}

// Close stops the sweep.
func (s *MongoSpentStore) Close() { s.once.Do(func() { close(s.stop) }) }
