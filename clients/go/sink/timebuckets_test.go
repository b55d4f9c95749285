package sink

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

// orderedFilters decodes a JSON object of strings keeping its keys' order
// (ScopesOf takes the filters in the order given).
type orderedFilters []Scope

func (o *orderedFilters) UnmarshalJSON(b []byte) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	if _, err := dec.Token(); err != nil { // {
		return err
	}
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return err
		}
		var v string
		if err := dec.Decode(&v); err != nil {
			return err
		}
		*o = append(*o, Scope{Scope: k.(string), Value: v})
	}
	return nil
}

type vectorMark struct {
	ID    string `json:"_id"`
	Up    string `json:"up"`
	Coll  string `json:"coll"`
	Scope string `json:"scope"`
	Level string `json:"level"`
	At    string `json:"at"`
}

// The shared vectors (test/vectors/time-buckets.json) pin the listing format
// (ADR 0033) every writer of listed records follows: the services', and this
// recorder's.
func TestTimeBucketVectors(t *testing.T) {
	text, err := os.ReadFile(filepath.Join("..", "..", "..", "test", "vectors", "time-buckets.json"))
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Cases []struct {
			Coll    string         `json:"coll"`
			At      string         `json:"at"`
			Filters orderedFilters `json:"filters"`
			LB      string         `json:"lb"`
			Marks   []vectorMark   `json:"marks"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(text, &f); err != nil {
		t.Fatal(err)
	}
	if len(f.Cases) < 4 {
		t.Fatalf("only %d cases", len(f.Cases))
	}
	for _, c := range f.Cases {
		t.Run(c.Coll+"@"+c.At, func(t *testing.T) {
			at, err := time.Parse(time.RFC3339Nano, c.At)
			if err != nil {
				t.Fatal(err)
			}
			if got := SecondBucket(at); got != c.LB {
				t.Errorf("SecondBucket = %q, want %q", got, c.LB)
			}
			var got []vectorMark
			for _, m := range MarksFor(c.Coll, at, ScopesOf(c.Filters...)) {
				got = append(got, vectorMark{ID: m.ID, Up: m.Up, Coll: m.Coll, Scope: m.Scope, Level: m.Level, At: isoMillis(m.At)})
			}
			if !reflect.DeepEqual(got, c.Marks) {
				t.Errorf("MarksFor:\n got %+v\nwant %+v", got, c.Marks)
			}
		})
	}
}

// SecondBucket is of the UTC time whatever the location.
func TestSecondBucketIsUTC(t *testing.T) {
	at := time.Date(2026, 12, 6, 12, 59, 13, 250e6, time.FixedZone("+01", 3600))
	if got := SecondBucket(at); got != "20261206115913" {
		t.Fatalf("SecondBucket = %q", got)
	}
	if m := MarksFor("rejections", at, ScopesOf()); len(m) != 4 || !m[0].At.Equal(time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)) {
		t.Fatalf("MarksFor = %+v", m)
	}
}
