package e2e

import (
	"bytes"
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walhouse/walhouse/harness/testenv"
	"github.com/walhouse/walhouse/record"
	"github.com/walhouse/walhouse/sink"
)

// TestIntegrationHostileBudgetAndFuture writes to a table's topic what a
// principal allowed to write there can forge against the sink itself: row
// batches of 8 MiB and of nearly the whole 64 MiB record bound made of
// narrow rows (once 893 MiB allocated for 8 MiB, and a 64 MiB one killed
// the sink before it could set it aside, at every restart), a version 1
// record of 8 MiB of faulty columns (once one error per column, a 21 MB
// log line), and a change and a TRUNCATE marker at WAL position 2^61
// (once winning over every later real change for good, and deleting the
// table). They are written while the sink is stopped, so that they may be
// the first items the restarted sink meets on their partition: their
// bound then starts where loading stopped (ClickHouse's _walhouse_sync),
// as 2^61 is below what PostgreSQL's epoch alone bounds. The sink must
// dead-letter each with its reason (over_budget, future_position), stay
// within its memory, and ClickHouse FINAL must equal PostgreSQL after
// later real changes of the same rows.
func TestIntegrationHostileBudgetAndFuture(t *testing.T) {
	p := newPipeline(t)
	p.dropTopicsAtEnd()
	ctx := context.Background()
	table, qt := p.table("budget", `(tenant_id text NOT NULL, id bigint NOT NULL, note text, PRIMARY KEY (tenant_id, id))`)
	p.exec(fmt.Sprintf(`INSERT INTO %s SELECT 't' || (g %% 3), g, 'copied' FROM generate_series(1, 50) g`, qt))
	capt := p.startCapture(table)
	first := p.startSink()
	p.exec(fmt.Sprintf(`UPDATE %s SET note = 'streamed' WHERE id <= 10`, qt))
	pgQuery := fmt.Sprintf(`SELECT tenant_id, id::text, coalesce(note, '<null>') FROM %s AS t ORDER BY t.tenant_id, t.id`, qt)
	chQuery := fmt.Sprintf("SELECT tenant_id, toString(id), ifNull(note, '<null>') FROM `%s`.`%s` FINAL WHERE _is_deleted = 0 ORDER BY tenant_id, id", p.database, table)
	p.converge(pgQuery, chQuery, capt, first)
	first.Stop()

	// Templates: a row batch of the copy and a streamed change.
	topic := record.TopicName(p.prefix, "public", table)
	rs, err := p.topicRecords(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	var batch, change *kgo.Record
	for _, r := range changes(rs) {
		if isRowBatch(r) && batch == nil {
			batch = r
		}
		if !isRowBatch(r) {
			change = r
		}
	}
	if batch == nil || change == nil {
		t.Fatalf("the topic lacks a row batch or a streamed change: %d records", len(rs))
	}
	rowsAt := bytes.Index(batch.Value, []byte(`"rows":[`))
	narrowBatch := func(size int, header string) *kgo.Record {
		var b bytes.Buffer
		b.Grow(size)
		b.Write(batch.Value[:rowsAt])
		// A first row without its key: a decoder that allocates for the
		// whole batch before validating a row finds it only afterwards,
		// and no row loads.
		b.WriteString(`"rows":[["t0",null,null]`)
		n := 1
		for b.Len() < size-32 {
			b.WriteString(`,["t0","1",null]`)
			n++
		}
		b.WriteString("]}")
		if header == "" {
			header = fmt.Sprint(n)
		}
		return &kgo.Record{Topic: topic, Partition: batch.Partition, Key: batch.Key, Value: b.Bytes(),
			Headers: []kgo.RecordHeader{{Key: record.HeaderRows, Value: []byte(header)}}}
	}
	decoded, err := p.decode(change)
	if err != nil || len(decoded) != 1 {
		t.Fatalf("decode the streamed change: %v", err)
	}
	orig := decoded[0]
	v1 := string(record.AppendJSONVersion(nil, orig, 1))
	wide := strings.Replace(v1, `"columns":[`, `"columns":[`+strings.Repeat(`{"name":"","type":""},`, 8<<20/22), 1)
	forged := *orig
	const future = record.LSN(1 << 61)
	forged.LSN, forged.CommitLSN = future, future
	forged.Version = record.Version(forged.LSN)
	forged.EventID = record.EventID(orig.Source.ID, forged.CommitLSN, 0, orig.OccurredAt) // a new change, not a reused eventId
	for i, c := range forged.Columns {
		if c.Name == "note" {
			forged.Values = append([]record.Value(nil), forged.Values...)
			forged.Values[i] = record.Value{Text: "forged"}
		}
	}
	marker := &kgo.Record{Topic: topic, Partition: change.Partition}
	now := time.Now().UTC()
	for _, h := range (record.Truncate{Source: record.Source{Schema: "public", Table: table}, LSN: future, CommitTime: now, At: now}).Headers() {
		marker.Headers = append(marker.Headers, kgo.RecordHeader{Key: h.Key, Value: []byte(h.Value)})
	}
	hostile := []*kgo.Record{
		narrowBatch(8<<20, ""),
		narrowBatch(63<<20, "1000"), // a header within the bound: the decoder stops it
		{Topic: topic, Partition: change.Partition, Key: change.Key, Value: []byte(wide)},
		{Topic: topic, Partition: change.Partition, Key: change.Key, Value: record.AppendJSON(nil, &forged)},
		marker,
	}
	cl := p.kafka(kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerBatchMaxBytes(70<<20))
	for _, r := range hostile {
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatalf("produce a forged record of %d bytes: %v", len(r.Value), err)
		}
	}
	metricsAddr := testenv.FreeAddr(t)
	snk := p.startSink("--metrics-addr", metricsAddr)
	// Real changes of the forged row and the others after the forgeries.
	p.exec(fmt.Sprintf(`UPDATE %s SET note = 'after the forgeries' WHERE id <= 20`, qt))
	p.exec(fmt.Sprintf(`INSERT INTO %s VALUES ('t1', 100, 'new')`, qt))
	p.convergeWithin(3*time.Minute, pgQuery, chQuery, capt, snk)

	ls := p.waitDeadLetters(p.prefix+"-dlq", len(hostile), capt, snk)
	var reasons []string
	for _, l := range ls {
		if l.Origin != "sink" || l.Topic != topic || len(l.Error) > 16<<10+8 {
			t.Errorf("dead letter %s/%d@%d from %s with %d bytes of error, want the sink's, of topic %s, error cut", l.Topic, l.Partition, l.Offset, l.Origin, len(l.Error), topic)
		}
		reasons = append(reasons, l.Reason)
	}
	sort.Strings(reasons)
	want := []string{sink.ReasonFuturePosition, sink.ReasonFuturePosition, sink.ReasonOverBudget, sink.ReasonOverBudget, sink.ReasonOverBudget}
	if fmt.Sprint(reasons) != fmt.Sprint(want) {
		t.Errorf("dead letters' reasons %v, want %v", reasons, want)
	}
	if v := metric(t, metricsAddr, fmt.Sprintf(`walhouse_sink_future_positions_total{kind="record",topic="%s"}`, topic)) +
		metric(t, metricsAddr, fmt.Sprintf(`walhouse_sink_future_positions_total{kind="truncate marker",topic="%s"}`, topic)); v != 2 {
		t.Errorf("walhouse_sink_future_positions_total = %v, want 2", v)
	}
	peak, err := snk.PeakRSS()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("peak resident memory of the sink: %d MiB", peak>>20)
	// The Helm chart limits the sink to 2 GiB; the sink's soft limit for
	// the default bound is 512 MiB, and records of 60 MiB peak at about
	// 550 MiB (TestIntegrationLargeValues).
	if limit := int64(640 << 20); peak > limit {
		t.Errorf("the sink peaked at %d MiB, want under %d MiB", peak>>20, limit>>20)
	}
	requireRunning(t, capt, snk)
}

// isRowBatch reports whether r carries record.HeaderRows.
func isRowBatch(r *kgo.Record) bool {
	for _, h := range r.Headers {
		if h.Key == record.HeaderRows {
			return true
		}
	}
	return false
}
