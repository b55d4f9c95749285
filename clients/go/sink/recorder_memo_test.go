package sink

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// The memo of inserted marks is safe under concurrency and bounded: past
// maxMemoMarks it starts over.
func TestMarkMemoIsBoundedAndConcurrent(t *testing.T) {
	var m markMemo
	at := time.Date(2026, 12, 6, 11, 59, 13, 0, time.UTC)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				marks := MarksFor("rejections", at, ScopesOf(Scope{"tool", fmt.Sprintf("t%d-%d", g, i)}))
				m.add(m.missing(marks))
			}
		}()
	}
	wg.Wait()
	// 4 "all" marks shared by every record, and 4 tool marks of each of 1,600 tools.
	if n := len(m.ids); n != 4+8*200*4 {
		t.Fatalf("%d ids memoised", n)
	}
	if got := m.missing(MarksFor("rejections", at, ScopesOf(Scope{"tool", "t3-7"}))); len(got) != 0 {
		t.Fatalf("memoised marks missing: %v", got)
	}
	for i := 0; len(m.ids) < maxMemoMarks-3; i++ {
		m.add(MarksFor("rejections", at, ScopesOf(Scope{"reason", fmt.Sprint(i)}))[4:5])
	}
	m.add(MarksFor("rejections", at, ScopesOf(Scope{"reason", "last"}))[4:])
	if len(m.ids) != 4 {
		t.Fatalf("past the bound the memo holds %d ids, want the 4 just added", len(m.ids))
	}
}
