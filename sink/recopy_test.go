package sink

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walhouse/walhouse/record"
)

// fakeRecopies is the re-copy topic in memory: what Request and Done write
// is read back by ReadNew, as from Kafka.
type fakeRecopies struct {
	mu      sync.Mutex
	entries []recopyEntry
	read    int
	done    []string
}

type recopyEntry struct {
	table string
	req   *record.RecopyRequest
}

func (f *fakeRecopies) Request(_ context.Context, req record.RecopyRequest) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.entries = append(f.entries, recopyEntry{req.Table, &req})
	return nil
}

func (f *fakeRecopies) Done(_ context.Context, table string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.entries = append(f.entries, recopyEntry{table, nil})
	f.done = append(f.done, table)
	return nil
}

func (f *fakeRecopies) ReadNew(_ context.Context, each func(string, *record.RecopyRequest)) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for ; f.read < len(f.entries); f.read++ {
		each(f.entries[f.read].table, f.entries[f.read].req)
	}
	return nil
}

// fakeBarrier records the partitions that passed each request.
type fakeBarrier struct {
	mu     sync.Mutex
	passed map[string]map[int32]bool
}

func (f *fakeBarrier) PassRecopy(_ context.Context, d record.RecopyDone, partition int32) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.passed == nil {
		f.passed = map[string]map[int32]bool{}
	}
	if f.passed[d.ID] == nil {
		f.passed[d.ID] = map[int32]bool{}
	}
	f.passed[d.ID][partition] = true
	return len(f.passed[d.ID]) >= int(d.Partitions), nil
}

// fakeMarks records the watermarks written, by table and partition.
type fakeMarks struct {
	mu    sync.Mutex
	marks []string
}

func (f *fakeMarks) MarkLoaded(_ context.Context, ms []Watermark) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, m := range ms {
		f.marks = append(f.marks, fmt.Sprintf("%s.%s/%d", m.Source.Schema, m.Source.Table, m.Partition))
	}
	return nil
}

const recopyTopicOfA = "wh.public.a"

// recsOfA are records of table public.a on its topic under prefix wh.
func recsOfA(partition int32, from, to int64) []*kgo.Record {
	out := recs("a", partition, from, to)
	for _, r := range out {
		r.Topic = recopyTopicOfA
	}
	return out
}

// doneMarker is the re-copy done marker of request id on partition.
func doneMarker(partition int32, offset int64, id string, lsn record.LSN, partitions int32) *kgo.Record {
	d := record.RecopyDone{Source: record.Source{Schema: "public", Table: "a"}, ID: id, LSN: lsn, At: time.Now().UTC(), Partitions: partitions}
	kr := &kgo.Record{Topic: recopyTopicOfA, Partition: partition, Offset: offset}
	for _, h := range d.Headers() {
		kr.Headers = append(kr.Headers, kgo.RecordHeader{Key: h.Key, Value: []byte(h.Value)})
	}
	return kr
}

func runRecopyScript(t *testing.T, cfg Config, offsets kadm.OffsetResponses, l Loader, polls ...[]*kgo.Record) (*Sink, *fakeConsumer) {
	t.Helper()
	cfg.TopicPrefix = "wh"
	cfg.RetryBackoff, cfg.MaxRetryBackoff = time.Millisecond, time.Millisecond
	return runGapScript(t, cfg, offsets, l, polls...)
}

// With Recopies, a gap asks for a copy of the table, durably, before
// anything after it loads; loading goes on, the table's watermarks are
// held, and the gap shows as recovering.
func TestSinkRecopiesAtAGap(t *testing.T) {
	l := &fakeLoader{}
	rc := &fakeRecopies{}
	marks := &fakeMarks{}
	m := NewMetrics(nil)
	s, fc := runRecopyScript(t, Config{Metrics: m, Recopies: rc, Watermarks: marks}, committedAt(recopyTopicOfA, 0, 10), l,
		concat(recsOfA(0, 15, 17), recsOfA(1, 0, 1)))
	wantBatches(t, l.batches, "wh.public.a/0/15-17 n=3", "wh.public.a/1/0-1 n=2")
	wantCommits(t, fc, "wh.public.a/0@18 ")
	if len(fc.paused) != 0 {
		t.Errorf("paused %v, want nothing paused", fc.paused)
	}
	if len(rc.entries) != 1 || rc.entries[0].req == nil {
		t.Fatalf("re-copy topic %+v, want one request", rc.entries)
	}
	req := *rc.entries[0].req
	if req.ID != "wh.public.a/0/10-15" || req.Table != "public.a" || req.From != 10 || req.To != 15 {
		t.Errorf("request %+v", req)
	}
	if len(marks.marks) != 0 {
		t.Errorf("watermarks %v written while the table recovers, want none", marks.marks)
	}
	g := s.Gaps()
	if len(g) != 1 || g[0].Recopy != req.ID || g[0].Table != "public.a" {
		t.Errorf("Gaps = %+v, want public.a recovering", g)
	}
	if v := value(t, m.recopiesPending.WithLabelValues("public.a")); v != 1 {
		t.Errorf("recopies pending = %v, want 1", v)
	}
	if v := value(t, m.partitionsLost.WithLabelValues(recopyTopicOfA, "0")); v != 0 {
		t.Errorf("partitions lost = %v, want 0: loading goes on", v)
	}
}

// A sink that starts with a request pending (its offsets past the gap)
// holds the table's watermarks from its first load.
func TestSinkHoldsAPendingRecopyAfterARestart(t *testing.T) {
	rc := &fakeRecopies{}
	_ = rc.Request(context.Background(), record.RecopyRequest{ID: "x", Table: "public.a", Topic: recopyTopicOfA, From: 1, To: 2})
	marks := &fakeMarks{}
	runRecopyScript(t, Config{Recopies: rc, Watermarks: marks}, committedAt(recopyTopicOfA, 0, 20), &fakeLoader{}, recsOfA(0, 20, 22))
	if len(marks.marks) != 0 {
		t.Errorf("watermarks %v written while the table recovers, want none", marks.marks)
	}
	// Without the request, the same load writes them.
	marks = &fakeMarks{}
	runRecopyScript(t, Config{Recopies: &fakeRecopies{}, Watermarks: marks}, committedAt(recopyTopicOfA, 0, 20), &fakeLoader{}, recsOfA(0, 20, 22))
	if len(marks.marks) == 0 {
		t.Error("no watermark written without a pending request")
	}
}

// The sweep waits for every partition's done marker, each after the
// records before it; it runs once, at the copy's position; then the
// request is marked done and the held watermarks are written.
func TestSinkSweepsOnceEveryPartitionPassedTheRecopy(t *testing.T) {
	l := &truncatingLoader{fakeLoader: &fakeLoader{}, fail: 1}
	rc := &fakeRecopies{}
	_ = rc.Request(context.Background(), record.RecopyRequest{ID: "r1", Table: "public.a", Topic: recopyTopicOfA, From: 1, To: 2})
	marks := &fakeMarks{}
	bar := &fakeBarrier{}
	m := NewMetrics(nil)
	poll1 := concat(recsOfA(0, 0, 1), []*kgo.Record{doneMarker(0, 2, "r1", 0x2000, 2)}, recsOfA(0, 3, 3))
	poll2 := concat(recsOfA(1, 0, 0), []*kgo.Record{doneMarker(1, 1, "r1", 0x2000, 2)}, recsOfA(1, 2, 2))
	s, _ := runRecopyScript(t, Config{Metrics: m, Recopies: rc, RecopyBarrier: bar, Watermarks: marks, InsertParallelism: 1}, nil, l, poll1, poll2)
	wantBatches(t, l.batches,
		"wh.public.a/0/0-1 n=2", "wh.public.a/0/3-3 n=1",
		"wh.public.a/1/0-0 n=1", "truncate public.a<0/2000 recopy/r1", "wh.public.a/1/2-2 n=1")
	if !slices.Equal(rc.done, []string{"public.a"}) {
		t.Errorf("done %v, want public.a", rc.done)
	}
	if g := s.Gaps(); len(g) != 0 {
		t.Errorf("Gaps = %+v after the recovery, want none", g)
	}
	if !slices.Contains(marks.marks, "public.a/0") || !slices.Contains(marks.marks, "public.a/1") {
		t.Errorf("watermarks %v after the recovery, want both partitions", marks.marks)
	}
	if v := value(t, m.recopiesPending.WithLabelValues("public.a")); v != 0 {
		t.Errorf("recopies pending = %v, want 0", v)
	}
	if v := value(t, m.recopiesDone.WithLabelValues("public.a")); v != 1 {
		t.Errorf("recopies done = %v, want 1", v)
	}
}

// A marker of an older request sweeps (harmless) but leaves a newer one
// pending; a forged marker for another table's topic is dead-lettered.
func TestSinkRecopyMarkerOfAnOlderRequestOrAnotherTable(t *testing.T) {
	l := &truncatingLoader{fakeLoader: &fakeLoader{}}
	rc := &fakeRecopies{}
	_ = rc.Request(context.Background(), record.RecopyRequest{ID: "new", Table: "public.a", Topic: recopyTopicOfA, From: 1, To: 2})
	forged := doneMarker(0, 1, "old", 0x2000, 1)
	forged.Topic = "wh.public.b"
	dl := &fakeDead{}
	s, _ := runRecopyScript(t, Config{Recopies: rc, RecopyBarrier: &fakeBarrier{}, DeadLetters: dl}, nil, l,
		[]*kgo.Record{doneMarker(0, 0, "old", 0x2000, 1), forged})
	wantBatches(t, l.batches, "truncate public.a<0/2000 recopy/old")
	if len(rc.done) != 0 {
		t.Errorf("done %v, want the newer request pending", rc.done)
	}
	if g := s.Gaps(); len(g) != 1 || g[0].Recopy != "new" {
		t.Errorf("Gaps = %+v, want the newer request", g)
	}
	if len(dl.got) != 1 {
		t.Errorf("dead letters %d, want the forged marker", len(dl.got))
	}
}
