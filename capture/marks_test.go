package capture

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walhouse/walhouse/record"
)

func TestMarksWakeAfterAChangeOnly(t *testing.T) {
	t0 := time.Unix(100, 0)
	m := marks{interval: 100 * time.Millisecond}
	if w := m.wake(); !w.IsZero() {
		t.Fatalf("wake %v before any change, want none", w)
	}
	m.touch("public.a", t0)
	if w := m.wake(); !w.Equal(t0.Add(100 * time.Millisecond)) {
		t.Errorf("wake %v after a change at %v, want one interval later", w, t0)
	}
	// Further changes do not postpone the round: under load, marks still
	// come once per interval.
	m.touch("public.b", t0.Add(50*time.Millisecond))
	if w := m.wake(); !w.Equal(t0.Add(100 * time.Millisecond)) {
		t.Errorf("wake %v after a second change, want the first's round", w)
	}

	off := marks{}
	off.touch("public.a", t0)
	if w := off.wake(); !w.IsZero() || len(off.changed) != 0 {
		t.Errorf("marks off (interval 0): wake %v, changed %v; want nothing", w, off.changed)
	}
}

// markStream is a stream that captures tables a and b into 2 partitions
// each, with a mark pending at lsn for the given tables.
func markStream(prod *heldProducer, lsn record.LSN, tables ...string) *stream {
	cfg := defaults()
	cfg.partitions = 2
	s := &stream{
		c:          &Capturer{cfg: cfg, producer: prod, log: slog.New(slog.DiscardHandler)},
		tables:     []string{"public.a", "public.b"},
		parts:      map[string]int32{},
		acks:       newAckTracker(10),
		produceCtx: context.Background(),
	}
	s.tr = newTranslator(&s.c.cfg, "", nil, s, s, nil, nil)
	s.marks = marks{interval: 100 * time.Millisecond, pending: &walBeat{at: time.Unix(200, 0), lsn: lsn}, tables: tables}
	return s
}

// marked returns the partitions each table's mark went to, and checks the
// marks' position.
func marked(t *testing.T, prod *heldProducer, lsn record.LSN) map[string][]int32 {
	t.Helper()
	got := map[string][]int32{}
	for _, r := range prod.records {
		if h := header(r, record.HeaderLSN); h != lsn.String() {
			t.Errorf("mark to %s/%d at %s, want %s", r.Topic, r.Partition, h, lsn)
		}
		if header(r, record.HeaderHeartbeat) == "" {
			t.Errorf("mark to %s/%d is not a heartbeat", r.Topic, r.Partition)
		}
		table := header(r, record.HeaderTable)
		got[table] = append(got[table], r.Partition)
	}
	return got
}

func header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

func TestMarkSentOnceTheStreamPassesItOutsideATransaction(t *testing.T) {
	const lsn = record.LSN(1000)
	ctx := context.Background()
	prod := &heldProducer{}
	s := markStream(prod, lsn, "public.a")

	// A keepalive short of the mark, or one at it while a transaction is
	// being received, leaves it pending: a transaction that committed
	// before it may not be produced yet.
	if err := s.handleCopyData(ctx, keepalive(lsn-1)); err != nil {
		t.Fatal(err)
	}
	s.tr.inTx = true
	if err := s.handleCopyData(ctx, keepalive(lsn+10)); err != nil {
		t.Fatal(err)
	}
	if len(prod.records) != 0 || s.marks.pending == nil {
		t.Fatalf("%d marks sent before the stream passed the mark outside a transaction, want none", len(prod.records))
	}

	s.tr.inTx = false
	if err := s.handleCopyData(ctx, keepalive(lsn)); err != nil {
		t.Fatal(err)
	}
	if s.marks.pending != nil {
		t.Error("the mark is still pending once the stream reached it")
	}
	// Every partition of the marked table, none of the table not changed.
	if got, want := marked(t, prod, lsn), map[string][]int32{"public.a": {0, 1}}; !equalParts(got, want) {
		t.Errorf("marks went to %v, want %v", got, want)
	}
	if n := s.c.marks.Load(); n != 1 {
		t.Errorf("marks counted %d, want 1", n)
	}
	// Marks are durable like records: the position confirmed waits for
	// Kafka.
	prod.ackAll()
	if durable, _ := s.acks.state(); durable != lsn {
		t.Errorf("durable %s once the marks are acknowledged, want %s", durable, lsn)
	}
}

func TestMarkSkipsTablesLeftOut(t *testing.T) {
	const lsn = record.LSN(1000)
	prod := &heldProducer{}
	s := markStream(prod, lsn, "public.a", "public.b", "public.gone")
	if err := s.markDue(context.Background(), lsn+1); err != nil {
		t.Fatal(err)
	}
	if got, want := marked(t, prod, lsn), map[string][]int32{"public.a": {0, 1}, "public.b": {0, 1}}; !equalParts(got, want) {
		t.Errorf("marks went to %v, want %v", got, want)
	}
}

func equalParts(a, b map[string][]int32) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		w := slices.Clone(v)
		slices.Sort(w)
		if !slices.Equal(w, b[k]) {
			return false
		}
	}
	return true
}
