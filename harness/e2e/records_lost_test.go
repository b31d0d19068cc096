package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walhouse/walhouse/harness/testenv"
)

// syncedThenKilled waits until sink recorded every one of table's three
// partitions as loaded, kills it, and returns how far each is loaded.
func (p *pipeline) syncedThenKilled(t *testing.T, table string, sink *testenv.Proc) map[int32]time.Time {
	t.Helper()
	ctx := context.Background()
	if err := testenv.Eventually(ctx, 60*time.Second, func(ctx context.Context) error {
		marks, err := p.loadedThrough(ctx, table)
		if err == nil && len(marks) < 3 {
			err = fmt.Errorf("%d of 3 partitions recorded", len(marks))
		}
		return err
	}); err != nil {
		t.Fatalf("no lastSyncAt before the gap: %v", err)
	}
	sink.Kill()
	before, err := p.loadedThrough(ctx, table)
	if err != nil {
		t.Fatal(err)
	}
	return before
}

// loadedThrough returns each partition's loaded_through of table in
// _walhouse_sync, the rows lastSyncAt is the least of.
func (p *pipeline) loadedThrough(ctx context.Context, table string) (map[int32]time.Time, error) {
	q := fmt.Sprintf("SELECT partition, loaded_through FROM `%s`._walhouse_sync FINAL WHERE source_table = {t:String}", p.database)
	rows, err := p.ch.Query(ch.Context(ctx, ch.WithParameters(ch.Parameters{"t": table})), q)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[int32]time.Time{}
	for rows.Next() {
		var part int32
		var at time.Time
		if err := rows.Scan(&part, &at); err != nil {
			return nil, err
		}
		out[part] = at
	}
	return out, rows.Err()
}

// deleteRecordsMidway does what retention does to a partition the sink
// has not read: it moves the log start of topic's partition halfway
// between the group's committed offset and the end, and returns the
// offsets deleted, [committed, start).
func (p *pipeline) deleteRecordsMidway(topic string, partition int32) (committed, start int64) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	adm := kadm.NewClient(p.kafka())
	offs, err := adm.FetchOffsets(ctx, p.group)
	if err != nil {
		p.t.Fatal(err)
	}
	c, ok := offs.Lookup(topic, partition)
	if !ok || c.Err != nil {
		p.t.Fatalf("no committed offset for %s/%d: %v", topic, partition, c.Err)
	}
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		p.t.Fatal(err)
	}
	end, ok := ends.Lookup(topic, partition)
	if !ok || end.Err != nil || end.Offset-c.At < 4 {
		p.t.Fatalf("%s/%d: committed %d, end %+v: want a few records the sink has not read", topic, partition, c.At, end)
	}
	committed, start = c.At, c.At+(end.Offset-c.At)/2
	var del kadm.Offsets
	del.Add(kadm.Offset{Topic: topic, Partition: partition, At: start})
	resp, err := adm.DeleteRecords(ctx, del)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		p.t.Fatalf("delete records of %s/%d before %d: %v", topic, partition, start, err)
	}
	return committed, start
}

// TestIntegrationSinkStopsAtARetentionGap is issue 24's case: the sink is
// stopped, rows are written, retention deletes records of a partition the
// sink has not read, the sink starts again. franz-go alone resumes at the
// log start without a word; the sink must stop loading that partition at
// the gap, say so in its log with the offsets, the table and the recovery,
// count it, answer not ready, and keep the table's lastSyncAt before the
// gap while the other partitions go on. The recovery it names (drop the
// ClickHouse table, --resnapshot, one start with --accept-lost-records)
// brings ClickHouse FINAL back equal to PostgreSQL.
func TestIntegrationSinkStopsAtARetentionGap(t *testing.T) {
	p, tb, capture := capturedSinkTable(t)
	ctx := context.Background()
	metrics := testenv.FreeAddr(t)
	sink := p.sink("--metrics-addr", metrics)
	p.change(tb, 1)
	p.converge(tb.pgQuery, tb.chQuery, capture, sink)
	before := p.syncedThenKilled(t, tb.name, sink)
	n := p.change(tb, 2) + p.change(tb, 3)
	p.waitProduced(tb.topic, n)
	committed, start := p.deleteRecordsMidway(tb.topic, 0)

	sink = p.sink("--metrics-addr", metrics)
	waitLog(t, sink, "records lost", "topic="+tb.topic, "partition=0", fmt.Sprintf("lost_from=%d", committed), fmt.Sprintf("lost_to=%d", start-1),
		"table=public."+tb.name, "--resnapshot public."+tb.name, "--accept-lost-records "+tb.topic+"/0")
	lost := fmt.Sprintf(`walhouse_sink_offsets_lost_total{partition="0",topic=%q}`, tb.topic)
	if v := waitMetric(t, metrics, lost, 1, sink); v != float64(start-committed) {
		t.Errorf("%s = %v, want %d", lost, v, start-committed)
	}
	if v := metric(t, metrics, fmt.Sprintf(`walhouse_sink_partitions_records_lost{partition="0",topic=%q}`, tb.topic)); v != 1 {
		t.Errorf("walhouse_sink_partitions_records_lost = %v, want 1", v)
	}
	waitHealth(t, sink, metrics, "/readyz", 503, fmt.Sprintf("%s/0 offsets %d to %d", tb.topic, committed, start-1))

	// The other partitions load on, past where partition 0 stopped; the
	// table's lastSyncAt, the least of them, stays before the gap.
	var after map[int32]time.Time
	if err := testenv.Eventually(ctx, 90*time.Second, func(ctx context.Context) (err error) {
		if err := exited(sink); err != nil {
			return err
		}
		if after, err = p.loadedThrough(ctx, tb.name); err != nil {
			return err
		}
		for part := int32(1); part < 3; part++ {
			if !after[part].After(before[0]) {
				return fmt.Errorf("partition %d loaded through %v, not yet past partition 0's %v", part, after[part], before[0])
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !after[0].Equal(before[0]) {
		t.Errorf("partition 0 loaded through %v after the gap, want %v, where it stopped: lastSyncAt would claim lost changes loaded", after[0], before[0])
	}

	// The recovery the log names.
	sink.Kill()
	capture.Stop()
	p.chExec(fmt.Sprintf("DROP TABLE `%s`.`%s`", p.database, tb.name), nil)
	capture = killAtEnd(t, p.runCapture(p.captureArgs([]string{tb.name}, "--resnapshot", "public."+tb.name)))
	sink = p.sink("--metrics-addr", metrics, "--accept-lost-records", tb.topic+"/0")
	p.change(tb, 4)
	p.converge(tb.pgQuery, tb.chQuery, capture, sink)
	waitLog(t, sink, "records lost, accepted as told", "topic="+tb.topic, "partition=0")
	waitHealth(t, sink, metrics, "/readyz", 200, `"records lost","ok":true`)
}

// TestIntegrationDLQReplayStopsAtAGap: dead letters that retention deleted
// before `walhouse dlq replay` replayed them must stop the replay with an
// error naming the offsets, not be skipped by resuming at the log start.
// (The records here are not dead letters replay can parse: it skips and
// commits them, which is all this test needs of them.)
func TestIntegrationDLQReplayStopsAtAGap(t *testing.T) {
	p := newPipeline(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dlq, group := testenv.Name("dlq"), testenv.Name("replay")
	cl := p.kafka()
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopic(ctx, 1, -1, nil, dlq); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = adm.DeleteTopics(context.Background(), dlq) })
	produce := func(n int) {
		t.Helper()
		for i := 0; i < n; i++ {
			if err := cl.ProduceSync(ctx, &kgo.Record{Topic: dlq, Value: []byte("not a dead letter")}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	replay := func() error {
		_, err := walhouse(ctx, "dlq", "replay", "--kafka", p.env.Kafka, "--topic-prefix", p.prefix, "--dlq-topic", dlq, "--replay-group", group)
		return err
	}
	produce(3)
	if err := replay(); err != nil {
		t.Fatal(err)
	}
	produce(4) // offsets 3 to 6; retention takes 3 and 4
	var del kadm.Offsets
	del.Add(kadm.Offset{Topic: dlq, Partition: 0, At: 5})
	if resp, err := adm.DeleteRecords(ctx, del); err != nil || resp.Error() != nil {
		t.Fatalf("delete records: %v %v", err, resp.Error())
	}
	err := replay()
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("offsets 3 to 4 of %s partition 0 were deleted", dlq)) {
		t.Fatalf("replay after a gap: %v, want it to stop naming offsets 3 to 4", err)
	}
}
