package capture

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
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
	mu        sync.Mutex
	held      []heldRecord
	lastValue string // value of the last record produced
	failAt    int    // fail the record with this sequence number (-1: none)
	seq       int
	corrupt   []string
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
	h.lastValue = string(r.Value)
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

// ackLater acknowledges h's records on another goroutine, up to most at a
// time in random order, as Kafka does: a reader may wait for them. finish
// acknowledges the rest and returns once all are.
func ackLater(h *holdingProducer, seed uint64, most int) (finish func()) {
	stop := make(chan struct{})
	acked := make(chan struct{})
	go func() {
		defer close(acked)
		rng := rand.New(rand.NewPCG(2, seed))
		for {
			select {
			case <-stop:
				for h.ackSome(rng, 100) > 0 {
				}
				return
			default:
				h.ackSome(rng, rng.IntN(most))
				runtime.Gosched()
			}
		}
	}()
	return func() { close(stop); <-acked }
}

// slabTestRecord returns row i of a three-column table with the given body.
func slabTestRecord(i int, body string) record.Record {
	cols := slabTestColumns
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	id := fmt.Sprint(i)
	return record.Record{
		EventID: record.SnapshotEventID(slabTestSource.ID, 1, "public.t", []string{"acme", id}, at), OccurredAt: at, IngestedAt: at,
		TenantID: "acme", TenantColumn: "tenant_id", Source: slabTestSource, LSN: 1, CommitLSN: 1, Op: record.Read,
		Columns: cols, SchemaID: record.SchemaID("tenant_id", cols), Values: []record.Value{{Text: "acme"}, {Text: id}, {Text: body}},
	}
}

var (
	slabTestColumns = []record.Column{
		{Name: "tenant_id", Type: "text", TypMod: -1, Key: true},
		{Name: "id", Type: "int8", TypMod: -1, Key: true},
		{Name: "body", Type: "text", TypMod: -1},
	}
	slabTestSource = record.Source{ID: "sys/db", Schema: "public", Table: "t"}
)

func TestSlabProducer(t *testing.T) {
	enc := record.NewEncoder(slabTestSource, "tenant_id", slabTestColumns, record.SchemaID("tenant_id", slabTestColumns), record.EnvelopeVersion)
	for _, tc := range []struct {
		name   string
		rows   int
		body   func(i int) string
		failAt int
	}{
		{"small rows, more than maxSlabs slabs", maxSlabs*slabRecords + 5000, func(i int) string { return fmt.Sprint("row ", i) }, -1},
		{"rows of varying size", 3000, func(i int) string { return strings.Repeat("x", i%3000) }, -1},
		{"rows larger than a slab", 20, func(i int) string { return strings.Repeat("y", slabBytes+i) }, -1},
		{"a failed record", 2000, func(i int) string { return "z" }, 1234},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &holdingProducer{failAt: tc.failAt}
			p := newSlabProducer(context.Background(), h, record.DefaultMaxBytes)
			finish := ackLater(h, uint64(tc.rows), 300)
			for i := 0; i < tc.rows; i++ {
				r := slabTestRecord(i, tc.body(i))
				if err := p.produce(enc, "topic", &r); err != nil {
					t.Fatal(err)
				}
				h.mu.Lock()
				last := h.lastValue
				h.mu.Unlock()
				if want := string(record.AppendJSON(nil, &r)); last != want {
					t.Fatalf("row %d produced as %s, want %s", i, last, want)
				}
			}
			err := p.wait()
			finish()
			if p.made > maxSlabs {
				t.Errorf("%d slabs made, want at most %d", p.made, maxSlabs)
			}
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

// TestSlabProducerStopsWaiting checks that a reader waiting for a free slab
// (Kafka acknowledges nothing) stops when its context is cancelled.
func TestSlabProducerStopsWaiting(t *testing.T) {
	enc := record.NewEncoder(slabTestSource, "tenant_id", slabTestColumns, record.SchemaID("tenant_id", slabTestColumns), record.EnvelopeVersion)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := newSlabProducer(ctx, &holdingProducer{failAt: -1}, record.DefaultMaxBytes)
	var err error
	for i := 0; err == nil; i++ {
		if i == maxSlabs*slabRecords {
			cancel() // every slab is full and in flight: the next record waits
		}
		r := slabTestRecord(i, "x")
		err = p.produce(enc, "topic", &r)
	}
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("produce = %v, want context.Canceled", err)
	}
}
