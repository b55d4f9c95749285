package sink

import (
	"time"
)

// Time buckets of the operator listings (docs/decisions/0033): what a listed
// record carries (`lb`) and which directory marks say its buckets are
// non-empty. Pure, and the same format as the TypeScript services'
// (services/common/src/domain/time-buckets.ts), checked against
// test/vectors/time-buckets.json.

// ListingMarksCollection is the directory of non-empty listing buckets.
const ListingMarksCollection = "listing_marks"

// bucketLevels are the directory's levels, coarsest first, and the UTC digits
// each bucket keeps of a second bucket.
var bucketLevels = []struct {
	level  string
	digits int
}{{"d", 8}, {"h", 10}, {"m", 12}, {"s", 14}}

// SecondBucket is `YYYYMMDDHHmmss` of t in UTC: a record's `lb`. Every coarser
// bucket is a prefix of it.
func SecondBucket(t time.Time) string { return t.UTC().Format("20060102150405") }

// Scope is one listing a record belongs to: "all" (value "") or a filter and
// its value.
type Scope struct {
	Scope string
	Value string
}

// ScopesOf is the scopes of a record: "all", then each of filters whose value
// is not empty, in the order given.
func ScopesOf(filters ...Scope) []Scope {
	out := []Scope{{Scope: "all"}}
	for _, f := range filters {
		if f.Value != "" {
			out = append(out, f)
		}
	}
	return out
}

// ListingMark is a directory mark, as stored in `listing_marks`.
type ListingMark struct {
	ID    string    `bson:"_id"`
	Up    string    `bson:"up"`
	Coll  string    `bson:"coll"`
	Scope string    `bson:"scope"`
	Level string    `bson:"level"`
	At    time.Time `bson:"at"`
}

// markID is a mark's `_id`; the value goes last, so it may contain any character.
func markID(coll string, scope Scope, level, bucket string) string {
	return coll + "/" + scope.Scope + "/" + level + "/" + bucket + "/" + scope.Value
}

// bucketStart is the start of a bucket of any level (a prefix of a second bucket
// of t).
func bucketStart(t time.Time, digits int) time.Time {
	t = t.UTC()
	y, mo, d := t.Date()
	h, mi, s := 0, 0, 0
	if digits >= 10 {
		h = t.Hour()
	}
	if digits >= 12 {
		mi = t.Minute()
	}
	if digits >= 14 {
		s = t.Second()
	}
	return time.Date(y, mo, d, h, mi, s, 0, time.UTC)
}

// MarksFor is every mark a record of coll listed at `at` needs, for each of its
// scopes, coarsest first.
func MarksFor(coll string, at time.Time, scopes []Scope) []ListingMark {
	second := SecondBucket(at)
	out := make([]ListingMark, 0, len(scopes)*len(bucketLevels))
	for _, scope := range scopes {
		up := markID(coll, scope, "r", "")
		for _, l := range bucketLevels {
			id := markID(coll, scope, l.level, second[:l.digits])
			out = append(out, ListingMark{ID: id, Up: up, Coll: coll, Scope: scope.Scope, Level: l.level, At: bucketStart(at, l.digits)})
			up = id
		}
	}
	return out
}
