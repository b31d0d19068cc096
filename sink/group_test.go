package sink

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// combined is a Config that groups partitions.
func combined(max int) Config { return Config{CombinePartitions: true, MaxBatchRecords: max} }

// TestSinkCombinesPartitions: a flush's chunks of one topic load as one
// batch named by every member's positions, up to MaxBatchRecords rows; a
// chunk with a marker, and a chunk of another topic, load apart.
func TestSinkCombinesPartitions(t *testing.T) {
	for name, tc := range map[string]struct {
		cfg     Config
		poll    []*kgo.Record
		batches []string
		commits []string
	}{
		"one insert for three partitions": {
			cfg:     combined(100),
			poll:    concat(recs("a", 0, 0, 2), recs("a", 1, 10, 11), recs("a", 2, 20, 20)),
			batches: []string{"a/0:0-2+1:10-11+2:20-20 n=6"},
			commits: []string{"a/0@0 walhouse:batch-end=2~0:2*3", "a/1@10 walhouse:batch-end=11~0:2*3", "a/2@20 walhouse:batch-end=20~0:2*3", "a/0@3 ", "a/1@12 ", "a/2@21 "},
		},
		"groups within MaxBatchRecords": {
			cfg:     combined(4),
			poll:    concat(recs("a", 0, 0, 1), recs("a", 1, 10, 11), recs("a", 2, 20, 22)),
			batches: []string{"a/0:0-1+1:10-11 n=4", "a/2/20-22 n=3"},
			commits: []string{"a/0@0 walhouse:batch-end=1~0:1*2", "a/1@10 walhouse:batch-end=11~0:1*2", "a/2@20 walhouse:batch-end=22;"},
		},
		"second chunks in a second group": {
			cfg:     combined(2),
			poll:    concat(recs("a", 0, 0, 2), recs("a", 1, 10, 12)),
			batches: []string{"a/0/0-1 n=2", "a/1/10-11 n=2", "a/0:2-2+1:12-12 n=2"},
			commits: []string{"a/0@0 walhouse:batch-end=1,2~0:2*2;", "a/1@10 walhouse:batch-end=11,12~0:2*2;"},
		},
		"topics apart": {
			cfg:     combined(100),
			poll:    concat(recs("a", 0, 0, 0), recs("b", 0, 5, 5), recs("a", 1, 7, 7)),
			batches: []string{"a/0:0-0+1:7-7 n=2", "b/0/5-5 n=1"},
		},
		"not combined": {
			cfg:     Config{MaxBatchRecords: 100},
			poll:    concat(recs("a", 0, 0, 1), recs("a", 1, 10, 10)),
			batches: []string{"a/0/0-1 n=2", "a/1/10-10 n=1"},
			commits: []string{"a/0@0 walhouse:batch-end=1;", "a/1@10 walhouse:batch-end=10;"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			l := &fakeLoader{}
			fc := runScript(t, tc.cfg, nil, l, tc.poll)
			wantBatches(t, l.batches, tc.batches...)
			fc.commits = append(fc.commits, "") // so that "…;" matches the last commit too
			wantCommits(t, fc, tc.commits...)
		})
	}
}

// TestSinkLoadsAChunkWithAMarkerAlone: a truncate marker cuts its chunk
// into segments, which are batches of their own; the other partitions'
// chunks still form a group.
func TestSinkLoadsAChunkWithAMarkerAlone(t *testing.T) {
	l := &truncatingLoader{fakeLoader: &fakeLoader{}}
	poll := concat(recs("a", 0, 0, 0), []*kgo.Record{marker("a", 0, 1, 0x1001)}, recs("a", 0, 2, 2), recs("a", 1, 10, 10), recs("a", 2, 20, 21))
	runScriptWith(t, combined(100), nil, l, poll)
	wantBatches(t, l.batches, "a/0/0-0 n=1", "truncate public.a<0/1001 a/0/1/truncate", "a/0/2-2 n=1", "a/1:10-10+2:20-21 n=3")
}

// TestSinkRebuildsAGroupExactly: after a crash, the members of an
// interrupted group wait until every one is polled, then load under the
// group's token, whatever else the polls bring; records after the intent
// form new groups.
func TestSinkRebuildsAGroupExactly(t *testing.T) {
	l := &fakeLoader{}
	meta := func(partition int32, at int64, m string) kadm.OffsetResponse {
		return kadm.OffsetResponse{Offset: kadm.Offset{Topic: "a", Partition: partition, At: at, Metadata: intentPrefix + m}}
	}
	offsets := kadm.OffsetResponses{"a": {
		0: meta(0, 0, "1~0:1*3"),
		1: meta(1, 10, "12~0:1*3"),
		2: meta(2, 20, "20~0:1*3"),
	}}
	// The first poll brings two of the three members (one of them with
	// more than the intent): nothing loads.
	runScript(t, combined(100), offsets, l,
		concat(recs("a", 0, 0, 1), recs("a", 1, 10, 14)),
		recs("a", 2, 20, 21))
	wantBatches(t, l.batches, "a/0:0-1+1:10-12+2:20-20 n=6", "a/1:13-14+2:21-21 n=3")
}

// TestGroupBreaksAGroupThatIsNotWhole: a rebuilt group whose members are
// not all here (its partitions went to other members of the consumer
// group) loads apart; a whole one keeps its label.
func TestGroupBreaksAGroupThatIsNotWhole(t *testing.T) {
	items := func(partition int32, from, to int64) []item {
		var out []item
		for _, r := range recs("a", partition, from, to) {
			out = append(out, classify(r))
		}
		return out
	}
	g := groupLabel{leader: 0, end: 1, n: 3}
	s := &Sink{log: slog.New(slog.DiscardHandler), cfg: Config{MaxBatchRecords: 100}}
	chunks := []chunk{
		{items: items(0, 0, 1), group: g, rebuilt: true},
		{items: items(1, 10, 12), group: g, rebuilt: true},
	}
	units := s.group(chunks)
	if len(units) != 2 || len(units[0]) != 1 || chunks[0].group != (groupLabel{}) {
		t.Errorf("a group missing a member: units %d, labels %v %v; want two chunks alone", len(units), chunks[0].group, chunks[1].group)
	}
	chunks = []chunk{
		{items: items(1, 10, 12), group: g, rebuilt: true},
		{items: items(0, 0, 1), group: g, rebuilt: true},
		{items: items(2, 20, 20), group: g, rebuilt: true},
	}
	units = s.group(chunks)
	if len(units) != 1 || units[0].token() != "a/0:0-1+1:10-12+2:20-20" {
		t.Errorf("a whole group: %d units, want one named a/0:0-1+1:10-12+2:20-20", len(units))
	}
}

// TestSinkStopsAGroupAtTheFailingChange: a table that stops within a
// group's batch (a change the loader cannot apply) commits the members
// before it, stops that member's partition at the change, and loads the
// members after it apart, each up to where it stops itself.
func TestSinkStopsAGroupAtTheFailingChange(t *testing.T) {
	l := &fakeLoader{stopAt: "11"}
	fc := runScript(t, combined(100), nil, l, concat(recs("a", 0, 0, 1), recs("a", 1, 10, 12), recs("a", 2, 20, 21)),
		concat(recs("a", 0, 2, 2), recs("a", 1, 13, 13), recs("a", 2, 22, 22)))
	// The next poll's group leaves the stopped partition out.
	wantBatches(t, l.batches, "a/0:0-1+1:10-12+2:20-21 n=3", "a/2/20-21 n=2", "a/0:2-2+2:22-22 n=2")
	wantCommits(t, fc, "a/0@2 ", "a/1@11 ", "a/2@22 ", "a/0@3 ", "a/2@23 ")
	wantPaused(t, fc, "a/1")
	for _, c := range fc.commits {
		if strings.HasPrefix(c, "a/1@") && c != "a/1@10 walhouse:batch-end=12~0:1*3" && c != "a/1@11 " {
			t.Errorf("committed the stopped partition again: %s", c)
		}
	}
}

// TestSinkGroupsCrashExactly: a crash after any insert of a flush of
// grouped partitions landed (its answer lost), then the restart from the
// intent, stores every row once: the rebuilt inserts have the same names.
func TestSinkGroupsCrashExactly(t *testing.T) {
	polls := [][]*kgo.Record{
		concat(recs("a", 0, 0, 3), recs("a", 1, 100, 101), recs("a", 2, 200, 204)),
		concat(recs("a", 0, 4, 5), recs("a", 2, 205, 205)),
	}
	for crashAt := 1; crashAt <= 4; crashAt++ {
		l := newDedupLoader()
		l.crashAt, l.landed = crashAt, true
		cfg := combined(6)
		offsets := runGroups(t, cfg, nil, l, polls...)
		l.crashAt = 0
		runGroups(t, cfg, offsets, l, polls...)
		for id, n := range l.stored {
			if n != 1 {
				t.Errorf("crash at insert %d: id %s stored %d times: %s", crashAt, id, n, l.table())
			}
		}
		if len(l.stored) != 14 {
			t.Errorf("crash at insert %d: %d ids stored, want 14: %s", crashAt, len(l.stored), l.table())
		}
	}
}

// runGroups runs a sink over polls (those after the committed offsets
// only) until the script ends or the loader's crash, and returns the
// offsets and intents it committed last, per partition.
func runGroups(t *testing.T, cfg Config, offsets kadm.OffsetResponses, l *dedupLoader, polls ...[]*kgo.Record) kadm.OffsetResponses {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	l.cancel = cancel
	var script [][]*kgo.Record
	for _, p := range polls {
		var keep []*kgo.Record
		for _, r := range p {
			if o, ok := offsets.Lookup(r.Topic, r.Partition); !ok || r.Offset >= o.At {
				keep = append(keep, r)
			}
		}
		script = append(script, keep)
	}
	fc := &fakeConsumer{polls: script, cancel: cancel}
	cfg.Group = "g"
	cfg.RetryBackoff, cfg.MaxRetryBackoff = time.Millisecond, time.Millisecond
	cfg.Schemas = testSchemas()
	s, err := New(fc, fakeOffsets{offsets}, l, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Run(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v", err)
	}
	out := kadm.OffsetResponses{}
	for _, o := range offsets.Sorted() {
		out.Add(o)
	}
	for _, c := range fc.commits {
		var o kadm.OffsetResponse
		pos, meta, _ := strings.Cut(c, " ")
		topic, rest, _ := strings.Cut(pos, "/")
		var p int32
		var at int64
		if _, err := fmt.Sscanf(rest, "%d@%d", &p, &at); err != nil {
			t.Fatalf("commit %q: %v", c, err)
		}
		o.Topic, o.Partition, o.At, o.Metadata = topic, p, at, meta
		out.Add(o)
	}
	return out
}

// TestSinkGroupOfTwoTablesLoadsApart: partitions of one topic that carry
// different tables (no topic prefix to refuse them) load as batches of
// their own, each into its table.
func TestSinkGroupOfTwoTablesLoadsApart(t *testing.T) {
	other := rec("b", 1, 5)
	other.Topic = "a"
	l := &fakeLoader{}
	runScript(t, combined(100), nil, l, concat(recs("a", 0, 0, 1), []*kgo.Record{other}))
	wantBatches(t, l.batches, "a/0/0-1 n=2", "a/1/5-5 n=1")
}

// TestSinkGroupsWithinMaxGroupBytes: a group holds at most MaxGroupBytes
// of Kafka records, and a chunk larger than that loads alone: the members
// of a group are decoded and inserted together, so large values must not
// all be held at once.
func TestSinkGroupsWithinMaxGroupBytes(t *testing.T) {
	one := len(rec("a", 0, 10).Value)
	cfg := combined(100)
	cfg.MaxGroupBytes = 3*one + 2
	l := &fakeLoader{}
	runScript(t, cfg, nil, l, concat(recs("a", 0, 10, 11), recs("a", 1, 20, 20), recs("a", 2, 30, 31), recs("a", 3, 40, 43), recs("a", 4, 50, 50)))
	wantBatches(t, l.batches, "a/0:10-11+1:20-20 n=3", "a/2:30-31+4:50-50 n=3", "a/3/40-43 n=4")
}
