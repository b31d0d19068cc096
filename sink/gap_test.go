package sink

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

func TestFindGap(t *testing.T) {
	at := func(offsets ...int64) []*kgo.Record {
		var out []*kgo.Record
		for _, o := range offsets {
			out = append(out, &kgo.Record{Offset: o})
		}
		return out
	}
	for _, c := range []struct {
		name           string
		next           int64
		recs           []*kgo.Record
		from, to, want int64
		at             int
	}{
		{name: "contiguous from the commit", next: 5, recs: at(5, 6, 7), at: -1},
		{name: "no commit yet", next: -1, recs: at(40, 41), at: -1},
		{name: "committed offset below the log start", next: 5, recs: at(9, 10), from: 5, to: 9, at: 0},
		{name: "a jump while reading", next: 5, recs: at(5, 6, 9, 10), from: 7, to: 9, at: 2},
		{name: "a jump without a commit", next: -1, recs: at(3, 7), from: 4, to: 7, at: 1},
		{name: "only the first gap", next: 0, recs: at(0, 2, 5), from: 1, to: 2, at: 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			from, to, i := findGap(c.next, c.recs)
			if i != c.at || (i >= 0 && (from != c.from || to != c.to)) {
				t.Errorf("findGap = %d-%d at %d, want %d-%d at %d", from, to, i, c.from, c.to, c.at)
			}
		})
	}
}

func TestTableOfTopic(t *testing.T) {
	for _, c := range []struct{ prefix, topic, want string }{
		{"wh", "wh.public.orders", "public.orders"},
		{"wh", "other.public.orders", ""},
		{"wh", "wh.orders", ""},
		{"wh", "wh.a.b.c", "a.b.c"}, // table "b.c" of schema "a": a schema with a dot gets a hashed name
		{"", "wh.public.orders", ""},
	} {
		if got := tableOfTopic(c.prefix, c.topic); got != c.want {
			t.Errorf("tableOfTopic(%q, %q) = %q, want %q", c.prefix, c.topic, got, c.want)
		}
	}
}

// runGapScript runs a sink over polls as runScript does and returns it with
// its consumer.
func runGapScript(t *testing.T, cfg Config, offsets kadm.OffsetResponses, l Loader, polls ...[]*kgo.Record) (*Sink, *fakeConsumer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fc := &fakeConsumer{polls: polls, cancel: cancel}
	cfg.Group = "g"
	cfg.Schemas = testSchemas()
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics(nil)
	}
	s, err := New(fc, fakeOffsets{offsets}, l, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Run(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v", err)
	}
	return s, fc
}

func committedAt(topic string, partition int32, at int64) kadm.OffsetResponses {
	return kadm.OffsetResponses{topic: {partition: {Offset: kadm.Offset{Topic: topic, Partition: partition, At: at}}}}
}

// The case: the sink was stopped at offset 10, retention deleted
// offsets 10 to 14, and franz-go resumed at the log start, 15. Nothing of
// the partition may load or commit; the other partition goes on.
func TestSinkStopsAtARetentionGap(t *testing.T) {
	l := &fakeLoader{}
	m := NewMetrics(nil)
	s, fc := runGapScript(t, Config{Metrics: m}, committedAt("a", 0, 10), l,
		append(recs("a", 0, 15, 17), recs("a", 1, 0, 1)...), recs("a", 0, 18, 19))
	wantBatches(t, l.batches, "a/1/0-1 n=2")
	wantPaused(t, fc, "a/0")
	for _, c := range fc.commits {
		if strings.HasPrefix(c, "a/0@") {
			t.Errorf("committed past the gap: %s", c)
		}
	}
	gaps := s.Gaps()
	if len(gaps) != 1 || gaps[0].From != 10 || gaps[0].To != 15 || gaps[0].Lost() != 5 {
		t.Fatalf("Gaps = %+v, want a/0 10-15", gaps)
	}
	if v := value(t, m.offsetsLost.WithLabelValues("a", "0")); v != 5 {
		t.Errorf("offsets lost = %v, want 5", v)
	}
	if v := value(t, m.partitionsLost.WithLabelValues("a", "0")); v != 1 {
		t.Errorf("partitions lost = %v, want 1", v)
	}
}

// Retention overtook the partition while it was read: what came before the
// jump loads and commits, nothing after it.
func TestSinkStopsAtAJumpWhileReading(t *testing.T) {
	l := &fakeLoader{}
	s, fc := runGapScript(t, Config{}, committedAt("a", 0, 0), l, recs("a", 0, 0, 4), append(recs("a", 0, 5, 6), recs("a", 0, 9, 10)...))
	wantBatches(t, l.batches, "a/0/0-4 n=5", "a/0/5-6 n=2")
	wantCommits(t, fc, "a/0@7 ")
	for _, c := range fc.commits {
		if strings.HasPrefix(c, "a/0@") && !strings.HasPrefix(c, "a/0@0 ") && !strings.HasPrefix(c, "a/0@5 ") && !strings.HasPrefix(c, "a/0@7 ") {
			t.Errorf("committed past the gap: %s", c)
		}
	}
	if g := s.Gaps(); len(g) != 1 || g[0].From != 7 || g[0].To != 9 {
		t.Errorf("Gaps = %+v, want a/0 7-9", g)
	}
}

// An operator who copied the table again lets the sink load on.
func TestSinkLoadsOnAfterAnAcceptedGap(t *testing.T) {
	l := &fakeLoader{}
	m := NewMetrics(nil)
	accept := func(topic string, partition int32) bool { return topic == "a" && partition == 0 }
	s, fc := runGapScript(t, Config{Metrics: m, AcceptGap: accept}, committedAt("a", 0, 10), l, recs("a", 0, 15, 17))
	wantBatches(t, l.batches, "a/0/15-17 n=3")
	wantCommits(t, fc, "a/0@18 ")
	if g := s.Gaps(); len(g) != 0 {
		t.Errorf("Gaps = %+v after an accepted gap, want none", g)
	}
	if v := value(t, m.offsetsLost.WithLabelValues("a", "0")); v != 5 {
		t.Errorf("offsets lost = %v, want 5: an accepted gap is counted too", v)
	}
}

// A partition assigned again after a revocation starts at its committed
// offset once more; that is no gap.
func TestSinkNoGapAfterReassignment(t *testing.T) {
	l := &fakeLoader{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fc := &fakeConsumer{polls: [][]*kgo.Record{recs("a", 0, 10, 12), recs("a", 0, 10, 14)}, cancel: cancel}
	s, err := New(fc, fakeOffsets{committedAt("a", 0, 10)}, l, Config{Group: "g", Schemas: testSchemas(), RetryBackoff: time.Millisecond, MaxRetryBackoff: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	l.before = func(b Batch) error {
		if b.Token == "a/0/10-12" {
			s.OnRevoked(ctx, nil, map[string][]int32{"a": {0}})
		}
		return nil
	}
	if err := s.Run(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v", err)
	}
	if g := s.Gaps(); len(g) != 0 {
		t.Errorf("Gaps = %+v, want none", g)
	}
}

// value reads a counter's or gauge's value.
func value(t *testing.T, m prometheus.Metric) float64 {
	t.Helper()
	var got dto.Metric
	if err := m.Write(&got); err != nil {
		t.Fatal(err)
	}
	return got.GetCounter().GetValue() + got.GetGauge().GetValue()
}

// fakeAdmin answers a topic's cleanup.policy and its partitions' log
// start.
type fakeAdmin struct {
	policy string
	start  int64
}

func (f fakeAdmin) DescribeTopicConfigs(_ context.Context, topics ...string) (kadm.ResourceConfigs, error) {
	v := f.policy
	return kadm.ResourceConfigs{{Name: topics[0], Configs: []kadm.Config{{Key: "cleanup.policy", Value: &v}}}}, nil
}

func (f fakeAdmin) ListStartOffsets(_ context.Context, topics ...string) (kadm.ListedOffsets, error) {
	return kadm.ListedOffsets{topics[0]: {0: {Topic: topics[0], Partition: 0, Offset: f.start}}}, nil
}

// In a topic an administrator made compacted, a jump at or past the log
// start is compaction's work: everything loads. One below the log start
// is records retention deleted, compacted or not.
func TestSinkTellsCompactionFromLoss(t *testing.T) {
	for _, c := range []struct {
		name  string
		admin fakeAdmin
		lost  bool
	}{
		{"compacted, log start at 0", fakeAdmin{policy: "compact", start: 0}, false},
		{"compacted and deleted past the gap", fakeAdmin{policy: "compact,delete", start: 9}, true},
		{"not compacted", fakeAdmin{policy: "delete", start: 0}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := &fakeLoader{}
			s, _ := runGapScript(t, Config{Admin: c.admin}, committedAt("a", 0, 0), l, append(recs("a", 0, 0, 2), recs("a", 0, 9, 10)...))
			if got := len(s.Gaps()) > 0; got != c.lost {
				t.Errorf("gap found %v, want %v (batches %v)", got, c.lost, l.batches)
			}
		})
	}
}

// runAssigned runs a sink as runGapScript does, with partition a/0
// assigned before the first poll.
func runAssigned(t *testing.T, cfg Config, offsets kadm.OffsetResponses, l Loader, polls ...[]*kgo.Record) *Sink {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fc := &fakeConsumer{polls: polls, cancel: cancel}
	cfg.Group = "g"
	cfg.Schemas = testSchemas()
	s, err := New(fc, fakeOffsets{offsets}, l, cfg)
	if err != nil {
		t.Fatal(err)
	}
	s.OnAssigned(ctx, nil, map[string][]int32{"a": {0}})
	if err := s.Run(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v", err)
	}
	return s
}

// A partition whose committed offset is below its log start is a gap at
// its assignment, before any record follows it (capture down, nothing
// written since), and it is counted once when records follow.
func TestSinkFindsAGapAtAssignment(t *testing.T) {
	m := NewMetrics(nil)
	s := runAssigned(t, Config{Metrics: m, Admin: fakeAdmin{policy: "delete", start: 15}}, committedAt("a", 0, 10), &fakeLoader{}, recs("b", 0, 0, 1))
	if g := s.Gaps(); len(g) != 1 || g[0].Topic != "a" || g[0].From != 10 || g[0].To != 15 {
		t.Fatalf("Gaps = %+v, want a/0 10-15 with no record of a/0 read", g)
	}
	m = NewMetrics(nil)
	l := &fakeLoader{}
	accept := func(string, int32) bool { return true }
	s = runAssigned(t, Config{Metrics: m, Admin: fakeAdmin{policy: "delete", start: 15}, AcceptGap: accept}, committedAt("a", 0, 10), l, recs("a", 0, 15, 16))
	wantBatches(t, l.batches, "a/0/15-16 n=2")
	if v := value(t, m.offsetsLost.WithLabelValues("a", "0")); v != 5 || len(s.Gaps()) != 0 {
		t.Errorf("offsets lost %v, gaps %+v; want 5 counted once and the gap accepted", v, s.Gaps())
	}
}
