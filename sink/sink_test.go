package sink

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walhouse/walhouse/record"
)

// fakeConsumer serves scripted polls and records commits.
type fakeConsumer struct {
	mu      sync.Mutex
	polls   [][]*kgo.Record
	commits []string // "topic/partition@offset meta"
	paused  []string
	cancel  context.CancelFunc
}

func (f *fakeConsumer) PollRecords(ctx context.Context, _ int) kgo.Fetches {
	f.mu.Lock()
	if len(f.polls) == 0 {
		f.mu.Unlock()
		f.cancel() // script done: stop the sink
		<-ctx.Done()
		return nil
	}
	recs := f.polls[0]
	f.polls = f.polls[1:]
	f.mu.Unlock()
	byTP := map[string]map[int32][]kgo.Record{}
	for _, r := range recs {
		if byTP[r.Topic] == nil {
			byTP[r.Topic] = map[int32][]kgo.Record{}
		}
		byTP[r.Topic][r.Partition] = append(byTP[r.Topic][r.Partition], *r)
	}
	var fetch kgo.Fetch
	for t, ps := range byTP {
		ft := kgo.FetchTopic{Topic: t}
		for p, rs := range ps {
			fp := kgo.FetchPartition{Partition: p}
			for i := range rs {
				fp.Records = append(fp.Records, &rs[i])
			}
			ft.Partitions = append(ft.Partitions, fp)
		}
		fetch.Topics = append(fetch.Topics, ft)
	}
	return kgo.Fetches{fetch}
}

func (f *fakeConsumer) Commit(_ context.Context, offsets []Offset) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, o := range offsets {
		f.commits = append(f.commits, fmt.Sprintf("%s/%d@%d %s", o.Topic, o.Partition, o.At, o.Metadata))
	}
	return nil
}

func (f *fakeConsumer) AllowRebalance() {}

func (f *fakeConsumer) PauseFetchPartitions(tps map[string][]int32) map[string][]int32 {
	f.mu.Lock()
	defer f.mu.Unlock()
	for t, ps := range tps {
		for _, p := range ps {
			f.paused = append(f.paused, fmt.Sprintf("%s/%d", t, p))
		}
	}
	return nil
}

type fakeOffsets struct{ resp kadm.OffsetResponses }

func (f fakeOffsets) FetchOffsets(context.Context, string) (kadm.OffsetResponses, error) {
	return f.resp, nil
}

type fakeLoader struct {
	mu      sync.Mutex
	batches []string
	failOn  string // a value text that fails permanently
	// failEach are value texts that fail permanently, every one in a
	// load named by one RecordError (More).
	failEach []string
	stopOn   string // a table whose load fails for the whole table
	stopAt   string // a value text from which on the table's load fails
	// before, when set, runs before every load; an error it returns is
	// the load's.
	before func(b Batch) error
}

func (l *fakeLoader) Load(_ context.Context, b Batch) error {
	if l.before != nil {
		if err := l.before(b); err != nil {
			return err
		}
	}
	if b.Source.Table == l.stopOn {
		return &TableError{Table: b.Source.Table, Err: errors.New("incompatible column"), Fix: "alter it"}
	}
	// As the ClickHouse writer does: records Skip marks are left out, and
	// errors name records by their positions in b.Records.
	loadable, pos := b.Loadable(b.From, b.End())
	at := func(i int) int {
		if pos != nil {
			return pos[i]
		}
		return b.From + i
	}
	var each *RecordError
	for i, r := range loadable {
		if slices.Contains(l.failEach, r.Values[1].Text) {
			f := RecordError{Index: at(i), Err: fmt.Errorf("%w: cannot store %q", ErrPermanent, r.Values[1].Text)}
			if each == nil {
				each = &f
			} else {
				each.More = append(each.More, f)
			}
		}
	}
	if each != nil {
		return each
	}
	for i, r := range loadable {
		if r.Values[1].Text == l.stopAt {
			// As the ClickHouse writer does: the records before the
			// incompatible one are loaded.
			if i > 0 {
				l.mu.Lock()
				l.batches = append(l.batches, fmt.Sprintf("%s n=%d", b.Token, i))
				l.mu.Unlock()
			}
			return &TableError{Table: b.Source.Table, Err: errors.New("incompatible column"), Fix: "alter it", Index: at(i)}
		}
		if r.Values[1].Text == l.failOn {
			return &RecordError{Index: at(i), Err: fmt.Errorf("%w: cannot store %q", ErrPermanent, l.failOn)}
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	token := b.Token
	if b.From != 0 || b.End() != len(b.Records) {
		token = fmt.Sprintf("%s[%d:%d]", b.Token, b.From, b.End())
	}
	l.batches = append(l.batches, fmt.Sprintf("%s n=%d", token, len(loadable)))
	return nil
}

type fakeDead struct{ got []record.DeadLetter }

func (d *fakeDead) Send(_ context.Context, l record.DeadLetter) error {
	d.got = append(d.got, l)
	return nil
}

// recColumns are the columns of rec's records.
var recColumns = []record.Column{{Name: "tenant_id", Type: "text", TypMod: -1, Key: true}, {Name: "id", Type: "int8", TypMod: -1, Key: true}}

// fakeSchemas is a registry in memory. Refresh adds the schemas in
// registerOnRefresh, after failing refreshFails times.
type fakeSchemas struct {
	record.SchemaSet
	registerOnRefresh []record.Schema
	refreshFails      int
	refreshes         int
}

func (f *fakeSchemas) Refresh(context.Context) error {
	f.refreshes++
	if f.refreshes <= f.refreshFails {
		return errors.New("broker unreachable")
	}
	for _, s := range f.registerOnRefresh {
		f.Add(s)
	}
	return nil
}

// testSchemas holds the schema of rec's records.
func testSchemas() *fakeSchemas {
	f := &fakeSchemas{}
	f.Add(record.Schema{TenantColumn: "tenant_id", Columns: recColumns})
	return f
}

func rec(topic string, partition int32, offset int64) *kgo.Record {
	cols := recColumns
	r := &record.Record{
		OccurredAt: time.Unix(1700000000, 0).UTC(), IngestedAt: time.Unix(1700000001, 0).UTC(),
		TenantID: "t", TenantColumn: "tenant_id",
		Source: record.Source{ID: "s", Schema: "public", Table: topic},
		LSN:    record.LSN(1000 + offset), CommitLSN: record.LSN(1000 + offset), Op: record.Insert,
		Columns: cols, SchemaID: record.SchemaID("tenant_id", cols),
		Values: []record.Value{{Text: "t"}, {Text: fmt.Sprint(offset)}},
	}
	r.Version = record.Version(r.LSN)
	r.EventID = record.EventID("s", r.CommitLSN, 0, r.OccurredAt)
	return &kgo.Record{Topic: topic, Partition: partition, Offset: offset, Value: record.AppendJSON(nil, r)}
}

func recs(topic string, partition int32, from, to int64) []*kgo.Record {
	var out []*kgo.Record
	for o := from; o <= to; o++ {
		out = append(out, rec(topic, partition, o))
	}
	return out
}

// wantBatches checks the batches a loader saw, in order.
func wantBatches(t *testing.T, got []string, want ...string) {
	t.Helper()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("batches %v, want %v", got, want)
	}
}

// wantCommits checks that fc's commits include each of want, a commit as
// "topic/partition@offset metadata" or the start of one.
func wantCommits(t *testing.T, fc *fakeConsumer, want ...string) {
	t.Helper()
	got := strings.Join(fc.commits, ";")
	for _, c := range want {
		if !strings.Contains(got, c) {
			t.Errorf("commits %s lack %q", got, c)
		}
	}
}

// wantPaused checks the partitions fc paused, as "topic/partition".
func wantPaused(t *testing.T, fc *fakeConsumer, want ...string) {
	t.Helper()
	if fmt.Sprint(fc.paused) != fmt.Sprint(want) {
		t.Errorf("paused %v, want %v", fc.paused, want)
	}
}

func runScript(t *testing.T, cfg Config, offsets kadm.OffsetResponses, loader *fakeLoader, polls ...[]*kgo.Record) *fakeConsumer {
	t.Helper()
	return runScriptWith(t, cfg, offsets, loader, polls...)
}

// runScriptWith is runScript with any Loader.
func runScriptWith(t *testing.T, cfg Config, offsets kadm.OffsetResponses, loader Loader, polls ...[]*kgo.Record) *fakeConsumer {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fc := &fakeConsumer{polls: polls, cancel: cancel}
	cfg.Group = "g"
	cfg.RetryBackoff, cfg.MaxRetryBackoff = time.Millisecond, time.Millisecond
	if cfg.Schemas == nil {
		cfg.Schemas = testSchemas()
	}
	s, err := New(fc, fakeOffsets{offsets}, loader, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Run(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v", err)
	}
	return fc
}

func TestSinkBatchesPerPartitionWithIntents(t *testing.T) {
	l := &fakeLoader{}
	fc := runScript(t, Config{MaxBatchRecords: 3}, nil, l, append(recs("a", 0, 0, 4), recs("a", 1, 7, 7)...))
	want := []string{"a/0/0-2 n=3", "a/0/3-4 n=2", "a/1/7-7 n=1"}
	wantBatches(t, l.batches, want...)
	wantCommits(t, fc, "a/0@0 walhouse:batch-end=2", "a/1@7 walhouse:batch-end=7", "a/0@5 ", "a/1@8 ")
}

func TestSinkRebuildsInterruptedBatchExactly(t *testing.T) {
	l := &fakeLoader{}
	offsets := kadm.OffsetResponses{"a": {0: {Offset: kadm.Offset{Topic: "a", Partition: 0, At: 10, Metadata: intentPrefix + "14"}}}}
	// The first poll stops short of the interrupted batch's end: the sink
	// must wait for the rest instead of loading 10-12 under a new token.
	runScript(t, Config{}, offsets, l, recs("a", 0, 10, 12), recs("a", 0, 13, 20))
	want := []string{"a/0/10-14 n=5", "a/0/15-20 n=6"}
	wantBatches(t, l.batches, want...)
}

func TestSinkIntentNamesEveryChunk(t *testing.T) {
	// A crash while the second chunk loads must find both chunk ends, so
	// the second chunk is rebuilt with the same token too.
	l := &fakeLoader{}
	offsets := kadm.OffsetResponses{"a": {0: {Offset: kadm.Offset{Topic: "a", Partition: 0, At: 0, Metadata: intentPrefix + "2,5"}}}}
	fc := runScript(t, Config{MaxBatchRecords: 100}, offsets, l, recs("a", 0, 0, 9))
	want := []string{"a/0/0-2 n=3", "a/0/3-5 n=3", "a/0/6-9 n=4"}
	wantBatches(t, l.batches, want...)
	if !strings.Contains(strings.Join(fc.commits, ";"), "a/0@0 walhouse:batch-end=2,5,9") {
		t.Errorf("intent does not list every chunk end: %v", fc.commits)
	}
}

func TestSinkDeadLettersPoison(t *testing.T) {
	l := &fakeLoader{failOn: "3"}
	dead := &fakeDead{}
	bad := &kgo.Record{Topic: "a", Partition: 0, Offset: 5, Value: []byte(`{"not":"a record"}`)}
	polls := append(recs("a", 0, 0, 4), bad)
	runScript(t, Config{DeadLetters: dead, PermanentAttempts: 2}, nil, l, polls)
	if len(dead.got) != 2 || dead.got[0].Offset != 5 || dead.got[1].Offset != 3 {
		t.Fatalf("dead letters %+v, want offsets 5 (undecodable) and 3 (unloadable)", dead.got)
	}
	if !errors.Is(dead.got[0].Err, record.ErrInvalid) || dead.got[1].Attempts != 2 {
		t.Errorf("dead letter metadata: %+v", dead.got)
	}
	want := []string{"a/0/0-5[0:3] n=3", "a/0/0-5[4:5] n=1"}
	wantBatches(t, l.batches, want...)
}

// TestSinkDeadLettersEveryRecordNamed: the records a load names together
// (RecordError.More) go to the dead letters in one pass, and the runs
// between them load, each under its derived token.
func TestSinkDeadLettersEveryRecordNamed(t *testing.T) {
	l := &fakeLoader{failEach: []string{"2", "5", "6"}}
	dead := &fakeDead{}
	loads := 0
	l.before = func(Batch) error { loads++; return nil }
	runScript(t, Config{DeadLetters: dead, PermanentAttempts: 2}, nil, l, recs("a", 0, 0, 9))
	if loads != 5 {
		t.Errorf("%d loads, want 5: 2 attempts of the batch, then its 3 runs between the records set aside", loads)
	}
	var offsets []int64
	for _, d := range dead.got {
		offsets = append(offsets, d.Offset)
		if d.Attempts != 2 || !strings.Contains(d.Err.Error(), fmt.Sprintf("%q", fmt.Sprint(d.Offset))) {
			t.Errorf("dead letter %+v: want 2 attempts and its own cause", d)
		}
	}
	if fmt.Sprint(offsets) != "[2 5 6]" {
		t.Errorf("dead letters at offsets %v, want [2 5 6]", offsets)
	}
	wantBatches(t, l.batches, "a/0/0-9[0:2] n=2", "a/0/0-9[3:5] n=2", "a/0/0-9[7:10] n=3")
}

func TestSinkStopsOnPoisonWithoutDeadLetters(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fc := &fakeConsumer{polls: [][]*kgo.Record{{{Topic: "a", Offset: 0, Value: []byte("garbage")}}}, cancel: cancel}
	s, err := New(fc, fakeOffsets{}, &fakeLoader{}, Config{Group: "g", Schemas: testSchemas()})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Run(ctx); err == nil || !strings.Contains(err.Error(), "no dead-letter topic") {
		t.Fatalf("Run = %v, want a stop naming the record", err)
	}
	for _, c := range fc.commits {
		if !strings.HasSuffix(c, "walhouse:batch-end=0") {
			t.Errorf("committed past a record that was not loaded: %s", c)
		}
	}
}

func TestNewValidates(t *testing.T) {
	_, err := New(&fakeConsumer{}, fakeOffsets{}, &fakeLoader{}, Config{MaxBatchRecords: -1, PermanentAttempts: -2})
	for _, want := range []string{"consumer group is empty", "max batch records -1", "permanent attempts -2"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("New error %v lacks %q", err, want)
		}
	}
}

func TestSinkStopsOnlyTheFailingTable(t *testing.T) {
	l := &fakeLoader{stopOn: "bad"}
	fc := runScript(t, Config{}, nil, l, append(recs("bad", 0, 0, 2), recs("good", 0, 0, 1)...), recs("bad", 0, 3, 3))
	wantBatches(t, l.batches, "good/0/0-1 n=2") // only the good table
	wantPaused(t, fc, "bad/0")
	for _, c := range fc.commits {
		if strings.HasPrefix(c, "bad/") && !strings.Contains(c, intentPrefix) {
			t.Errorf("committed past the stopped table: %s", c)
		}
	}
}

// A table stops exactly at its incompatible record: what came before it is
// loaded and committed, in every partition, and only the partition that
// reached the change is paused.
func TestSinkStopsATableAtTheChange(t *testing.T) {
	l := &fakeLoader{stopAt: "3"}
	fc := runScript(t, Config{}, nil, l, append(recs("bad", 0, 0, 4), recs("bad", 1, 0, 1)...), recs("bad", 0, 5, 6))
	// The records before offset 3 of partition 0 and all of partition 1.
	wantBatches(t, l.batches, "bad/0/0-4 n=3", "bad/1/0-1 n=2")
	wantPaused(t, fc, "bad/0")
	wantCommits(t, fc, "bad/0@3 ", "bad/1@2 ")
	for _, c := range fc.commits {
		if strings.HasPrefix(c, "bad/0@") && !strings.HasPrefix(c, "bad/0@3 ") && !strings.Contains(c, intentPrefix) {
			t.Errorf("committed past the change: %s", c)
		}
	}
}

// A record whose schema is not known yet makes the sink read the registry,
// retrying while that fails; one still unknown afterwards is poison.
func TestSinkResolvesSchemasFromTheRegistry(t *testing.T) {
	schema := record.Schema{TenantColumn: "tenant_id", Columns: recColumns}

	late := &fakeSchemas{registerOnRefresh: []record.Schema{schema}, refreshFails: 2}
	l := &fakeLoader{}
	dead := &fakeDead{}
	runScript(t, Config{Schemas: late, DeadLetters: dead}, nil, l, recs("a", 0, 0, 2))
	if fmt.Sprint(l.batches) != "[a/0/0-2 n=3]" || len(dead.got) != 0 {
		t.Errorf("schema registered late: loads %v, dead letters %d; want all 3 loaded", l.batches, len(dead.got))
	}
	if late.refreshes != 3 {
		t.Errorf("registry read %d times, want 3 (two failures, then once for the whole batch)", late.refreshes)
	}

	never := &fakeSchemas{}
	l, dead = &fakeLoader{}, &fakeDead{}
	runScript(t, Config{Schemas: never, DeadLetters: dead}, nil, l, recs("a", 0, 0, 1))
	if len(l.batches) != 0 || len(dead.got) != 2 {
		t.Fatalf("unregistered schema: loads %v, dead letters %d; want 2 dead letters", l.batches, len(dead.got))
	}
	if !errors.Is(dead.got[0].Err, record.ErrInvalid) || !strings.Contains(dead.got[0].Err.Error(), "not in the schema registry") {
		t.Errorf("dead letter says %v, want an invalid record naming the registry", dead.got[0].Err)
	}
}

// Without a registry, a version 2 record stops the sink: the configuration
// is wrong, the record is not.
func TestSinkWithoutRegistryStops(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dead := &fakeDead{}
	fc := &fakeConsumer{polls: [][]*kgo.Record{recs("a", 0, 0, 0)}, cancel: cancel}
	s, err := New(fc, fakeOffsets{}, &fakeLoader{}, Config{Group: "g", DeadLetters: dead})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Run(ctx); !errors.Is(err, record.ErrUnknownSchema) || len(dead.got) != 0 {
		t.Fatalf("Run = %v with %d dead letters, want ErrUnknownSchema and none", err, len(dead.got))
	}
}

// rowBatch returns a row batch of table topic at the given place, holding
// one snapshot row per id.
func rowBatch(topic string, partition int32, offset int64, ids ...int) *kgo.Record {
	at := time.Unix(1700000000, 0).UTC()
	src := record.Source{ID: "s", Schema: "public", Table: topic}
	schemaID := record.SchemaID("tenant_id", recColumns)
	enc := record.NewEncoder(src, "tenant_id", recColumns, schemaID, 2)
	var b record.RowBatch
	enc.StartBatch(&b, nil, &record.Record{OccurredAt: at, IngestedAt: at, LSN: 900, CommitLSN: 900})
	for _, id := range ids {
		enc.AddRow(&b, []record.Value{{Text: "t"}, {Text: fmt.Sprint(id)}})
	}
	return &kgo.Record{Topic: topic, Partition: partition, Offset: offset, Value: b.Finish(),
		Headers: []kgo.RecordHeader{{Key: record.HeaderRows, Value: []byte(fmt.Sprint(len(ids)))}}}
}

func TestSinkWeighsRowBatchesByTheirRows(t *testing.T) {
	l := &fakeLoader{}
	polls := []*kgo.Record{rowBatch("a", 0, 0, 100, 101, 102), rec("a", 0, 1), rowBatch("a", 0, 2, 103, 104, 105, 106), rec("a", 0, 3)}
	runScript(t, Config{MaxBatchRecords: 5}, nil, l, polls)
	want := []string{"a/0/0-1 n=4", "a/0/2-3 n=5"}
	wantBatches(t, l.batches, want...)
}

func TestSinkDeadLettersOneRowOfABatch(t *testing.T) {
	l := &fakeLoader{failOn: "101"}
	dead := &fakeDead{}
	broken := rowBatch("a", 0, 1, 200)
	broken.Value = broken.Value[:len(broken.Value)-3]
	runScript(t, Config{DeadLetters: dead, PermanentAttempts: 1}, nil, l, []*kgo.Record{rowBatch("a", 0, 0, 100, 101, 102), broken})
	if len(dead.got) != 2 {
		t.Fatalf("dead letters %+v, want the unloadable row and the broken batch", dead.got)
	}
	// The broken batch is found when decoding, before anything loads.
	row := dead.got[1]
	r, err := record.Decode(row.Value, testSchemas())
	if err != nil {
		t.Fatalf("the dead row is not a record of its own: %v", err)
	}
	if r.Values[1].Text != "101" || string(row.Key) != r.PartitionKey() || row.Offset != 0 || row.Rows != 0 {
		t.Errorf("dead row %+v (decoded %+v), want row 101 of the batch at offset 0 with its key", row, r)
	}
	if whole := dead.got[0]; whole.Offset != 1 || whole.Rows != 1 || string(whole.Value) != string(broken.Value) || !errors.Is(whole.Err, record.ErrInvalid) {
		t.Errorf("broken batch dead letter %+v, want offset 1, its value and rows 1", whole)
	}
	want := []string{"a/0/0-1[0:1] n=1", "a/0/0-1[2:3] n=1"}
	wantBatches(t, l.batches, want...)
}

func TestSinkLogsProgressAndStop(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	l := &fakeLoader{}
	runScript(t, Config{Logger: log, ProgressInterval: time.Nanosecond}, nil, l, recs("a", 0, 0, 4), recs("a", 0, 5, 6))
	out := buf.String()
	for _, want := range []string{"msg=started component=sink group=g", "msg=progress component=sink records=5", "batches=1", "consumer_lag=0", "msg=\"stopped; every committed offset is loaded\" component=sink records=7"} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
}

// fakeStore is a Layer 2 store in memory that records which eventIds it
// was asked about and told to remember.
type fakeStore struct {
	mu                 sync.Mutex
	hashes             map[string]string
	looked, remembered int
}

func (f *fakeStore) Lookup(_ context.Context, ids []string) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.looked += len(ids)
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = f.hashes[id]
	}
	return out, nil
}

func (f *fakeStore) Remember(_ context.Context, ids, hashes []string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.remembered += len(ids)
	for i, id := range ids {
		if _, ok := f.hashes[id]; !ok {
			f.hashes[id] = hashes[i]
		}
	}
	return nil
}

// Layer 2 claims streamed changes and drops them when they come again, but
// leaves copied rows alone: they load again (their version 0 and the
// insert tokens make that harmless) without a lookup or a claim.
func TestSinkLayer2SkipsCopiedRows(t *testing.T) {
	l := &fakeLoader{}
	store := &fakeStore{hashes: map[string]string{}}
	again := rec("a", 0, 3)
	again.Value = rec("a", 0, 1).Value // the change at offset 1, produced twice
	polls := [][]*kgo.Record{
		{rowBatch("a", 0, 0, 100, 101, 102), rec("a", 0, 1)},
		{rowBatch("a", 0, 2, 100, 101, 102), again, rec("a", 0, 4)},
	}
	runScript(t, Config{Dedup: store}, nil, l, polls...)
	want := []string{"a/0/0-1 n=4", "a/0/2-4 n=4"}
	if fmt.Sprint(l.batches) != fmt.Sprint(want) {
		t.Errorf("batches %v, want %v: the repeated change dropped, the repeated copy loaded", l.batches, want)
	}
	if store.looked != 3 || store.remembered != 2 {
		t.Errorf("Layer 2 looked up %d and remembered %d eventIds, want 3 and 2: only the changes", store.looked, store.remembered)
	}
}

// In mismatch mode warn, a change whose eventId is stored with another
// payload is loaded but not claimed again: the first payload stays the
// reference, and new changes are claimed with the short hash.
func TestSinkLayer2WarnKeepsFirstClaim(t *testing.T) {
	l := &fakeLoader{}
	id := record.EventID("s", 1000, 0, time.Unix(1700000000, 0).UTC()) // rec's at offset 0
	store := &fakeStore{hashes: map[string]string{id: "another payload"}}
	runScript(t, Config{Dedup: store, Mismatch: MismatchWarn}, nil, l, []*kgo.Record{rec("a", 0, 0), rec("a", 0, 1)})
	if want := []string{"a/0/0-1 n=2"}; fmt.Sprint(l.batches) != fmt.Sprint(want) {
		t.Errorf("batches %v, want %v", l.batches, want)
	}
	if store.remembered != 1 || store.hashes[id] != "another payload" {
		t.Errorf("remembered %d eventIds, reused one's hash %q; want 1 and the first payload's", store.remembered, store.hashes[id])
	}
	for k, h := range store.hashes {
		if k != id && len(h) != claimHashLen {
			t.Errorf("claim hash %q of %s: want %d characters", h, k, claimHashLen)
		}
	}
}

// concurrentLoader is a fakeLoader that notes how many loads run at once;
// each load waits up to 200ms for a second one to start.
type concurrentLoader struct {
	fakeLoader
	mu             sync.Mutex // guards running and most (fakeLoader has its own)
	running, most  int
	secondStarted  chan struct{}
	signalledTwice sync.Once
}

func (l *concurrentLoader) Load(ctx context.Context, b Batch) error {
	l.mu.Lock()
	l.running++
	l.most = max(l.most, l.running)
	if l.running >= 2 {
		l.signalledTwice.Do(func() { close(l.secondStarted) })
	}
	l.mu.Unlock()
	select {
	case <-l.secondStarted:
	case <-time.After(200 * time.Millisecond):
	}
	err := l.fakeLoader.Load(ctx, b)
	l.mu.Lock()
	l.running--
	l.mu.Unlock()
	return err
}

// With InsertParallelism, partitions load at the same time, each with the
// batches and tokens it has alone; a table that stops still stops exactly
// at its change, and offsets are committed as without parallelism.
func TestSinkLoadsPartitionsInParallel(t *testing.T) {
	for _, parallel := range []int{1, 3} {
		t.Run(fmt.Sprint(parallel), func(t *testing.T) {
			poll := append(append(recs("bad", 0, 0, 4), recs("bad", 1, 0, 1)...), recs("good", 0, 0, 2)...)
			l2 := &concurrentLoader{fakeLoader: fakeLoader{stopAt: "3"}, secondStarted: make(chan struct{})}
			fc := runScriptWith(t, Config{InsertParallelism: parallel}, nil, l2, poll)
			sort.Strings(l2.batches)
			wantBatches(t, l2.batches, "bad/0/0-4 n=3", "bad/1/0-1 n=2", "good/0/0-2 n=3")
			if l2.most > parallel || (parallel > 1) != (l2.most > 1) {
				t.Errorf("%d loads at once with parallelism %d", l2.most, parallel)
			}
			wantPaused(t, fc, "bad/0")
			wantCommits(t, fc, "bad/0@3 ", "bad/1@2 ", "good/0@3 ")
		})
	}
}
