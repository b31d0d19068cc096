package capture

import (
	"context"
	"errors"
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
