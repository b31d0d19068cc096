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
// each, with a mark placed at placed, pending at lsn, and the given tables
// changed just before it was placed.
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
	s.marks = marks{interval: 100 * time.Millisecond, changed: map[string]time.Time{}}
	for _, t := range tables {
		s.marks.changed[t] = placed.Add(-time.Millisecond)
	}
	s.marks.place(walBeat{at: time.Unix(200, 0), lsn: lsn}, placed)
	return s
}

var placed = time.Unix(200, 0)

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
	if len(prod.records) != 0 || len(s.marks.pending) != 1 {
		t.Fatalf("%d marks sent before the stream passed the mark outside a transaction, want none", len(prod.records))
	}

	s.tr.inTx = false
	if err := s.handleCopyData(ctx, keepalive(lsn)); err != nil {
		t.Fatal(err)
	}
	if len(s.marks.pending) != 0 {
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

// With decoding behind the WAL, a token's mark must be one placed right
// after it, not after the write's change was received: rounds place marks
// while others are pending.
func TestMarksPlacedEveryRoundWhileOthersPend(t *testing.T) {
	const step = 100 * time.Millisecond
	t0 := time.Unix(100, 0)
	m := marks{interval: step}
	m.touch("public.a", t0)
	for i := 1; i <= 5; i++ {
		now := t0.Add(time.Duration(i) * step)
		round, place := m.due(now)
		if !round || !place {
			t.Fatalf("round %d: due %v, place %v; want a new mark every round while public.a changed within %v", i, round, place, markWindow)
		}
		m.place(walBeat{lsn: record.LSN(1000 * i), at: now}, now)
	}
	if len(m.pending) != 5 {
		t.Fatalf("%d marks pending, want 5", len(m.pending))
	}
	// The WAL did not move: no new mark.
	m.place(walBeat{lsn: 5000}, t0.Add(6*step))
	if len(m.pending) != 5 {
		t.Errorf("%d marks pending after a mark at the newest's position, want 5", len(m.pending))
	}

	// The stream passes three at once: one heartbeat, at the last.
	last, tables, ok := m.passed(3500)
	if !ok || last.lsn != 3000 || !slices.Equal(tables, []string{"public.a"}) {
		t.Errorf("passed 0/DAC: %v, %v, %v; want the mark at 0/BB8 for public.a", last, tables, ok)
	}
	if len(m.pending) != 2 || m.pending[0].lsn != 4000 {
		t.Errorf("pending %v after 0/DAC, want the marks at 0/FA0 and 0/1388", m.pending)
	}
	if _, _, ok := m.passed(3999); ok {
		t.Error("passed 0/F9F: a mark, want none")
	}
}

// A table stays known as long as a pending mark needs it, even when
// decoding lags longer than markWindow; new marks are placed only while a
// table changed within markWindow.
func TestMarksKeepTablesPendingMarksNeed(t *testing.T) {
	t0 := time.Unix(100, 0)
	m := marks{interval: 100 * time.Millisecond}
	m.touch("public.a", t0)
	m.due(t0.Add(100 * time.Millisecond))
	m.place(walBeat{lsn: 1000}, t0.Add(100*time.Millisecond))
	m.touch("public.b", t0.Add(500*time.Millisecond))

	late := t0.Add(5 * time.Second)
	round, place := m.due(late)
	if !round || place {
		t.Errorf("at +5s: due %v, place %v; want a round (a mark pends), no new mark", round, place)
	}
	if len(m.changed) != 2 {
		t.Errorf("changed %v at +5s, want both tables: the pending mark was placed within %v of their changes", m.changed, markWindow)
	}
	_, tables, ok := m.passed(1000)
	if !ok || !slices.Equal(tables, []string{"public.a", "public.b"}) {
		t.Errorf("passed the mark: %v, %v; want public.a and public.b", tables, ok)
	}
	m.due(late.Add(time.Second))
	if len(m.changed) != 0 || !m.wake().IsZero() {
		t.Errorf("changed %v, wake %v once no mark pends, long after the changes; want nothing", m.changed, m.wake())
	}

	// A table changed more than markWindow before a mark was placed does
	// not get it.
	m.touch("public.c", late)
	m.due(late.Add(100 * time.Millisecond))
	m.touch("public.d", late.Add(2500*time.Millisecond))
	m.due(late.Add(2600 * time.Millisecond))
	m.place(walBeat{lsn: 2000}, late.Add(2600*time.Millisecond))
	if _, tables, _ := m.passed(2000); !slices.Equal(tables, []string{"public.d"}) {
		t.Errorf("a mark placed 2.6 s after public.c's change went to %v, want public.d only", tables)
	}
}

func TestMarksPendingBounded(t *testing.T) {
	t0 := time.Unix(100, 0)
	m := marks{interval: 100 * time.Millisecond}
	for i := range maxPendingMarks + 10 {
		m.place(walBeat{lsn: record.LSN(i + 1)}, t0.Add(time.Duration(i)*time.Millisecond))
	}
	if len(m.pending) != maxPendingMarks {
		t.Fatalf("%d marks pending, want at most %d", len(m.pending), maxPendingMarks)
	}
	newest := m.pending[maxPendingMarks-1]
	if newest.lsn != maxPendingMarks+10 || !newest.placed.Equal(t0.Add((maxPendingMarks-1)*time.Millisecond)) {
		t.Errorf("newest mark %v placed %v: want the last position, placed when the one it moved was", newest.lsn, newest.placed)
	}
}
