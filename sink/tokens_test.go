package sink

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walhouse/walhouse/record"
)

// dedupLoader loads a batch's Inserts, as the ClickHouse writer does, into
// a store that drops an insert whose token it has seen, as ClickHouse's
// insert deduplication does whatever the insert carries.
type dedupLoader struct {
	mu      sync.Mutex
	tokens  map[string]bool
	stored  map[string]int // id -> times stored
	failOn  string         // an id no insert can store (RecordError)
	crashAt int            // > 0: the crashAt-th insert is cut off by a crash
	// landed, with crashAt, lands the crashAt-th insert before the crash
	// (its answer is lost).
	landed  bool
	inserts int
	cancel  func()
}

func newDedupLoader() *dedupLoader {
	return &dedupLoader{tokens: map[string]bool{}, stored: map[string]int{}}
}

func (l *dedupLoader) Load(ctx context.Context, b Batch) error {
	for _, in := range b.Inserts() {
		if len(in.Records) == 0 {
			continue
		}
		for i, r := range in.Records {
			if r.Values[1].Text == l.failOn {
				return &RecordError{Index: in.Position(i), Err: fmt.Errorf("%w: cannot store", ErrPermanent)}
			}
		}
		l.mu.Lock()
		l.inserts++
		crash := l.inserts == l.crashAt
		if crash && !l.landed {
			l.mu.Unlock()
			l.cancel()
			return ctx.Err()
		}
		if !l.tokens[in.Token] {
			l.tokens[in.Token] = true
			for _, r := range in.Records {
				l.stored[r.Values[1].Text]++
			}
		}
		l.mu.Unlock()
		if crash {
			l.cancel()
			return ctx.Err()
		}
	}
	return nil
}

// table lists the ids stored, each with how often.
func (l *dedupLoader) table() string {
	var out []string
	for id, n := range l.stored {
		out = append(out, fmt.Sprintf("%s×%d", id, n))
	}
	slices.Sort(out)
	return strings.Join(out, " ")
}

// shaped is a record of table a at offset (its id) with an extra text
// column, when extra is not empty: another SchemaID, so another insert.
func shaped(offset int64, extra string) *kgo.Record {
	cols := recColumns
	vals := []record.Value{{Text: "t"}, {Text: fmt.Sprint(offset)}}
	if extra != "" {
		cols = append(slices.Clone(recColumns), record.Column{Name: extra, Type: "text", TypMod: -1})
		vals = append(vals, record.Value{Text: "x"})
	}
	r := &record.Record{
		OccurredAt: time.Unix(1700000000, 0).UTC(), IngestedAt: time.Unix(1700000001, 0).UTC(),
		TenantID: "t", TenantColumn: "tenant_id",
		Source: record.Source{ID: "s", Schema: "public", Table: "a"},
		LSN:    record.LSN(1000 + offset), CommitLSN: record.LSN(1000 + offset), Op: record.Insert,
		Columns: cols, SchemaID: record.SchemaID("tenant_id", cols), Values: vals,
	}
	r.Version = record.Version(r.LSN)
	r.EventID = record.EventID("s", r.CommitLSN, 0, r.OccurredAt)
	return &kgo.Record{Topic: "a", Partition: 0, Offset: offset, Value: record.AppendJSON(nil, r)}
}

// again is a copy of offset's change at offset at: capture produced it twice.
func again(offset, at int64) *kgo.Record {
	kr := shaped(at, "")
	kr.Value = shaped(offset, "").Value
	return kr
}

// downStore is fakeStore whose lookups fail while down (Layer 2 then lets
// every record through).
type downStore struct {
	fakeStore
	down bool
}

func (f *downStore) Lookup(ctx context.Context, ids []string) ([]string, error) {
	if f.down {
		return nil, errors.New("redis unreachable")
	}
	return f.fakeStore.Lookup(ctx, ids)
}

// runUntil runs a sink over polls until the script ends or the loader's
// crash, and returns the intent it left for partition a/0 (what a
// restarted sink rebuilds the batch from).
func runUntil(t *testing.T, cfg Config, offsets kadm.OffsetResponses, l *dedupLoader, polls ...[]*kgo.Record) kadm.OffsetResponses {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	l.cancel = cancel
	fc := &fakeConsumer{polls: polls, cancel: cancel}
	cfg.Group = "g"
	cfg.RetryBackoff, cfg.MaxRetryBackoff = time.Millisecond, time.Millisecond
	sc := testSchemas()
	for _, extra := range []string{"b", "c"} {
		sc.Add(record.Schema{TenantColumn: "tenant_id", Columns: append(slices.Clone(recColumns), record.Column{Name: extra, Type: "text", TypMod: -1})})
	}
	cfg.Schemas = sc
	s, err := New(fc, fakeOffsets{offsets}, l, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Run(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v", err)
	}
	var at int64
	var meta string
	for _, c := range fc.commits {
		pos, m, _ := strings.Cut(c, " ")
		if _, err := fmt.Sscanf(pos, "a/0@%d", &at); err != nil {
			t.Fatalf("commit %q: %v", c, err)
		}
		meta = m
	}
	return kadm.OffsetResponses{"a": {0: {Offset: kadm.Offset{Topic: "a", Partition: 0, At: at, Metadata: meta}}}}
}

// TestSinkTokensNameTheSameRecords: a batch's inserts are named by
// positions in the batch, and nothing the sink leaves out (a repeat Layer
// 2 finds, a subject erased, a record set aside) moves a record: so an
// insert that landed before a crash, a retry or an isolation is dropped
// as a repeat when it comes again, and never names other records. Every
// case ends with each id stored exactly once.
func TestSinkTokensNameTheSameRecords(t *testing.T) {
	t.Run("Layer 2 answers otherwise on the rebuild", func(t *testing.T) {
		// Redis is down while the batch is first loaded, so the repeat of
		// offset 0 goes through; the sink crashes before the third insert
		// and rebuilds the batch with Redis back, which now drops it.
		l := newDedupLoader()
		store := &downStore{fakeStore: fakeStore{hashes: map[string]string{}}}
		runUntil(t, Config{Dedup: store}, nil, l, []*kgo.Record{shaped(0, "")})
		batch := []*kgo.Record{again(0, 1), shaped(2, ""), shaped(3, "b"), shaped(4, "c")}
		store.down, l.crashAt = true, l.inserts+3
		intent := runUntil(t, Config{Dedup: store}, nil, l, batch)
		store.down = false
		runUntil(t, Config{Dedup: store}, intent, l, batch)
		if got, want := l.table(), "0×2 2×1 3×1 4×1"; got != want {
			// 0 twice: the repeat went through while Redis was down, as
			// Layer 2 fails open; FINAL collapses it.
			t.Errorf("stored %s, want %s", got, want)
		}
	})
	t.Run("a subject erased between the attempt and the rebuild", func(t *testing.T) {
		// Layer 2 drops the in-batch repeat of 0 on the attempt; on the
		// rebuild 0 is erased too.
		l := newDedupLoader()
		ledger := erasedIDs()
		cfg := Config{Dedup: &fakeStore{hashes: map[string]string{}}, Erasures: ledger}
		batch := []*kgo.Record{shaped(0, ""), again(0, 1), shaped(2, "b"), shaped(3, "c")}
		l.crashAt = 3
		intent := runUntil(t, cfg, nil, l, batch)
		ledger.erase("0")
		runUntil(t, cfg, intent, l, batch)
		if got, want := l.table(), "0×1 2×1 3×1"; got != want {
			t.Errorf("stored %s, want %s", got, want)
		}
	})
	t.Run("a record set aside after an insert landed", func(t *testing.T) {
		l := newDedupLoader()
		l.failOn = "2"
		dead := &fakeDead{}
		runUntil(t, Config{DeadLetters: dead, PermanentAttempts: 1}, nil, l,
			[]*kgo.Record{shaped(0, ""), shaped(1, ""), shaped(2, "b"), shaped(3, "b"), shaped(4, "c")})
		if got, want := l.table(), "0×1 1×1 3×1 4×1"; got != want {
			t.Errorf("stored %s, want %s", got, want)
		}
		if len(dead.got) != 1 || dead.got[0].Offset != 2 {
			t.Errorf("dead letters %+v, want offset 2", dead.got)
		}
	})
	t.Run("a record set aside, then a crash, then the rebuild", func(t *testing.T) {
		l := newDedupLoader()
		l.failOn = "2"
		cfg := Config{DeadLetters: &fakeDead{}, PermanentAttempts: 1}
		batch := []*kgo.Record{shaped(0, ""), shaped(1, "b"), shaped(2, "b"), shaped(3, "b"), shaped(4, "c")}
		l.crashAt = 3 // 0's insert, 1's piece, then 3's piece is cut off
		intent := runUntil(t, cfg, nil, l, batch)
		runUntil(t, cfg, intent, l, batch)
		if got, want := l.table(), "0×1 1×1 3×1 4×1"; got != want {
			t.Errorf("stored %s, want %s", got, want)
		}
	})
}
