package sink

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	dto "github.com/prometheus/client_model/go"

	"github.com/walhouse/walhouse/record"
)

// fakeLedger takes the records whose id (the second value) it lists for
// records of an erased subject. erase adds ids as a new read of the
// ledger would. While stale, Fresh fails, and WaitFresh counts a wait and
// returns as the next read would: fresh, erasing the ids in readErases.
type fakeLedger struct {
	mu         sync.Mutex
	ids        map[string]bool
	gen        uint64
	stale      bool
	readErases []string
	waits      int // calls of WaitFresh while stale
}

func erasedIDs(ids ...string) *fakeLedger {
	l := &fakeLedger{ids: map[string]bool{}, gen: 1}
	for _, id := range ids {
		l.ids[id] = true
	}
	return l
}

func (l *fakeLedger) Erased(r *record.Record) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ids[r.Values[1].Text]
}

func (l *fakeLedger) Generation() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.gen
}

func (l *fakeLedger) Fresh() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stale {
		return errors.New("the erasure ledger could not be read for too long")
	}
	return nil
}

func (l *fakeLedger) WaitFresh(context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stale {
		l.waits++
		l.stale = false
		l.eraseLocked(l.readErases...)
	}
	return nil
}

func (l *fakeLedger) erase(ids ...string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.eraseLocked(ids...)
}

func (l *fakeLedger) eraseLocked(ids ...string) {
	for _, id := range ids {
		l.ids[id] = true
	}
	l.gen++
}

func erasedCount(t *testing.T, m *Metrics, table string) float64 {
	t.Helper()
	var got dto.Metric
	if err := m.erased.WithLabelValues(table).Write(&got); err != nil {
		t.Fatal(err)
	}
	return got.GetCounter().GetValue()
}

// Records of erased subjects are never loaded, and their offsets are
// committed like the others'; the rest of the batch loads as usual.
func TestSinkDropsErasedRecords(t *testing.T) {
	l := &fakeLoader{}
	m := NewMetrics(nil)
	fc := runScript(t, Config{Erasures: erasedIDs("1", "3"), Metrics: m}, nil, l, recs("a", 0, 0, 4))
	if want := []string{"a/0/0-4 n=3"}; fmt.Sprint(l.batches) != fmt.Sprint(want) {
		t.Errorf("batches %v, want %v (records 1 and 3 dropped)", l.batches, want)
	}
	if got := erasedCount(t, m, "public.a"); got != 2 {
		t.Errorf("walhouse_sink_erased_records_dropped_total = %v, want 2", got)
	}
	if got := strings.Join(fc.commits, ";"); !strings.Contains(got, "a/0@5 ") {
		t.Errorf("commits %s: the partition is not committed past the dropped records", got)
	}
	l = &fakeLoader{}
	runScript(t, Config{Erasures: erasedIDs("0", "1")}, nil, l, recs("a", 0, 0, 1))
	if len(l.batches) != 0 {
		t.Errorf("a batch of erased records only was loaded: %v", l.batches)
	}
}

// A subject erased while a batch's insert fails is left out of the next
// attempt: the sink checks the ledger again before each, and the attempt
// keeps the batch's token and the positions of the other records, so an
// earlier attempt that landed after all makes the retry a repeat. Layer 2
// does not claim the record left out.
func TestSinkChecksErasuresBeforeEachInsertAttempt(t *testing.T) {
	ledger := erasedIDs("1")
	var attempts []string
	l := &fakeLoader{}
	l.before = func(b Batch) error {
		attempts = append(attempts, fmt.Sprintf("%s skip=%v", b.Token, b.Skip))
		if len(attempts) == 1 {
			ledger.erase("3") // recorded while the insert fails
			return errors.New("ClickHouse refused the insert")
		}
		return nil
	}
	m := NewMetrics(nil)
	store := &fakeStore{hashes: map[string]string{}}
	fc := runScript(t, Config{Erasures: ledger, Metrics: m, Dedup: store}, nil, l, recs("a", 0, 0, 4))
	want := []string{"a/0/0-4 skip=[false true false false false]", "a/0/0-4 skip=[false true false true false]"}
	if fmt.Sprint(attempts) != fmt.Sprint(want) {
		t.Errorf("attempts %v, want %v", attempts, want)
	}
	wantBatches(t, l.batches, "a/0/0-4 n=3")
	if got := erasedCount(t, m, "public.a"); got != 2 {
		t.Errorf("walhouse_sink_erased_records_dropped_total = %v, want 2 (one when built, one before the retry)", got)
	}
	if store.remembered != 3 {
		t.Errorf("Layer 2 claimed %d eventIds, want 3: not the erased records'", store.remembered)
	}
	wantCommits(t, fc, "a/0@0 walhouse:batch-end=4", "a/0@5 ")

	// Every record erased meanwhile: nothing left to insert.
	ledger = erasedIDs()
	l = &fakeLoader{}
	tries := 0
	l.before = func(b Batch) error {
		if tries++; tries > 1 {
			return nil
		}
		ledger.erase("0", "1")
		return errors.New("ClickHouse refused the insert")
	}
	fc = runScript(t, Config{Erasures: ledger}, nil, l, recs("a", 0, 0, 1))
	wantBatches(t, l.batches)
	wantCommits(t, fc, "a/0@2 ")
}

// A ledger too old to load with stops the inserts, not the stream's
// order: the insert attempt waits, with nothing committed past the batch,
// and goes ahead once the ledger is read again, without the records that
// read erased and without spending a retry (no failed attempt, no
// backoff).
func TestSinkWaitsForAFreshLedger(t *testing.T) {
	ledger := erasedIDs()
	ledger.stale, ledger.readErases = true, []string{"2"}
	l := &fakeLoader{}
	attempts := 0
	l.before = func(Batch) error {
		attempts++
		if ledger.Fresh() != nil {
			t.Error("loaded while the ledger was stale")
		}
		return nil
	}
	fc := runScript(t, Config{Erasures: ledger}, nil, l, recs("a", 0, 0, 3))
	wantBatches(t, l.batches, "a/0/0-3 n=3")
	if ledger.waits != 1 || attempts != 1 {
		t.Errorf("the sink waited %d times for the ledger and made %d insert attempts, want 1 and 1", ledger.waits, attempts)
	}
	if got := fmt.Sprint(fc.commits); got != "[a/0@0 walhouse:batch-end=3 a/0@4 ]" {
		t.Errorf("commits %s: want the intent, then the offset after the batch once loaded", got)
	}
}

// Loadable leaves out what Skip marks and says where each record is.
func TestBatchLoadable(t *testing.T) {
	r := func(id string) *record.Record { return &record.Record{Values: []record.Value{{}, {Text: id}}} }
	b := Batch{Records: []*record.Record{r("0"), r("1"), r("2"), r("3")}}
	ids := func(rs []*record.Record) string {
		var out []string
		for _, x := range rs {
			out = append(out, x.Values[1].Text)
		}
		return strings.Join(out, ",")
	}
	for _, tc := range []struct {
		skip     []bool
		from, to int
		want     string
		pos      []int
	}{
		{nil, 0, 4, "0,1,2,3", nil},
		{[]bool{false, false, false, false}, 1, 3, "1,2", nil},
		{[]bool{false, true, false, true}, 0, 4, "0,2", []int{0, 2}},
		{[]bool{false, true, false, true}, 1, 2, "", nil},
		{[]bool{true, false, false, true}, 1, 4, "1,2", []int{1, 2}},
	} {
		b.Skip = tc.skip
		got, pos := b.Loadable(tc.from, tc.to)
		if ids(got) != tc.want || fmt.Sprint(pos) != fmt.Sprint(tc.pos) {
			t.Errorf("skip %v [%d:%d]: %q at %v, want %q at %v", tc.skip, tc.from, tc.to, ids(got), pos, tc.want, tc.pos)
		}
	}
}
