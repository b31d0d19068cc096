package capture

import (
	"context"
	"log/slog"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walhouse/walhouse/record"

	"github.com/walhouse/walhouse/capture/pgoutput/pgoutputtest"
)

// headerLookup looks kr's headers up by key (the first of a key), as
// record's header parsers take them.
func headerLookup(kr *kgo.Record) func(key string) (string, bool) {
	byKey := map[string]string{}
	for _, h := range kr.Headers {
		if _, seen := byKey[h.Key]; !seen {
			byKey[h.Key] = string(h.Value)
		}
	}
	return func(key string) (string, bool) {
		v, ok := byKey[key]
		return v, ok
	}
}

// heldProducer keeps produced records and their promises, so a test
// decides when Kafka acknowledges them.
type heldProducer struct {
	mu       sync.Mutex
	records  []*kgo.Record
	promises []func(*kgo.Record, error)
}

func (p *heldProducer) Produce(_ context.Context, r *kgo.Record, promise func(*kgo.Record, error)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.records = append(p.records, r)
	p.promises = append(p.promises, promise)
}

func (p *heldProducer) ackAll() {
	for i, promise := range p.promises {
		promise(p.records[i], nil)
	}
}

func TestHandleTruncateMarksEveryPartitionWithinTheTransaction(t *testing.T) {
	const start, end = record.LSN(100), record.LSN(500)
	prod := &heldProducer{}
	cfg := defaults()
	cfg.partitions = 3
	commit := time.Date(2026, 5, 6, 7, 8, 9, 123456000, time.UTC)
	s := &stream{
		c:          &Capturer{cfg: cfg, producer: prod, log: slog.New(slog.DiscardHandler)},
		parts:      map[string]int32{},
		acks:       newAckTracker(start),
		produceCtx: context.Background(),
	}
	s.tr = newTranslator(&s.c.cfg, "src", nil, s, s, nil, nil)
	s.tr.rels = map[uint32]*relation{
		1: {name: "public.orders", source: record.Source{ID: "src", Schema: "public", Table: "orders"}, topic: "wh.public.orders"},
		2: {name: "public.items", source: record.Source{ID: "src", Schema: "public", Table: "items"}, topic: "wh.public.items"},
		3: {name: "public.skipped"}, // excluded from capture: no topic
	}
	if err := s.tr.handle(context.Background(), 200, truncateMsg(1, 1)); err == nil {
		t.Fatal("a truncate outside a transaction was accepted")
	}
	s.tr.inTx, s.tx, s.tr.commitLSN, s.tr.commitTime = true, s.acks.begin(), 450, commit
	const truncLSN = record.LSN(300)
	if err := s.tr.handle(context.Background(), truncLSN, truncateMsg(1, 1, 3, 2)); err != nil {
		t.Fatal(err)
	}
	if err := s.tr.handle(context.Background(), 310, truncateMsg(0, 9)); err == nil {
		t.Error("a truncate of a relation never described was accepted")
	}

	seen := map[string][]int32{}
	part := Partitioner()
	for _, kr := range prod.records {
		tr, ok, err := record.ParseTruncate(headerLookup(kr))
		if !ok || err != nil {
			t.Fatalf("record to %s/%d is not a truncate marker: ok %v, err %v", kr.Topic, kr.Partition, ok, err)
		}
		if tr.LSN != truncLSN || !tr.CommitTime.Equal(commit) || !tr.Cascade || tr.RestartIdentity || "wh."+tr.Source.Schema+"."+tr.Source.Table != kr.Topic {
			t.Errorf("marker %+v on %s", tr, kr.Topic)
		}
		if kr.Key != nil || kr.Value != nil {
			t.Errorf("marker has a key or value")
		}
		if p := part.ForTopic(kr.Topic).Partition(kr, 3); int32(p) != kr.Partition {
			t.Errorf("the partitioner moves the marker for partition %d to %d", kr.Partition, p)
		}
		seen[kr.Topic] = append(seen[kr.Topic], kr.Partition)
	}
	want := map[string][]int32{"wh.public.orders": {0, 1, 2}, "wh.public.items": {0, 1, 2}}
	if !reflect.DeepEqual(seen, want) {
		t.Errorf("markers went to %v, want %v", seen, want)
	}

	// The markers belong to the transaction: nothing is durable before
	// Kafka acknowledged them and the transaction committed.
	prod.ackAll()
	if durable, _ := s.acks.state(); durable != start {
		t.Errorf("durable %s before the commit, want %s", durable, start)
	}
	s.acks.commit(s.tx, end)
	if durable, _ := s.acks.state(); durable != end {
		t.Errorf("durable %s after the commit, want %s", durable, end)
	}
}

func TestTruncateMarkersWaitForKafka(t *testing.T) {
	prod := &heldProducer{}
	cfg := defaults()
	cfg.partitions = 2
	s := &stream{
		c:          &Capturer{cfg: cfg, producer: prod, log: slog.New(slog.DiscardHandler)},
		parts:      map[string]int32{},
		acks:       newAckTracker(10),
		produceCtx: context.Background(),
	}
	s.tr = newTranslator(&s.c.cfg, "", nil, s, s, nil, nil)
	s.tr.rels = map[uint32]*relation{1: {name: "public.t", source: record.Source{Schema: "public", Table: "t"}, topic: "wh.public.t"}}
	s.tr.inTx, s.tx, s.tr.commitTime = true, s.acks.begin(), time.Unix(1, 0)
	if err := s.tr.handle(context.Background(), 20, truncateMsg(0, 1)); err != nil {
		t.Fatal(err)
	}
	s.acks.commit(s.tx, 30)
	if durable, _ := s.acks.state(); durable != 10 {
		t.Errorf("durable %s with markers unacknowledged, want 0/A", durable)
	}
	prod.ackAll()
	if durable, _ := s.acks.state(); durable != 30 {
		t.Errorf("durable %s after Kafka acknowledged the markers, want 0/1E", durable)
	}
}

// truncateMsg encodes a pgoutput Truncate message of protocol version 1.
var truncateMsg = pgoutputtest.Truncate
