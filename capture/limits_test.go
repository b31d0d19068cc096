package capture

import (
	"context"
	"errors"
	"math"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walhouse/walhouse/record"
)

func TestCheckRecordSize(t *testing.T) {
	for _, tc := range []struct {
		size, bound int
		tooLarge    bool
	}{
		{0, 1 << 20, false},
		{1 << 20, 1 << 20, false},
		{1<<20 + 1, 1 << 20, true},
		{90 << 20, 64 << 20, true},
	} {
		err := checkRecordSize(tc.size, tc.bound)
		if got := errors.Is(err, ErrRowTooLarge); got != tc.tooLarge {
			t.Errorf("checkRecordSize(%d, %d) = %v, want too large: %v", tc.size, tc.bound, err, tc.tooLarge)
		}
		if tc.tooLarge && !strings.Contains(err.Error(), "--max-record-bytes") {
			t.Errorf("checkRecordSize(%d, %d) = %v: does not say which flag raises the bound", tc.size, tc.bound, err)
		}
	}
}

// ackingProducer acknowledges every record at once and keeps its value.
type ackingProducer struct {
	mu     sync.Mutex
	values []string
}

func (a *ackingProducer) Produce(_ context.Context, r *kgo.Record, promise func(*kgo.Record, error)) {
	a.mu.Lock()
	a.values = append(a.values, string(r.Value))
	a.mu.Unlock()
	promise(r, nil)
}

// oversizeWorkload feeds rows 0..9 to add, row 5 over a 1 MiB bound, and
// checks that only row 5 fails, with ErrRowTooLarge, and that the other
// rows were produced and nothing over the bound was.
func oversizeWorkload(t *testing.T, add func(r *record.Record) error, finish func() error, a *ackingProducer) {
	t.Helper()
	const bound = 1 << 20
	for i := range 10 {
		body := "small"
		if i == 5 {
			body = strings.Repeat("L", 2*bound)
		}
		r := slabTestRecord(i, body)
		err := add(&r)
		if i == 5 {
			if !errors.Is(err, ErrRowTooLarge) {
				t.Fatalf("the 2 MiB row: %v, want ErrRowTooLarge", err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("row %d: %v", i, err)
		}
	}
	if err := finish(); err != nil {
		t.Fatal(err)
	}
	all := strings.Join(a.values, "\n")
	for _, v := range a.values {
		if len(v) > bound {
			t.Errorf("produced a record of %d bytes, over the bound", len(v))
		}
	}
	if n := strings.Count(all, `"small"`); n != 9 {
		t.Errorf("produced %d of the 9 small rows", n)
	}
}

// TestBatchProducerLeavesOutTooLargeRow: a row batch never carries a row
// over the record bound, and the rows around it still go.
func TestBatchProducerLeavesOutTooLargeRow(t *testing.T) {
	enc := record.NewEncoder(slabTestSource, "tenant_id", slabTestColumns, record.SchemaID("tenant_id", slabTestColumns), record.EnvelopeVersion)
	a := &ackingProducer{}
	p := newBatchProducer(context.Background(), a, "topic", 1, 1000, 1<<20)
	shared := slabTestRecord(0, "")
	oversizeWorkload(t, func(r *record.Record) error { return p.add(enc, 0, &shared, r.Values) }, func() error { return p.wait(false) }, a)
}

// TestSlabProducerLeavesOutTooLargeRecord does the same for snapshot rows
// sent as records of their own.
func TestSlabProducerLeavesOutTooLargeRecord(t *testing.T) {
	enc := record.NewEncoder(slabTestSource, "tenant_id", slabTestColumns, record.SchemaID("tenant_id", slabTestColumns), record.EnvelopeVersion)
	a := &ackingProducer{}
	p := newSlabProducer(context.Background(), a, 1<<20)
	oversizeWorkload(t, func(r *record.Record) error { return p.produce(enc, "topic", r) }, p.wait, a)
}

// discardingProducer acknowledges every record at once and keeps nothing.
type discardingProducer struct{}

func (discardingProducer) Produce(_ context.Context, r *kgo.Record, promise func(*kgo.Record, error)) {
	promise(r, nil)
}

// allocated returns the bytes f allocates on the heap: the least of three
// runs, as tests running in parallel allocate too.
func allocated(f func()) uint64 {
	least := uint64(math.MaxUint64)
	for range 3 {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		f()
		runtime.ReadMemStats(&after)
		least = min(least, after.TotalAlloc-before.TotalAlloc)
	}
	return least
}

// TestRecordSizedBeforeEncoding: a row of control characters, whose JSON
// escapes take six times its size, is refused before its record is
// written (streamed, copied in a row batch, copied as a record of its
// own), and one that fits is written into memory allocated once. Before,
// capture encoded the whole record and then compared its size: a 64 MiB
// value of chr(1) cost it over 1 GiB.
func TestRecordSizedBeforeEncoding(t *testing.T) {
	const bound = 1 << 20
	enc := record.NewEncoder(slabTestSource, "tenant_id", slabTestColumns, record.SchemaID("tenant_id", slabTestColumns), record.EnvelopeVersion)
	tooLarge := strings.Repeat("\x01", 4*bound) // 24 MiB escaped
	fits := strings.Repeat("\x01", bound/7)     // about 880 KiB escaped
	paths := []struct {
		name string
		add  func(r *record.Record) error
	}{
		{"row batch", func(r *record.Record) error {
			p := newBatchProducer(context.Background(), discardingProducer{}, "topic", 1, 1000, bound)
			shared := slabTestRecord(0, "")
			if err := p.add(enc, 0, &shared, r.Values); err != nil {
				return err
			}
			return p.wait(false)
		}},
		{"record of its own", func(r *record.Record) error {
			p := newSlabProducer(context.Background(), discardingProducer{}, bound)
			if err := p.produce(enc, "topic", r); err != nil {
				return err
			}
			return p.wait()
		}},
	}
	for _, path := range paths {
		t.Run(path.name, func(t *testing.T) {
			r := slabTestRecord(1, tooLarge)
			var err error
			if n := allocated(func() { err = path.add(&r) }); n > bound {
				t.Errorf("a row over the bound allocated %d KiB, want under the bound (%d KiB)", n>>10, bound>>10)
			}
			if !errors.Is(err, ErrRowTooLarge) {
				t.Errorf("a row over the bound: %v, want ErrRowTooLarge", err)
			}
			r = slabTestRecord(1, fits)
			size := enc.KeyValueSize(&r)
			if n := allocated(func() { err = path.add(&r) }); n > 2*uint64(size)+uint64(slabBytes) {
				t.Errorf("a row of %d KiB encoded allocated %d KiB: its memory grew more than once", size>>10, n>>10)
			}
			if err != nil {
				t.Errorf("a row under the bound: %v", err)
			}
		})
	}
	t.Run("streamed", func(t *testing.T) {
		tr, col, _ := newTestTranslator(t, WithMaxRecordBytes(bound))
		ctx := context.Background()
		steps := []step{describe(ordersRel), begin(0x100)}
		for _, s := range steps {
			if err := feed(ctx, tr, s); err != nil {
				t.Fatal(err)
			}
		}
		big := insert(0x10, relOrders, txt("acme"), txt("1"), txt(tooLarge))
		var err error
		if n := allocated(func() { err = feed(ctx, tr, big) }); n > bound {
			t.Errorf("a change over the bound allocated %d KiB, want under the bound (%d KiB)", n>>10, bound>>10)
		}
		if err != nil {
			t.Fatal(err)
		}
		if want := `dead letter public.orders too_large commit 0/100 key {"id":"1","tenant_id":"acme"} #0`; !slices.Contains(col.log, want) {
			t.Errorf("got\n\t%s\nwant a line %s", strings.Join(col.log, "\n\t"), want)
		}
	})
}
