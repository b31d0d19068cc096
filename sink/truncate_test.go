package sink

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walhouse/walhouse/record"
)

// truncatingLoader is a fakeLoader that also applies truncate markers,
// logging them among the batches so tests see the order.
type truncatingLoader struct {
	*fakeLoader
	fail int // fail this many Truncate calls first, transiently
}

func (l *truncatingLoader) Truncate(_ context.Context, req TruncateRequest) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fail > 0 {
		l.fail--
		return errors.New("clickhouse is restarting")
	}
	l.batches = append(l.batches, fmt.Sprintf("truncate %s.%s<%s %s", req.Truncate.Source.Schema, req.Truncate.Source.Table, req.Truncate.LSN, req.Token))
	return nil
}

// marker is a truncate marker of table topic (schema public) at lsn.
func marker(topic string, partition int32, offset int64, lsn record.LSN) *kgo.Record {
	commit := time.Unix(1700000100, 0).UTC()
	tr := record.Truncate{Source: record.Source{Schema: "public", Table: topic}, LSN: lsn, CommitTime: commit, At: commit.Add(-time.Second)}
	kr := &kgo.Record{Topic: topic, Partition: partition, Offset: offset}
	for _, h := range tr.Headers() {
		kr.Headers = append(kr.Headers, kgo.RecordHeader{Key: h.Key, Value: []byte(h.Value)})
	}
	return kr
}

func concat(parts ...[]*kgo.Record) []*kgo.Record {
	var out []*kgo.Record
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// Each partition's marker is applied after the partition's records before
// it are loaded and before those after it, as batches named by their own
// offsets; a transient failure is retried; offsets are committed past it.
func TestSinkAppliesTruncateBetweenTheRecordsAroundIt(t *testing.T) {
	l := &truncatingLoader{fakeLoader: &fakeLoader{}, fail: 2}
	poll := concat(recs("a", 0, 0, 2), []*kgo.Record{marker("a", 0, 3, 0x1003)}, recs("a", 0, 4, 5),
		[]*kgo.Record{marker("a", 1, 0, 0x1003)}, recs("a", 1, 1, 1))
	fc := runTruncateScript(t, l, nil, poll)
	want := []string{
		"a/0/0-2 n=3", "truncate public.a<0/1003 a/0/3/truncate", "a/0/4-5 n=2",
		"truncate public.a<0/1003 a/1/0/truncate", "a/1/1-1 n=1",
	}
	wantBatches(t, l.batches, want...)
	wantCommits(t, fc, "a/0@0 walhouse:batch-end=5", "a/1@0 walhouse:batch-end=1", "a/0@6 ", "a/1@2 ")
}

// A sink whose loader cannot truncate stops at the marker: the records
// before it are loaded, nothing is committed past it.
func TestSinkStopsAtTruncateWithoutTruncater(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	l := &fakeLoader{}
	fc := &fakeConsumer{polls: [][]*kgo.Record{concat(recs("a", 0, 0, 1), []*kgo.Record{marker("a", 0, 2, 0x1002)}, recs("a", 0, 3, 3))}, cancel: cancel}
	s, err := New(fc, fakeOffsets{}, l, Config{Group: "g", Schemas: testSchemas()})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Run(ctx); !errors.Is(err, ErrNoTruncater) {
		t.Fatalf("Run = %v, want ErrNoTruncater", err)
	}
	if fmt.Sprint(l.batches) != "[a/0/0-1 n=2]" {
		t.Errorf("loads %v, want only the records before the marker", l.batches)
	}
	for _, c := range fc.commits {
		if !strings.Contains(c, intentPrefix) {
			t.Errorf("committed %s past a marker that was not applied", c)
		}
	}
}

// A malformed marker goes to the dead letters like any record that can
// never be loaded, and still cuts the batch.
func TestSinkDeadLettersMalformedTruncate(t *testing.T) {
	l := &truncatingLoader{fakeLoader: &fakeLoader{}}
	dead := &fakeDead{}
	bad := marker("a", 0, 2, 0x1002)
	for i := range bad.Headers {
		if bad.Headers[i].Key == record.HeaderTruncate {
			bad.Headers[i].Value = []byte("not a time")
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fc := &fakeConsumer{polls: [][]*kgo.Record{concat(recs("a", 0, 0, 1), []*kgo.Record{bad}, recs("a", 0, 3, 3))}, cancel: cancel}
	s, err := New(fc, fakeOffsets{}, l, Config{Group: "g", DeadLetters: dead, Schemas: testSchemas()})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Run(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v", err)
	}
	if len(dead.got) != 1 || dead.got[0].Offset != 2 || !errors.Is(dead.got[0].Err, record.ErrInvalid) {
		t.Errorf("dead letters %+v, want the marker at offset 2", dead.got)
	}
	if fmt.Sprint(l.batches) != "[a/0/0-1 n=2 a/0/3-3 n=1]" {
		t.Errorf("loads %v", l.batches)
	}
}

// A marker first in a chunk makes no empty batch, and the chunk ends of an
// interrupted flush (its intent) still cut the batches exactly there.
func TestSinkTruncateAtChunkEdgesAndIntents(t *testing.T) {
	poll := concat([]*kgo.Record{marker("a", 0, 10, 0x2000)}, recs("a", 0, 11, 12), []*kgo.Record{marker("a", 0, 13, 0x2001)}, recs("a", 0, 14, 15))
	l := &truncatingLoader{fakeLoader: &fakeLoader{}}
	runTruncateScript(t, l, nil, poll)
	want := []string{"truncate public.a<0/2000 a/0/10/truncate", "a/0/11-12 n=2", "truncate public.a<0/2001 a/0/13/truncate", "a/0/14-15 n=2"}
	wantBatches(t, l.batches, want...)

	l = &truncatingLoader{fakeLoader: &fakeLoader{}}
	offsets := kadm.OffsetResponses{"a": {0: {Offset: kadm.Offset{Topic: "a", Partition: 0, At: 10, Metadata: intentPrefix + "11,13"}}}}
	runTruncateScript(t, l, offsets, poll)
	want = []string{"truncate public.a<0/2000 a/0/10/truncate", "a/0/11-11 n=1", "a/0/12-12 n=1", "truncate public.a<0/2001 a/0/13/truncate", "a/0/14-15 n=2"}
	if fmt.Sprint(l.batches) != fmt.Sprint(want) {
		t.Errorf("after a crash: loads\n %v\nwant\n %v", l.batches, want)
	}
}

// runTruncateScript runs a sink over polls with a loader that truncates.
func runTruncateScript(t *testing.T, l Loader, offsets kadm.OffsetResponses, polls ...[]*kgo.Record) *fakeConsumer {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fc := &fakeConsumer{polls: polls, cancel: cancel}
	s, err := New(fc, fakeOffsets{offsets}, l, Config{Group: "g", MaxBatchRecords: 100, RetryBackoff: time.Millisecond, MaxRetryBackoff: time.Millisecond, Schemas: testSchemas()})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Run(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v", err)
	}
	return fc
}
