package capture

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walhouse/walhouse/record"
)

// holdingProducer keeps produced records and acknowledges them later, in
// random order, checking that their bytes are still the ones produced: a
// slab reused too early would have overwritten them.
type holdingProducer struct {
	mu      sync.Mutex
	held    []heldRecord
	failAt  int // fail the record with this sequence number (-1: none)
	seq     int
	corrupt []string
}

type heldRecord struct {
	r          *kgo.Record
	key, value string
	promise    func(*kgo.Record, error)
	fail       bool
}

func (h *holdingProducer) Produce(_ context.Context, r *kgo.Record, promise func(*kgo.Record, error)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.held = append(h.held, heldRecord{r: r, key: string(r.Key), value: string(r.Value), promise: promise, fail: h.seq == h.failAt})
	h.seq++
}

// ackSome acknowledges up to n held records in random order.
func (h *holdingProducer) ackSome(rng *rand.Rand, n int) int {
	h.mu.Lock()
	rng.Shuffle(len(h.held), func(i, j int) { h.held[i], h.held[j] = h.held[j], h.held[i] })
	n = min(n, len(h.held))
	batch := append([]heldRecord(nil), h.held[:n]...)
	h.held = h.held[n:]
	h.mu.Unlock()
	for _, hr := range batch {
		if string(hr.r.Key) != hr.key || string(hr.r.Value) != hr.value {
			h.mu.Lock()
			h.corrupt = append(h.corrupt, hr.key)
			h.mu.Unlock()
		}
		var err error
		if hr.fail {
			err = errors.New("broker says no")
		}
		hr.promise(hr.r, err)
	}
	return n
}

func TestSlabProducer(t *testing.T) {
	cols := []record.Column{
		{Name: "tenant_id", Type: "text", TypMod: -1, Key: true},
		{Name: "id", Type: "int8", TypMod: -1, Key: true},
		{Name: "body", Type: "text", TypMod: -1},
	}
	src := record.Source{ID: "sys/db", Schema: "public", Table: "t"}
	enc := record.NewEncoder(src, "tenant_id", cols, record.SchemaID("tenant_id", cols))
	for _, tc := range []struct {
		name   string
		rows   int
		body   func(i int) string
		failAt int
	}{
		{"small rows", 5000, func(i int) string { return fmt.Sprint("row ", i) }, -1},
		{"rows of varying size", 3000, func(i int) string { return strings.Repeat("x", i%3000) }, -1},
		{"rows larger than a slab", 20, func(i int) string { return strings.Repeat("y", slabBytes+i) }, -1},
		{"a failed record", 2000, func(i int) string { return "z" }, 1234},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, uint64(tc.rows)))
			h := &holdingProducer{failAt: tc.failAt}
			p := newSlabProducer(context.Background(), h)
			at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
			values := make([]record.Value, 3)
			for i := 0; i < tc.rows; i++ {
				values[0] = record.Value{Text: "acme"}
				values[1] = record.Value{Text: fmt.Sprint(i)}
				values[2] = record.Value{Text: tc.body(i)}
				r := record.Record{
					EventID: record.SnapshotEventID(src.ID, 1, "public.t", []string{"acme", values[1].Text}, at), OccurredAt: at, IngestedAt: at,
					TenantID: "acme", TenantColumn: "tenant_id", Source: src, LSN: 1, CommitLSN: 1, Op: record.Read,
					Columns: cols, SchemaID: record.SchemaID("tenant_id", cols), Values: values,
				}
				p.produce(enc, "topic", &r)
				h.mu.Lock()
				last := h.held[len(h.held)-1]
				h.mu.Unlock()
				if want := string(record.AppendJSON(nil, &r)); last.value != want || last.key != r.PartitionKey() || last.r.Topic != "topic" {
					t.Fatalf("row %d produced as key %s value %s, want %s %s", i, last.key, last.value, r.PartitionKey(), want)
				}
				if rng.IntN(50) == 0 {
					h.ackSome(rng, rng.IntN(400))
				}
			}
			// The rest is acknowledged while wait waits for it.
			acker := rand.New(rand.NewPCG(2, uint64(tc.rows)))
			go func() {
				for h.ackSome(acker, 100) > 0 {
				}
			}()
			err := p.wait()
			if len(h.corrupt) > 0 {
				t.Fatalf("%d records changed before they were acknowledged (slab reused too early), first %s", len(h.corrupt), h.corrupt[0])
			}
			if tc.failAt >= 0 && err == nil {
				t.Fatal("wait returned no error after a record failed")
			}
			if tc.failAt < 0 && err != nil {
				t.Fatalf("wait: %v", err)
			}
		})
	}
}
