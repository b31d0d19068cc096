package capture

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walhouse/walhouse/record"
)

// TestBatchProducer produces rows in row batches while Kafka acknowledges
// them late and in random order: every row must arrive once, in a batch of
// the partition it was added to, in order, with batches no larger than
// their bounds and unchanged until acknowledged.
func TestBatchProducer(t *testing.T) {
	cols := slabTestColumns
	enc := record.NewEncoder(slabTestSource, "tenant_id", cols, record.SchemaID("tenant_id", cols), record.EnvelopeVersion)
	var schemas record.SchemaSet
	schemas.Add(enc.Schema())
	for _, tc := range []struct {
		name    string
		rows    int
		maxRows int
		body    func(i int) string
		failAt  int
	}{
		{"small rows, many batches", 20_000, 100, func(i int) string { return fmt.Sprint("row ", i) }, -1},
		{"rows closing batches by size", 3000, 1000, func(i int) string { return strings.Repeat("x", i%3000) }, -1},
		{"rows larger than a batch", 20, 1000, func(i int) string { return strings.Repeat("y", batchBytes+i) }, -1},
		{"a failed batch", 5000, 50, func(i int) string { return "z" }, 17},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const parts = 5
			h := &holdingProducer{failAt: tc.failAt}
			rec := &recordingProducer{next: h}
			p := newBatchProducer(context.Background(), rec, "topic", parts, tc.maxRows, record.DefaultMaxBytes)
			finish := ackLater(h, uint64(tc.rows), 20)
			shared := slabTestRecord(0, "")
			for i := 0; i < tc.rows; i++ {
				r := slabTestRecord(i, tc.body(i))
				if err := p.add(enc, i%parts, &shared, r.Values); err != nil {
					t.Fatal(err)
				}
			}
			err := p.wait(false)
			finish()
			if len(h.corrupt) > 0 {
				t.Fatalf("%d batches changed before they were acknowledged", len(h.corrupt))
			}
			if tc.failAt >= 0 {
				if err == nil {
					t.Fatal("wait returned no error after a batch failed")
				}
				return
			}
			if err != nil {
				t.Fatalf("wait: %v", err)
			}
			next := make([]int, parts) // the next row expected per partition
			for _, hr := range rec.produced {
				rows, err := record.DecodeBatch([]byte(hr.value), &schemas)
				if err != nil {
					t.Fatalf("batch: %v", err)
				}
				if len(rows) > tc.maxRows || (len(rows) > 1 && len(hr.value) > batchBytes) {
					t.Errorf("batch of %d rows, %d bytes: over its bounds", len(rows), len(hr.value))
				}
				if hr.rows != fmt.Sprint(len(rows)) {
					t.Errorf("batch of %d rows has header %s", len(rows), hr.rows)
				}
				for _, r := range rows {
					part := int(hr.partition)
					if want := fmt.Sprint(next[part]*parts + part); r.Values[1].Text != want {
						t.Fatalf("partition %d: row %s, want %s", part, r.Values[1].Text, want)
					}
					next[part]++
				}
			}
			total := 0
			for _, n := range next {
				total += n
			}
			if total != tc.rows {
				t.Errorf("%d rows arrived, want %d", total, tc.rows)
			}
		})
	}
}

// recordingProducer notes what is produced, in order, and passes it on.
type recordingProducer struct {
	next     Producer
	mu       sync.Mutex
	produced []producedBatch
}

type producedBatch struct {
	partition   int32
	value, rows string
}

func (r *recordingProducer) Produce(ctx context.Context, kr *kgo.Record, promise func(*kgo.Record, error)) {
	r.mu.Lock()
	b := producedBatch{partition: kr.Partition, value: string(kr.Value)}
	for _, h := range kr.Headers {
		if h.Key == record.HeaderRows {
			b.rows = string(h.Value)
		}
	}
	r.produced = append(r.produced, b)
	r.mu.Unlock()
	r.next.Produce(ctx, kr, promise)
}

// TestBatchProducerStopsWaiting checks that a reader waiting for room
// (Kafka acknowledges nothing) stops when its context is cancelled.
func TestBatchProducerStopsWaiting(t *testing.T) {
	enc := record.NewEncoder(slabTestSource, "tenant_id", slabTestColumns, record.SchemaID("tenant_id", slabTestColumns), record.EnvelopeVersion)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := newBatchProducer(ctx, &holdingProducer{failAt: -1}, "topic", 1, 1, record.DefaultMaxBytes)
	shared := slabTestRecord(0, "")
	body := strings.Repeat("x", 64<<10)
	var err error
	for i := 0; err == nil; i++ {
		if i == 10 {
			cancel() // batches still fit until the bound; then add must stop waiting
		}
		r := slabTestRecord(i, body)
		err = p.add(enc, 0, &shared, r.Values)
	}
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("add = %v, want context.Canceled", err)
	}
}

// TestPartitionerPlacesRowBatches: a row batch goes to the partition set on
// it, a keyed record where its key hashes.
func TestPartitionerPlacesRowBatches(t *testing.T) {
	tp := Partitioner().ForTopic("t")
	batch := &kgo.Record{Partition: 4, Value: []byte("{}"), Headers: []kgo.RecordHeader{{Key: record.HeaderRows, Value: []byte("3")}}}
	if got := tp.Partition(batch, 6); got != 4 {
		t.Errorf("row batch placed in %d, want 4", got)
	}
	keyed := &kgo.Record{Key: []byte(`["a","1"]`), Partition: 4}
	want := kgo.StickyKeyPartitioner(nil).ForTopic("t").Partition(keyed, 6)
	if got := tp.Partition(keyed, 6); got != want {
		t.Errorf("keyed record placed in %d, want %d (its key's hash)", got, want)
	}
}
