package monitor

import (
	"context"
	"crypto/rand"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walhouse/walhouse/harness/testenv"
)

func TestIntegrationProbe(t *testing.T) {
	env := testenv.Require(t, "pg", "kafka")
	ctx := context.Background()
	pool := testenv.PGPool(t, env.PG)
	slot, prefix, group := testenv.Name("slot"), testenv.Name("lag"), testenv.Name("grp")
	if _, err := pool.Exec(ctx, "SELECT pg_create_logical_replication_slot($1, 'pgoutput')", slot); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = pool.Exec(ctx, "SELECT pg_drop_replication_slot($1)", slot) })

	cl, err := kgo.NewClient(kgo.SeedBrokers(env.Kafka), kgo.DefaultProduceTopic(prefix+".public.orders"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	topic, dlq := prefix+".public.orders", prefix+"-dlq"
	// An hour's retention: records 2 to 5 below are older than half of it.
	hour := "3600000"
	for _, tp := range []string{topic, dlq} {
		if _, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{"retention.ms": &hour}, tp); err != nil {
			t.Fatal(err)
		}
	}
	// A topic kept by size: 3,000 bytes, in one segment (Kafka never
	// deletes the active one), so its 10 records of 1,000 bytes stay, all
	// unread, and all but the newest two or so are past the limit.
	sized, limit := prefix+".public.sized", "3000"
	if _, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{"retention.bytes": &limit}, sized); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = adm.DeleteTopics(context.Background(), topic, dlq, sized) })
	for i := 0; i < 10; i++ {
		v := make([]byte, 1000)
		_, _ = rand.Read(v) // incompressible: the client compresses batches
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: sized, Value: v}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-40 * time.Minute)
	for i := 0; i < 8; i++ {
		r := &kgo.Record{Topic: topic, Value: []byte(fmt.Sprint(i))}
		if i < 6 {
			r.Timestamp = old
		}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	// Retention (here DeleteRecords) removes offsets 0 to 3; the group
	// committed 2, so 2 and 3 are lost.
	del := kadm.Offsets{}
	del.Add(kadm.Offset{Topic: topic, Partition: 0, At: 4})
	if resp, err := adm.DeleteRecords(ctx, del); err != nil || resp.Error() != nil {
		t.Fatalf("delete records: %v %v", err, resp.Error())
	}
	for i := 0; i < 2; i++ {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: dlq, Value: []byte("poison")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	offs := kadm.Offsets{}
	offs.Add(kadm.Offset{Topic: topic, Partition: 0, At: 2, LeaderEpoch: -1})
	offs.Add(kadm.Offset{Topic: sized, Partition: 0, At: 0, LeaderEpoch: -1})
	if _, err := adm.CommitOffsets(ctx, group, offs); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = adm.DeleteGroups(context.Background(), group) })

	pl := NewProbe(Config{PG: pool, Slot: slot, Kafka: adm, Group: group, Prefix: prefix, DLQTopic: dlq}).Probe(ctx)
	if len(pl.Errors) > 0 {
		t.Fatalf("probe errors: %v", pl.Errors)
	}
	if pl.Slot == nil || pl.Slot.Name != slot || pl.Slot.Active || pl.Slot.LagBytes < 0 || pl.Slot.ConfirmedLSN == 0 {
		t.Errorf("slot %+v", pl.Slot)
	}
	if got := pl.ConsumerLag[topic][0]; got != 6 {
		t.Errorf("consumer lag %d, want 6 (8 produced, 2 committed; the 2 lost count); all %v", got, pl.ConsumerLag)
	}
	if got := pl.RecordsLost[topic][0]; got != 2 || len(pl.RecordsLost) != 1 {
		t.Errorf("records lost %v, want 2 of %s/0 (committed 2, log start 4)", pl.RecordsLost, topic)
	}
	if got := pl.NearRetention[topic][0]; got != 2 {
		t.Errorf("records near retention %v, want 2 of %s/0 (4 and 5, 40 minutes old of an hour's retention)", pl.NearRetention, topic)
	}
	// Each record's batch is 1,000 bytes and some overhead: 3,000 bytes
	// hold two of them and part of a third, so the oldest 8 are at risk.
	if got := pl.NearRetention[sized][0]; got != 8 {
		t.Errorf("records near retention.bytes %v, want 8 of %s/0 (10 records of 1,000 bytes unread, retention.bytes 3,000)", pl.NearRetention, sized)
	}
	if pl.DLQDepth == nil || *pl.DLQDepth != 2 {
		t.Errorf("dead-letter depth %v, want 2", pl.DLQDepth)
	}
	missing := NewProbe(Config{PG: pool, Slot: "no_such_slot"}).Probe(ctx)
	if len(missing.Errors) != 1 || missing.Slot != nil {
		t.Errorf("a missing slot is not reported: %+v", missing)
	}
}
