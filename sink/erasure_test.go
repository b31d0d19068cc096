package sink

import (
	"fmt"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"

	"github.com/walhouse/walhouse/record"
)

// erasedIDs takes the records whose id (the second value) it lists for
// records of an erased subject.
type erasedIDs map[string]bool

func (e erasedIDs) Erased(r *record.Record) bool { return e[r.Values[1].Text] }

// Records of erased subjects are never loaded, and their offsets are
// committed like the others'; the rest of the batch loads as usual.
func TestSinkDropsErasedRecords(t *testing.T) {
	l := &fakeLoader{}
	m := NewMetrics(nil)
	fc := runScript(t, Config{Erasures: erasedIDs{"1": true, "3": true}, Metrics: m}, nil, l, recs("a", 0, 0, 4))
	if want := []string{"a/0/0-4 n=3"}; fmt.Sprint(l.batches) != fmt.Sprint(want) {
		t.Errorf("batches %v, want %v (records 1 and 3 dropped)", l.batches, want)
	}
	var got dto.Metric
	if err := m.erased.WithLabelValues("public.a").Write(&got); err != nil || got.GetCounter().GetValue() != 2 {
		t.Errorf("walhouse_sink_erased_records_dropped_total = %v (%v), want 2", got.GetCounter().GetValue(), err)
	}
	if got := strings.Join(fc.commits, ";"); !strings.Contains(got, "a/0@5 ") {
		t.Errorf("commits %s: the partition is not committed past the dropped records", got)
	}
	l = &fakeLoader{}
	runScript(t, Config{Erasures: erasedIDs{"0": true, "1": true}}, nil, l, recs("a", 0, 0, 1))
	if len(l.batches) != 0 {
		t.Errorf("a batch of erased records only was loaded: %v", l.batches)
	}
}
