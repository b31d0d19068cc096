package e2e

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/walhouse/walhouse/harness/testenv"
	"github.com/walhouse/walhouse/record"
)

const (
	seriesLayer2Hits  = `walhouse_sink_dedup_hits_total{layer="layer2"}`
	seriesFailOpen    = "walhouse_sink_dedup_fail_open_total"
	seriesMismatches  = "walhouse_sink_eventid_mismatches_total"
	seriesDeadLetters = "walhouse_sink_dead_letters_total"
	seriesLoaded      = "walhouse_sink_records_loaded_total"
)

// sink starts a sink (startSink) that is killed when the test ends. A
// graceful stop would cost every test 15 s: `walhouse sink` does not exit on
// SIGTERM (see TestIntegrationSinkStopsOnSIGTERM), so testenv waits that
// long before it kills it anyway.
func (p *pipeline) sink(extra ...string) *testenv.Proc {
	p.t.Helper()
	return killAtEnd(p.t, p.startSink(extra...))
}

// layer2Sink starts a sink (sink) with Layer 2 on, then extra flags.
func (p *pipeline) layer2Sink(extra ...string) *testenv.Proc {
	p.t.Helper()
	return p.sink(append(p.layer2Flags(), extra...)...)
}

// layer2Flags returns the flags that turn a sink's Layer 2 on against the
// local Redis, under dedup keys of their own. The test needs Redis:
// without it, it skips or fails as testenv.Require says.
func (p *pipeline) layer2Flags() []string {
	p.t.Helper()
	env := testenv.Require(p.t, "redis")
	return []string{"--dedup-addr", env.Redis, "--dedup-prefix", testenv.Name("dedup") + ":"}
}

// killAtEnd kills proc when the test ends, before testenv's graceful stop.
func killAtEnd(t *testing.T, proc *testenv.Proc) *testenv.Proc {
	t.Cleanup(proc.Kill)
	return proc
}

// Records produced twice to Kafka (a producer retry, a replayed range) are
// dropped by Layer 2 before ClickHouse sees them, and counted.
func TestIntegrationSinkLayer2SkipsKafkaDuplicates(t *testing.T) {
	p, tb, capture := capturedSinkTable(t)
	metrics := testenv.FreeAddr(t)
	sink := p.layer2Sink("--metrics-addr", metrics)

	p.change(tb, 0)
	p.change(tb, 1)
	p.converge(tb.pgQuery, tb.chQuery, capture, sink)
	raw := p.rawCount(tb)
	hits := metric(t, metrics, seriesLayer2Hits)
	loaded := metric(t, metrics, fmt.Sprintf(`%s{table="public.%s"}`, seriesLoaded, tb.name))

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rs, err := p.topicRecords(ctx, tb.topic)
	if err != nil {
		t.Fatal(err)
	}
	dups := changes(rs)
	p.reproduce(dups)

	rows := rowsOf(dups)
	got := waitMetric(t, metrics, seriesLayer2Hits, hits+float64(rows), capture, sink)
	if got != hits+float64(rows) {
		t.Errorf("Layer 2 hits went from %v to %v, want %d more", hits, got, rows)
	}
	if now := p.rawCount(tb); now != raw {
		t.Errorf("ClickHouse has %d rows without FINAL after %d duplicates, had %d: duplicates were inserted", now, len(dups), raw)
	}
	if now := metric(t, metrics, fmt.Sprintf(`%s{table="public.%s"}`, seriesLoaded, tb.name)); now != loaded {
		t.Errorf("records loaded went from %v to %v after only duplicates", loaded, now)
	}
	p.converge(tb.pgQuery, tb.chQuery, capture, sink)
}

// With the dedup store down the sink loads without Layer 2 (fail open):
// nothing stops, nothing is lost, and the failures are counted.
func TestIntegrationSinkFailsOpenWithoutRedis(t *testing.T) {
	p, tb, capture := capturedSinkTable(t)
	metrics := testenv.FreeAddr(t)
	sink := p.layer2Sink("--metrics-addr", metrics)

	p.change(tb, 0)
	p.converge(tb.pgQuery, tb.chQuery, capture, sink)
	if n := metric(t, metrics, seriesFailOpen); n != 0 {
		t.Fatalf("%s is %v with Redis up", seriesFailOpen, n)
	}

	stopService(t, "redis")
	p.change(tb, 1)
	p.change(tb, 2)
	p.converge(tb.pgQuery, tb.chQuery, capture, sink)
	if n := metric(t, metrics, seriesFailOpen); n == 0 {
		t.Errorf("%s is 0 after loading with Redis down", seriesFailOpen)
	}

	services(t, "start", "redis")
	p.change(tb, 3)
	p.converge(tb.pgQuery, tb.chQuery, capture, sink)
	p.noRowTwice(tb)
}

// evictMembers removes every member from the group, which must hold only
// killed sinks, so that the next sink gets the partitions at once rather
// than after the dead members' session timeout (45 s).
func (p *pipeline) evictMembers() {
	p.t.Helper()
	p.evict(p.members()...)
}

// members returns the ids of the members of the pipeline's group (none
// while nobody joined it yet). A coordinator not available yet (a fresh
// broker creates its offsets topic first) is waited for.
func (p *pipeline) members() []string {
	p.t.Helper()
	adm := kadm.NewClient(p.kafka())
	var ids []string
	err := testenv.Eventually(context.Background(), 30*time.Second, func(ctx context.Context) error {
		groups, err := adm.DescribeGroups(ctx, p.group)
		if err == nil {
			err = groups.Error()
		}
		ids = ids[:0]
		if errors.Is(err, kerr.GroupIDNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		for _, m := range groups[p.group].Members {
			ids = append(ids, m.MemberID)
		}
		return nil
	})
	if err != nil {
		p.t.Fatalf("describe group %s: %v", p.group, err)
	}
	return ids
}

// evict removes the members (killed sinks) from the pipeline's group, as
// their session timeout would.
func (p *pipeline) evict(members ...string) {
	p.t.Helper()
	if len(members) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req := kmsg.NewPtrLeaveGroupRequest()
	req.Group = p.group
	for _, id := range members {
		mem := kmsg.NewLeaveGroupRequestMember()
		mem.MemberID = id
		req.Members = append(req.Members, mem)
	}
	resp, err := req.RequestWith(ctx, p.kafka())
	if err == nil {
		err = kerr.ErrorForCode(resp.ErrorCode)
	}
	for _, m := range resp.Members {
		if err == nil {
			err = kerr.ErrorForCode(m.ErrorCode)
		}
	}
	if err != nil {
		p.t.Fatalf("remove the killed sinks %v from group %s: %v", members, p.group, err)
	}
}

// intents returns the batch intents the group committed, by partition.
func (p *pipeline) intents(tb sinkTable) map[int32]string {
	p.t.Helper()
	resp, err := kadm.NewClient(p.kafka()).FetchOffsets(context.Background(), p.group)
	if err != nil {
		p.t.Fatal(err)
	}
	out := map[int32]string{}
	for part, o := range resp[tb.topic] {
		if strings.HasPrefix(o.Metadata, "walhouse:batch-end=") {
			out[part] = fmt.Sprintf("%d..%s", o.At, strings.TrimPrefix(o.Metadata, "walhouse:batch-end="))
		}
	}
	return out
}

// A sink killed after its insert and before its offset commit repeats the
// insert with the same deduplication token, so even without FINAL no row is
// there twice. Layer 2 is off: only the token can prevent the doubling.
// With --combine-partitions the insert covers the table's partitions (one
// group), which the restart rebuilds from the intents; the next test runs
// without it.
func TestIntegrationSinkCrashBetweenInsertAndCommit(t *testing.T) {
	p, tb, capture := capturedSinkTable(t)
	n := p.change(tb, 0) + p.change(tb, 1)
	p.waitProduced(tb.topic, n)

	p.crashSinkAt("sink.loaded", "--dedup-addr", "off", "--combine-partitions")
	if raw := p.rawCount(tb); raw == 0 {
		t.Fatal("the crashed sink inserted nothing: the crash did not happen between insert and commit")
	}
	in := p.intents(tb)
	if len(in) == 0 {
		t.Fatal("the crashed sink left no batch intent in its commit metadata")
	}
	t.Logf("batch intents left by the crash: %v", in)
	// The partitions' chunks were one insert (--combine-partitions): each
	// intent names its group, which the restart rebuilds.
	if len(in) > 1 && !strings.Contains(fmt.Sprint(in), "~") {
		t.Errorf("the intents of %d partitions name no group (chunk-end~leader:end*members): the crashed flush did not combine its partitions into one insert", len(in))
	}

	sink := p.sink("--dedup-addr", "off", "--combine-partitions")
	p.change(tb, 2)
	p.converge(tb.pgQuery, tb.chQuery, capture, sink)
	p.noRowTwice(tb)
}

// A sink that crashes again while it repeats an interrupted batch must
// still not double rows: the flush that repeats the batch also loads the
// partition's next records as a second chunk, so the intent it commits
// first must name that chunk's end too.
func TestIntegrationSinkCrashTwiceWhileRepeatingABatch(t *testing.T) {
	p, tb, capture := capturedSinkTable(t)

	n := p.change(tb, 0)
	p.waitProduced(tb.topic, n)
	p.crashSinkAt("sink.loaded", "--dedup-addr", "off")
	first := p.intents(tb)

	n += p.change(tb, 1)
	p.waitProduced(tb.topic, n)
	p.crashSinkAt("sink.loaded", "--dedup-addr", "off")
	t.Logf("intents after the first crash %v, after the second %v", first, p.intents(tb))

	n += p.change(tb, 2)
	p.waitProduced(tb.topic, n)
	sink := p.sink("--dedup-addr", "off")
	p.converge(tb.pgQuery, tb.chQuery, capture, sink)
	p.noRowTwice(tb)
}

// A record whose eventId was loaded before with another payload breaks the
// eventId contract: in mismatch mode error it goes to the dead letters with
// the reason, in mode warn it is loaded; both count it.
func TestIntegrationSinkEventIDReusedWithAnotherPayload(t *testing.T) {
	p, tb, capture := capturedSinkTable(t)

	// Two sinks on the same topics, one per mode, each with its own group,
	// database, dead-letter topic and dedup keys.
	type mode struct {
		name, group, database, dlq, metrics string
		proc                                *testenv.Proc
	}
	modes := []*mode{{name: "error"}, {name: "warn"}}
	for _, m := range modes {
		m.group, m.database, m.dlq, m.metrics = testenv.Name("grp"), testenv.Name("e2e"), testenv.Name("dlq"), testenv.FreeAddr(t)
		t.Cleanup(func() { _ = p.ch.Exec(context.Background(), "DROP DATABASE IF EXISTS `"+m.database+"`") })
		args := append([]string{"sink",
			"--kafka", p.env.Kafka, "--clickhouse", p.env.ClickHouse, "--topic-prefix", p.prefix,
			"--database", m.database, "--group", m.group, "--dlq-topic", m.dlq, "--metrics-addr", m.metrics,
			"--mismatch-mode", m.name}, p.layer2Flags()...)
		m.proc = killAtEnd(t, testenv.Start(t, "sink "+m.name, walhouseBin, args...))
	}
	chQuery := func(m *mode) string { return strings.Replace(tb.chQuery, "`"+p.database+"`", "`"+m.database+"`", 1) }

	p.change(tb, 0)
	for _, m := range modes {
		p.converge(tb.pgQuery, chQuery(m), capture, m.proc)
	}

	// Tamper with the insert of a row that was updated afterwards, so FINAL
	// still shows the update whichever copy of the insert is kept.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rs, err := p.topicRecords(ctx, tb.topic)
	if err != nil {
		t.Fatal(err)
	}
	var original *kgo.Record
	var eventID string
	for _, r := range changes(rs) {
		rows, err := p.decode(r)
		if err != nil {
			t.Fatal(err)
		}
		if rec := rows[0]; len(rows) == 1 && rec.Op == record.Insert && valueOf(rec, "id") == "3" {
			original, eventID = r, rec.EventID
			break
		}
	}
	if original == nil {
		t.Fatal("no insert of id 3 in the topic")
	}
	if err := p.kafka(kgo.RecordPartitioner(kgo.ManualPartitioner())).ProduceSync(ctx, p.tamper(original, "note", "tampered")).FirstErr(); err != nil {
		t.Fatalf("produce the tampered copy: %v", err)
	}

	for _, m := range modes {
		waitMetric(t, m.metrics, seriesMismatches, 1, m.proc)
	}
	errMode, warnMode := modes[0], modes[1]
	ls := p.waitDeadLetters(errMode.dlq, 1, errMode.proc)
	if l := ls[0]; l.Topic != tb.topic || l.Partition != original.Partition || !strings.Contains(l.Error, "eventId reused with a different payload") || !strings.Contains(l.Error, eventID) {
		t.Errorf("dead letter %+v: want the tampered copy of %s/%d@%d with reason eventId %s reused", l, tb.topic, original.Partition, original.Offset, eventID)
	}
	if n := metric(t, errMode.metrics, seriesDeadLetters); n != 1 {
		t.Errorf("mode error: %s is %v, want 1", seriesDeadLetters, n)
	}
	tampered := func(m *mode) int64 {
		return p.chInt(fmt.Sprintf("SELECT count() FROM `%s`.`%s` WHERE note = 'tampered'", m.database, tb.name))
	}
	if err := testenv.Eventually(context.Background(), 30*time.Second, func(context.Context) error {
		if n := tampered(warnMode); n != 1 {
			return fmt.Errorf("mode warn: %d tampered rows in ClickHouse, want 1", n)
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
	if n := tampered(errMode); n != 0 {
		t.Errorf("mode error: %d tampered rows in ClickHouse, want 0", n)
	}
	if ls, err := p.deadLetters(ctx, warnMode.dlq); err != nil || len(ls) != 0 {
		t.Errorf("mode warn: dead letters %+v (%v), want none", ls, err)
	}

	p.change(tb, 1)
	for _, m := range modes {
		p.converge(tb.pgQuery, chQuery(m), capture, m.proc)
	}
}

// A record dead-lettered for a cause an operator can fix is listed, and
// once the cause is fixed `walhouse dlq replay` loads it. The cause: a value
// of an unconstrained numeric column beyond Decimal(76, 38), the widest
// decimal; the fix: the operator turns the ClickHouse column into a String,
// which the sink accepts as wider. Layer 2 is on: a dead-lettered record
// must not look processed when it comes back.
func TestIntegrationSinkDeadLetterThenReplay(t *testing.T) {
	p, tb, capture := capturedSinkTable(t)
	dlq := testenv.Name("dlq")
	sink := p.layer2Sink("--dlq-topic", dlq)

	p.change(tb, 0)
	p.exec(fmt.Sprintf(`UPDATE %s SET reading = 12.5 WHERE tenant_id = 'acme' AND id = 2`, tb.quoted))
	p.converge(tb.pgQuery, tb.chQuery, capture, sink)

	const huge = "10000000000000000000000000000000000000000" // 1e40: 41 integer digits, Decimal(76, 38) has 38
	p.exec(fmt.Sprintf(`UPDATE %s SET reading = %s WHERE tenant_id = 'acme' AND id = 1`, tb.quoted, huge))
	ls := p.waitDeadLetters(dlq, 1, capture, sink)
	if l := ls[0]; l.Topic != tb.topic || !strings.Contains(string(l.Value), huge) || !strings.Contains(l.Error, "Decimal(76, 38) holds at most") {
		t.Errorf("dead letter %+v: want the update of reading to 1e40 from %s, as too many digits for the decimal", l, tb.topic)
	} else {
		t.Logf("dead-lettered with reason: %s", l.Error)
	}

	p.chExec(fmt.Sprintf("ALTER TABLE `%s`.`%s` MODIFY COLUMN reading Nullable(String)", p.database, tb.name), ch.Settings{"mutations_sync": 2})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := walhouse(ctx, "dlq", "replay", "--kafka", p.env.Kafka, "--topic-prefix", p.prefix, "--dlq-topic", dlq, "--replay-group", testenv.Name("replay")); err != nil {
		t.Fatal(err)
	}
	p.change(tb, 1)
	p.converge(tb.pgQuery, tb.chQuery, capture, sink)
}

// A record that can never be loaded, in a batch whose first insert (the
// rows of the table's shape before a column was added) already landed: the
// sink sets the record aside and loads the same batch again without it,
// under the same insert tokens, so ClickHouse drops the insert that landed
// as a repeat. With merges stopped, every version is stored exactly once
// (it used to be stored twice: the rest went again under new tokens).
func TestIntegrationSinkDeadLetterStoresEveryVersionOnce(t *testing.T) {
	p := newPipeline(t)
	tb := p.newSinkTable()
	// One partition: the rows before the new column and the bad one after
	// it are one batch.
	capture := p.runCapture(p.captureArgs([]string{tb.name}, "--partitions", "1"))
	dlq := testenv.Name("dlq")
	sink := p.sink("--dlq-topic", dlq)
	p.change(tb, 0)
	p.converge(tb.pgQuery, tb.chQuery, capture, sink)
	sink.Kill()
	table := fmt.Sprintf("`%s`.`%s`", p.database, tb.name)
	p.chExec("SYSTEM STOP MERGES "+table, nil)

	p.change(tb, 1)
	p.exec(fmt.Sprintf(`ALTER TABLE %s ADD COLUMN extra integer`, tb.quoted))
	const huge = "10000000000000000000000000000000000000000" // beyond Decimal(76, 38)
	p.exec(fmt.Sprintf(`UPDATE %s SET reading = %s, extra = 1 WHERE tenant_id = 'acme' AND id = 1`, tb.quoted, huge))
	p.exec(fmt.Sprintf(`UPDATE %s SET extra = 2 WHERE id BETWEEN 2 AND 5`, tb.quoted))
	sink = p.sink("--dlq-topic", dlq)
	p.waitDeadLetters(dlq, 1, capture, sink)
	// Every other row as PostgreSQL has it, each version stored once.
	others := "WHERE NOT (tenant_id = 'acme' AND id = 1)"
	p.converge(
		fmt.Sprintf("SELECT tenant_id, id::text, coalesce(extra::text, '<null>') FROM %s AS t %s ORDER BY t.tenant_id, t.id", tb.quoted, others),
		fmt.Sprintf("SELECT tenant_id, toString(id), ifNull(toString(extra), '<null>') FROM %s FINAL %s AND _is_deleted = 0 ORDER BY tenant_id, id", table, others),
		capture, sink)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	got, err := chRows(ctx, p.ch, fmt.Sprintf("SELECT toString(count()), toString(uniqExact(tenant_id, id, _version)) FROM %s", table), nil)
	if err != nil {
		t.Fatal(err)
	}
	if stored, distinct, _ := strings.Cut(strings.Join(got, ""), " | "); stored != distinct {
		t.Errorf("%s rows stored for %s distinct versions: a version is stored more than once", stored, distinct)
	} else {
		t.Logf("%s versions, each stored once", stored)
	}

	// The operator's fix (a mutation: merges must run), then the replay:
	// PostgreSQL and ClickHouse agree.
	p.chExec("SYSTEM START MERGES "+table, nil)
	p.chExec(fmt.Sprintf("ALTER TABLE %s MODIFY COLUMN reading Nullable(String)", table), ch.Settings{"mutations_sync": 2})
	if _, err := walhouse(ctx, "dlq", "replay", "--kafka", p.env.Kafka, "--topic-prefix", p.prefix, "--dlq-topic", dlq, "--replay-group", testenv.Name("replay")); err != nil {
		t.Fatal(err)
	}
	p.converge(tb.pgQuery, tb.chQuery, capture, sink)
}

// ClickHouse down for 30 seconds while PostgreSQL keeps changing: the sink
// waits with bounded memory and loses nothing.
func TestIntegrationSinkSurvivesClickHouseOutage(t *testing.T) {
	p, tb, capture := capturedSinkTable(t)
	sink := p.sink("--dedup-addr", "off")
	p.change(tb, 0)
	p.converge(tb.pgQuery, tb.chQuery, capture, sink)

	stopService(t, "clickhouse")
	var peak int64
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for r, end := 1, time.Now().Add(30*time.Second); time.Now().Before(end); r++ {
		p.change(tb, r)
		rss, err := sink.RSS()
		if err != nil {
			t.Fatal(err)
		}
		peak = max(peak, rss)
		<-tick.C
	}
	services(t, "start", "clickhouse")
	t.Logf("sink peak RSS while ClickHouse was down: %.1f MiB", float64(peak)/(1<<20))
	if peak > 500<<20 {
		t.Errorf("sink RSS reached %d KiB while ClickHouse was down", peak>>10)
	}
	p.converge(tb.pgQuery, tb.chQuery, capture, sink)
	p.noRowTwice(tb)
}

// valueOf returns the text of rec's column.
func valueOf(rec *record.Record, column string) string {
	for i, c := range rec.Columns {
		if c.Name == column {
			return rec.Values[i].Text
		}
	}
	return ""
}

// `walhouse sink` exits promptly on SIGTERM, leaving its consumer group
// (rebalances must be allowed again before the client closes, or closing
// waits for them forever and the next sink waits out the session timeout).
func TestIntegrationSinkStopsOnSIGTERM(t *testing.T) {
	p, tb, capture := capturedSinkTable(t)
	sink := p.sink("--dedup-addr", "off")
	p.change(tb, 0)
	p.converge(tb.pgQuery, tb.chQuery, capture, sink)

	if err := sink.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	_ = sink.Wait(10 * time.Second)
	if done, _ := sink.Exited(); !done {
		t.Errorf("the sink is still running 10 s after SIGTERM:\n%s", sink.Output())
	}
}
