package e2e

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walhouse/walhouse/harness/testenv"
	"github.com/walhouse/walhouse/record"
)

// TestIntegrationHostileInput mixes what a PostgreSQL user or a writer to
// the Kafka topics can do to walhouse with ordinary changes: rows without a
// tenant (copied and streamed), the empty tenant, rows over the record bound, forged heartbeats and DDL
// notices through pg_logical_emit_message, a record of one table on another
// table's topic and a heartbeat from the future. Capture and sink must go
// on, every ordinary row must equal PostgreSQL in ClickHouse FINAL, every
// bad row must be in the dead letters with its reason, and lastSyncAt must
// never claim the future.
func TestIntegrationHostileInput(t *testing.T) {
	p := newPipeline(t)
	// The tenant is not part of the key, so it may be NULL: REPLICA
	// IDENTITY FULL lets deletes carry it.
	table, qt := p.table("hostile", `(id bigint PRIMARY KEY, tenant_id text, note text)`)
	p.exec(fmt.Sprintf(`ALTER TABLE %s REPLICA IDENTITY FULL`, qt))
	other, qo := p.table("other", `(tenant_id text NOT NULL, id bigint NOT NULL, note text, PRIMARY KEY (tenant_id, id))`)
	// Copied by the initial snapshot: two ordinary rows, one without a
	// tenant, one whose tenant is the empty string.
	p.exec(fmt.Sprintf(`INSERT INTO %s VALUES (1, 'acme', 'copied'), (2, NULL, 'copied, no tenant'), (3, '', 'copied, empty tenant'), (4, 'globex', 'copied'), (5, 'acme', repeat('x', 1536 * 1024))`, qt))
	p.exec(fmt.Sprintf(`INSERT INTO %s VALUES ('acme', 1, 'other')`, qo))

	metricsAddr := testenv.FreeAddr(t)
	// A bound of 1 MiB makes rows of 1.5 MiB too large.
	capture := p.runCapture(p.captureArgs([]string{table, other}, "--metrics-addr", metricsAddr, "--max-record-bytes", "1048576"))
	sink := p.startSink("--max-record-bytes", "1048576")
	ctx := context.Background()

	// Streamed: ordinary changes around bad ones, in the same transactions.
	p.exec(fmt.Sprintf(`INSERT INTO %s SELECT g, CASE WHEN g %% 10 = 0 THEN NULL WHEN g %% 10 = 5 THEN '' ELSE 't' || (g %% 3) END, 'streamed ' || g FROM generate_series(10, 59) g`, qt))
	p.exec(fmt.Sprintf(`UPDATE %s SET tenant_id = NULL, note = 'tenant taken away' WHERE id = 11`, qt))
	p.exec(fmt.Sprintf(`UPDATE %s SET note = 'updated' WHERE id IN (1, 3, 12)`, qt))
	p.exec(fmt.Sprintf(`DELETE FROM %s WHERE id = 13`, qt))
	// Forged messages: any role may call pg_logical_emit_message with
	// walhouse's prefixes. Before walhouse signed its messages, the first
	// stopped capture for good and the second moved lastSyncAt a century on.
	var oid uint32
	if err := p.pg.QueryRow(ctx, "SELECT $1::regclass::oid", qt).Scan(&oid); err != nil {
		t.Fatal(err)
	}
	p.exec(`SELECT pg_logical_emit_message(false, 'walhouse_heartbeat', 'not a time')`)
	p.exec(`SELECT pg_logical_emit_message(false, 'walhouse_heartbeat', $1)`, fmt.Sprint(time.Now().AddDate(100, 0, 0).UnixMicro()))
	p.exec(`SELECT pg_logical_emit_message(true, 'walhouse_ddl', $1)`, fmt.Sprintf(`{"oid": %d, "columns": [[1, "id", null], [2, "tenant_id", null], [3, "hijacked", null]]}`, oid))
	p.exec(`SELECT pg_logical_emit_message(true, 'walhouse_ddl', 'not json')`)
	p.exec(fmt.Sprintf(`INSERT INTO %s VALUES (100, 'acme', 'after the forgeries'), (102, 't1', repeat('y', 1536 * 1024))`, qt))
	p.exec(fmt.Sprintf(`INSERT INTO %s VALUES ('globex', 2, 'other')`, qo))

	pgQuery := fmt.Sprintf(`SELECT id::text AS k, tenant_id, coalesce(note, '<null>') FROM %s AS t WHERE tenant_id IS NOT NULL AND length(note) < 1048576 ORDER BY t.id`, qt)
	chQuery := fmt.Sprintf("SELECT toString(id), assumeNotNull(tenant_id), ifNull(note, '<null>') FROM `%s`.`%s` FINAL WHERE _is_deleted = 0 AND tenant_id IS NOT NULL ORDER BY id", p.database, table)
	p.converge(pgQuery, chQuery, capture, sink)

	// Kafka side: a record of the other table and a heartbeat from the
	// future, both on this table's topic.
	topic, otherTopic := record.TopicName(p.prefix, "public", table), record.TopicName(p.prefix, "public", other)
	p.waitProduced(otherTopic, 2)
	rs, err := p.topicRecords(ctx, otherTopic)
	if err != nil {
		t.Fatal(err)
	}
	intruder := changes(rs)[0]
	cl := p.kafka()
	forged := []*kgo.Record{
		{Topic: topic, Key: intruder.Key, Value: intruder.Value, Headers: intruder.Headers},
		{Topic: topic, Headers: []kgo.RecordHeader{
			{Key: record.HeaderHeartbeat, Value: []byte(time.Now().AddDate(100, 0, 0).Format(time.RFC3339Nano))},
			{Key: record.HeaderLSN, Value: []byte("FFFF/0")},
			{Key: record.HeaderTable, Value: []byte("public." + table)},
		}},
	}
	if err := cl.ProduceSync(ctx, forged...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	p.exec(fmt.Sprintf(`INSERT INTO %s VALUES (101, 'acme', 'after the forged records')`, qt))
	p.converge(pgQuery, chQuery, capture, sink)

	// Dead letters: every row without a tenant (2 copied, 5 streamed
	// inserts, 1 update), from capture; the two forged records, from the
	// sink.
	var noTenant []string
	for _, id := range []int{2, 10, 20, 30, 40, 50, 11} {
		noTenant = append(noTenant, fmt.Sprintf(`{"id":"%d"}`, id))
	}
	sort.Strings(noTenant)
	tooLarge := []string{`{"id":"102"}`, `{"id":"5"}`}
	ls := p.waitDeadLetters(p.prefix+"-dlq", len(noTenant)+len(tooLarge)+2, capture, sink)
	var gotKeys, gotLarge []string
	var sinkSide int
	for _, l := range ls {
		switch {
		case l.Origin == "capture" && l.Reason == record.ReasonTooLarge:
			if l.Table != "public."+table || l.Topic != topic || string(l.Value) != "null" || !strings.Contains(l.Error, "--max-record-bytes") {
				t.Errorf("capture's dead letter %+v: want table, topic, no value and the flag to raise", l)
			}
			gotLarge = append(gotLarge, string(l.PrimaryKey))
		case l.Origin == "capture":
			if l.Reason != record.ReasonNoTenant || l.Table != "public."+table || l.Topic != topic || l.CommitLSN == "" || !strings.Contains(l.Error, "NULL") {
				t.Errorf("capture's dead letter %+v: want reason %s, table, topic, commit LSN and the cause", l, record.ReasonNoTenant)
			}
			gotKeys = append(gotKeys, string(l.PrimaryKey))
		case l.Origin == "sink":
			sinkSide++
			if l.Topic != topic || !strings.Contains(l.Error, "topic") && !strings.Contains(l.Error, "heartbeat") {
				t.Errorf("sink's dead letter %+v: want the forged record's topic and why", l)
			}
		default:
			t.Errorf("dead letter of unknown origin: %+v", l)
		}
	}
	sort.Strings(gotKeys)
	sort.Strings(gotLarge)
	if fmt.Sprint(gotKeys) != fmt.Sprint(noTenant) || fmt.Sprint(gotLarge) != fmt.Sprint(tooLarge) || sinkSide != 2 {
		t.Errorf("dead letters: capture's without a tenant %v (want %v), too large %v (want %v), %d of the sink's (want 2)", gotKeys, noTenant, gotLarge, tooLarge, sinkSide)
	}
	if v := metric(t, metricsAddr, fmt.Sprintf(`walhouse_capture_dead_letters_total{reason="%s",table="public.%s"}`, record.ReasonNoTenant, table)); v != float64(len(noTenant)) {
		t.Errorf("walhouse_capture_dead_letters_total = %v, want %d", v, len(noTenant))
	}
	// PostgreSQL 13's pgoutput streams no logical messages: the forgeries
	// never reach capture there.
	ignored := 2.0
	if p.serverMajor() < 14 {
		ignored = 0
	}
	for series, want := range map[string]float64{
		`walhouse_capture_ignored_messages_total{prefix="walhouse_heartbeat",reason="unauthenticated"}`: ignored,
		`walhouse_capture_ignored_messages_total{prefix="walhouse_ddl",reason="unauthenticated"}`:       ignored,
	} {
		if v := metric(t, metricsAddr, series); v != want {
			t.Errorf("%s = %v, want %v", series, v, want)
		}
	}
	// Freshness never claims the future, and real heartbeats still count.
	var newest time.Time
	err = testenv.Eventually(ctx, 30*time.Second, func(ctx context.Context) error {
		rows, err := chRows(ctx, p.ch, fmt.Sprintf("SELECT toString(toDateTime64(max(loaded_through), 6, 'UTC')) FROM `%s`.`_walhouse_sync` FINAL WHERE source_table = '%s'", p.database, table), nil)
		if err != nil || len(rows) != 1 {
			return fmt.Errorf("read _walhouse_sync: %v %v", rows, err)
		}
		newest, err = time.Parse("2006-01-02 15:04:05.999999999", rows[0])
		if err != nil {
			return err
		}
		if time.Since(newest) > 20*time.Second {
			return fmt.Errorf("loaded_through %v is not recent yet", newest)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if newest.After(time.Now().Add(time.Minute)) {
		t.Errorf("loaded_through %v is in the future", newest)
	}
	requireRunning(t, capture, sink)
}
