package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walhouse/walhouse/harness/testenv"
	"github.com/walhouse/walhouse/record"
	"github.com/walhouse/walhouse/schema"
)

// refusedSeries is the series of walhouse_capture_tables_refused for a
// table left out for reason.
func refusedSeries(table, reason string) string {
	return fmt.Sprintf(`walhouse_capture_tables_refused{reason=%q,table=%q}`, reason, "public."+table)
}

// refusedChangesSeries is the series of walhouse_capture_refused_changes_total
// of a table.
func refusedChangesSeries(table string) string {
	return fmt.Sprintf(`walhouse_capture_refused_changes_total{table=%q}`, "public."+table)
}

// captureStatus reads capture's /status document from addr.
func captureStatus(t *testing.T, addr string) record.CaptureStatus {
	t.Helper()
	var st record.CaptureStatus
	err := testenv.Eventually(context.Background(), 20*time.Second, func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/status", nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		return json.NewDecoder(resp.Body).Decode(&st)
	})
	if err != nil {
		t.Fatalf("read capture's status from %s: %v", addr, err)
	}
	return st
}

// refusedIn returns the reasons /status gives for leaving table out.
func refusedIn(st record.CaptureStatus, table string) []string {
	for _, r := range st.RefusedTables {
		if r.Table == "public."+table {
			return r.Reasons
		}
	}
	return nil
}

// threeColumns returns the queries that compare a table (tenant_id, id, v)
// named name (quoted for PostgreSQL) in PostgreSQL and ClickHouse FINAL.
func (p *pipeline) threeColumns(name, quoted string) (pgQuery, chQuery string) {
	return fmt.Sprintf(`SELECT tenant_id, id::text, v::text FROM %s AS t ORDER BY 1, t.id`, quoted),
		fmt.Sprintf("SELECT tenant_id, toString(id), toString(v) FROM `%s`.`%s` FINAL WHERE _is_deleted = 0 ORDER BY tenant_id, id", p.database, name)
}

// sideTable is a table (tenant_id, id, v) captured next to the usual sink
// table, for the tests of tables left out.
type sideTable struct {
	name, quoted     string
	pgQuery, chQuery string // threeColumns
}

// leftOutSetup starts what most tests of a table left out begin with: the
// usual sink table and a side table named name holding rows 1..rows, both
// captured (capture's metrics at the address returned, then extra flags)
// and the side table loaded.
func (p *pipeline) leftOutSetup(name string, rows int, extra ...string) (tb sinkTable, side sideTable, metrics string, capture, sink *testenv.Proc) {
	p.t.Helper()
	p.dropTopicsAtEnd()
	tb = p.newSinkTable()
	side.name, side.quoted = p.table(name, `(tenant_id text, id int, v int, PRIMARY KEY (tenant_id, id))`)
	side.pgQuery, side.chQuery = p.threeColumns(side.name, side.quoted)
	metrics = testenv.FreeAddr(p.t)
	capture = p.runCapture(p.captureArgs([]string{tb.name, side.name}, append([]string{"--metrics-addr", metrics}, extra...)...))
	sink = p.startSink()
	p.exec(fmt.Sprintf(`INSERT INTO %s SELECT 't', i, i FROM generate_series(1, %d) i`, side.quoted, rows))
	p.converge(side.pgQuery, side.chQuery, capture, sink)
	return tb, side, metrics, capture, sink
}

// recoverExact runs the recovery that makes a side table left out exact
// again (docs/limits.md): capture and the sink stopped, its
// ClickHouse table dropped, capture started with --resnapshot of it. It
// returns the new capture and sink once ClickHouse equals PostgreSQL and
// walhouse_capture_tables_inexact no longer names the table.
func (p *pipeline) recoverExact(tb sinkTable, side sideTable, capture, sink *testenv.Proc) (*testenv.Proc, *testenv.Proc) {
	p.t.Helper()
	capture.Stop()
	sink.Stop()
	p.chExec(fmt.Sprintf("DROP TABLE `%s`.`%s`", p.database, side.name), nil)
	metrics := testenv.FreeAddr(p.t)
	capture = killAtEnd(p.t, p.runCapture(p.captureArgs([]string{tb.name, side.name}, "--metrics-addr", metrics, "--resnapshot", "public."+side.name)))
	sink = killAtEnd(p.t, p.startSink())
	p.converge(side.pgQuery, side.chQuery, capture, sink)
	if v, ok := scrapeUntil(metrics, inexactSeries(side.name), 20*time.Second, func(v float64) bool { return v == 0 }); !ok {
		p.t.Errorf("%s = %v after the --resnapshot, want it gone", inexactSeries(side.name), v)
	}
	return capture, sink
}

// waitCount waits until ClickHouse's count query q answers n; what says
// what the rows are.
func (p *pipeline) waitCount(q string, n int64, what string) {
	p.t.Helper()
	if err := testenv.Eventually(context.Background(), 60*time.Second, func(context.Context) error {
		if got := p.chInt(q); got != n {
			return fmt.Errorf("%d of the %d rows %s are in ClickHouse", got, n, what)
		}
		return nil
	}); err != nil {
		p.t.Fatal(err)
	}
}

// TestIntegrationUncapturableTablesSurviveRestart: while capture streams,
// a table without a primary key joins the publication, a captured table
// loses its primary key and another gets REPLICA IDENTITY NOTHING. Each is
// left out, capture goes on (it used to stop at the first change after
// the DROP CONSTRAINT), and — what used to wedge it, pinning WAL — capture
// killed with SIGKILL starts again with all three still uncapturable. The
// captured table's ClickHouse rows equal PostgreSQL's exactly throughout;
// the table that lost its key keeps exactly the rows it had when it was
// left out; metrics and /status name the tables and why.
func TestIntegrationUncapturableTablesSurviveRestart(t *testing.T) {
	p := newPipeline(t)
	p.dropTopicsAtEnd()
	tb := p.newSinkTable()
	losing, ql := p.table("losekey", `(tenant_id text, id int, v int, CONSTRAINT losekey_pk PRIMARY KEY (tenant_id, id))`)
	nokey, qn := p.table("nokey", `(tenant_id text, v int)`)
	nothing, qi := p.table("nothing", `(tenant_id text, id int, v int, PRIMARY KEY (tenant_id, id))`)
	captured := []string{tb.name, losing, nothing}
	metrics := testenv.FreeAddr(t)
	capture := p.runCapture(p.captureArgs(captured, "--metrics-addr", metrics))
	sink := p.startSink()
	for r := range 2 {
		p.change(tb, r)
	}
	p.exec(fmt.Sprintf(`INSERT INTO %s SELECT 't', i, i FROM generate_series(1, 50) i`, ql))
	losingPG, losingCH := p.threeColumns(losing, ql)
	p.converge(losingPG, losingCH, capture, sink)
	before := p.pgNow(losingPG)

	// What a PostgreSQL user may write: neither may stop capture.
	p.exec(fmt.Sprintf(`ALTER PUBLICATION %s ADD TABLE %s`, pgx.Identifier{p.pub}.Sanitize(), qn))
	p.exec(fmt.Sprintf(`INSERT INTO %s VALUES ('t', 1)`, qn))
	p.exec(fmt.Sprintf(`ALTER TABLE %s DROP CONSTRAINT losekey_pk`, ql))
	p.exec(fmt.Sprintf(`INSERT INTO %s SELECT 't', i, i FROM generate_series(51, 60) i`, ql))
	p.exec(fmt.Sprintf(`ALTER TABLE %s REPLICA IDENTITY NOTHING`, qi))
	p.exec(fmt.Sprintf(`INSERT INTO %s VALUES ('t', 1, 1)`, qi))
	waitMetric(t, metrics, refusedSeries(nothing, "replica_identity"), 1, capture)
	waitMetric(t, metrics, refusedSeries(nokey, "no_primary_key"), 1, capture)
	waitMetric(t, metrics, refusedSeries(losing, "no_primary_key"), 1, capture)
	waitMetric(t, metrics, refusedChangesSeries(losing), 1, capture)
	p.change(tb, 2)
	p.converge(tb.pgQuery, tb.chQuery, capture, sink)

	capture.Kill()
	p.waitSlotReleased()
	metrics = testenv.FreeAddr(t)
	capture = p.runCapture(p.captureArgs(captured, "--metrics-addr", metrics))
	waitLog(t, capture, "left out", nokey)
	p.exec(fmt.Sprintf(`INSERT INTO %s SELECT 't', i, i FROM generate_series(61, 70) i`, ql))
	p.exec(fmt.Sprintf(`INSERT INTO %s VALUES ('t', 2), ('t', 3)`, qn))
	for r := 3; r < 5; r++ {
		p.change(tb, r)
	}
	p.converge(tb.pgQuery, tb.chQuery, capture, sink)
	p.requireCH(losingCH, before, "the rows PostgreSQL had when the table lost its key")
	for _, table := range []string{nokey, losing} {
		if v := metric(t, metrics, refusedSeries(table, "no_primary_key")); v != 1 {
			t.Errorf("after the restart %s = %v, want 1", refusedSeries(table, "no_primary_key"), v)
		}
	}
	waitMetric(t, metrics, refusedChangesSeries(nokey), 2, capture)
	waitMetric(t, metrics, refusedChangesSeries(losing), 10, capture)
	if v := metric(t, metrics, refusedSeries(nothing, "replica_identity")); v != 1 {
		t.Errorf("after the restart %s = %v, want 1", refusedSeries(nothing, "replica_identity"), v)
	}
	st := captureStatus(t, metrics)
	for _, table := range []string{nokey, losing} {
		if reasons := refusedIn(st, table); !slices.Contains(reasons, "no_primary_key") {
			t.Errorf("/status gives %q as why %s is left out, want no_primary_key: %+v", reasons, table, st.RefusedTables)
		}
	}
	if reasons := refusedIn(st, tb.name); reasons != nil {
		t.Errorf("/status says the captured table %s is left out: %q", tb.name, reasons)
	}
	requireRunning(t, capture, sink)
}

// TestIntegrationRowFilterChangedWhileStreaming (PostgreSQL 15+): a
// captured table is given a row filter while capture streams (ALTER
// PUBLICATION ... SET TABLE ... WHERE), and rows are deleted outside it
// and changed inside it at once. PostgreSQL gives the table a new entry in
// the publication, which capture sees at its next poll; as for a table
// dropped from the publication and added again (README: copied again or
// marked inexact, never silently), it copies the table again, now through
// the filter, and says with walhouse_capture_tables_inexact and a warning
// naming the recovery that ClickHouse may hold rows the copy cannot fix
// (the rows deleted outside the filter). The table is never left out and
// the rows the filter keeps stay exact; the recovery makes ClickHouse
// equal to PostgreSQL through the filter.
func TestIntegrationRowFilterChangedWhileStreaming(t *testing.T) {
	p := newPipeline(t)
	testenv.SkipBeforePG(t, p.pg, 15, "publication row filters")
	tb, side, metrics, capture, sink := p.leftOutSetup("filtered", 40)
	p.change(tb, 0)

	pub := pgx.Identifier{p.pub}.Sanitize()
	p.exec(fmt.Sprintf(`ALTER PUBLICATION %s SET TABLE %s, %s WHERE (id > 20)`, pub, tb.quoted, side.quoted))
	p.exec(fmt.Sprintf(`INSERT INTO %s SELECT 't', i, i FROM generate_series(41, 60) i`, side.quoted))
	p.exec(fmt.Sprintf(`DELETE FROM %s WHERE id <= 5`, side.quoted))
	p.exec(fmt.Sprintf(`UPDATE %s SET v = v + 1000 WHERE id > 30`, side.quoted))
	waitMetric(t, metrics, inexactSeries(side.name), 1, capture)
	waitLog(t, capture, "added again since the last look", side.name, "--resnapshot")
	for r := 1; r < 3; r++ {
		p.change(tb, r)
	}
	p.converge(tb.pgQuery, tb.chQuery, capture, sink)
	filtered := side
	filtered.pgQuery = fmt.Sprintf(`SELECT tenant_id, id::text, v::text FROM %s AS t WHERE t.id > 20 ORDER BY 1, t.id`, side.quoted)
	kept := fmt.Sprintf("SELECT tenant_id, toString(id), toString(v) FROM `%s`.`%s` FINAL WHERE _is_deleted = 0 AND id > 20 ORDER BY tenant_id, id", p.database, side.name)
	p.converge(filtered.pgQuery, kept, capture, sink)
	// The rows deleted outside the filter are still in ClickHouse: what
	// the inexact mark says.
	p.waitCount(fmt.Sprintf("SELECT count() FROM `%s`.`%s` FINAL WHERE _is_deleted = 0 AND id <= 20", p.database, side.name), 20, "the filter hides")
	if reasons := refusedIn(captureStatus(t, metrics), side.name); reasons != nil {
		t.Errorf("/status says %s is left out for %q: a row filter is honoured", side.name, reasons)
	}

	capture, sink = p.recoverExact(tb, filtered, capture, sink)
	p.exec(fmt.Sprintf(`UPDATE %s SET v = -v WHERE id BETWEEN 15 AND 25`, side.quoted))
	p.converge(filtered.pgQuery, filtered.chQuery, capture, sink)
	p.change(tb, 3)
	p.converge(tb.pgQuery, tb.chQuery, capture, sink)
}

// TestIntegrationColumnListWithoutTenantWhileStreaming (PostgreSQL 15+): a
// captured table is published again with a column list that leaves out
// its tenant column, and rows are written to it at once, right after a
// poll of the publication (the next is 10 s away). Its next Relation
// message already names fewer columns, so capture leaves the table out
// there (column_list, with the fix), before any row of the new shape: the
// table's ClickHouse rows stay exactly those it had, and the other table
// goes on.
func TestIntegrationColumnListWithoutTenantWhileStreaming(t *testing.T) {
	p := newPipeline(t)
	testenv.SkipBeforePG(t, p.pg, 15, "publication column lists")
	marker, qm := p.table("marker", `(tenant_id text, id int, PRIMARY KEY (tenant_id, id))`)
	tb, side, metrics, capture, sink := p.leftOutSetup("collist", 10, "--heartbeat-interval", "10s")
	before := p.pgNow(side.pgQuery)

	// A table that joins without a change is found by a poll only.
	pub := pgx.Identifier{p.pub}.Sanitize()
	p.exec(fmt.Sprintf(`ALTER PUBLICATION %s ADD TABLE %s`, pub, qm))
	waitLog(t, capture, "table joined the stream", marker)
	p.exec(fmt.Sprintf(`BEGIN; ALTER PUBLICATION %s DROP TABLE %s; ALTER PUBLICATION %s ADD TABLE %s (id, v); COMMIT`, pub, side.quoted, pub, side.quoted))
	p.exec(fmt.Sprintf(`INSERT INTO %s SELECT 't', i, i FROM generate_series(11, 20) i`, side.quoted))
	waitMetric(t, metrics, refusedSeries(side.name, "column_list"), 1, capture)
	waitMetric(t, metrics, refusedChangesSeries(side.name), 10, capture)
	waitLog(t, capture, "leaves out its tenant column tenant_id", side.name)
	p.change(tb, 0)
	p.converge(tb.pgQuery, tb.chQuery, capture, sink)
	p.requireCH(side.chQuery, before, "the rows it had when the column list was added")
	requireRunning(t, capture, sink)
}

// TestIntegrationColumnListChangedWhileStreaming (PostgreSQL 15+): a
// captured table's column list is narrowed while capture streams (ALTER
// PUBLICATION ... SET TABLE t (cols)), leaving out v. The stream sends
// rows without v from the table's next Relation message on; ClickHouse
// keeps the column with its history, as for a dropped column, and the
// table's new entry in the publication makes capture copy it again and
// mark it inexact (never silently). The recovery the log names rebuilds
// it with exactly the published columns, equal to PostgreSQL through the
// list.
func TestIntegrationColumnListChangedWhileStreaming(t *testing.T) {
	p := newPipeline(t)
	testenv.SkipBeforePG(t, p.pg, 15, "publication column lists")
	tb, side, metrics, capture, sink := p.leftOutSetup("narrowed", 10)

	pub := pgx.Identifier{p.pub}.Sanitize()
	p.exec(fmt.Sprintf(`ALTER PUBLICATION %s SET TABLE %s, %s (tenant_id, id)`, pub, tb.quoted, side.quoted))
	p.exec(fmt.Sprintf(`INSERT INTO %s SELECT 't', i, i FROM generate_series(11, 20) i`, side.quoted))
	p.exec(fmt.Sprintf(`UPDATE %s SET v = -v WHERE id <= 5`, side.quoted))
	p.exec(fmt.Sprintf(`DELETE FROM %s WHERE id = 10`, side.quoted))
	waitMetric(t, metrics, inexactSeries(side.name), 1, capture)
	listed := side
	listed.pgQuery = fmt.Sprintf(`SELECT tenant_id, id::text FROM %s AS t ORDER BY 1, t.id`, side.quoted)
	listed.chQuery = fmt.Sprintf("SELECT tenant_id, toString(id) FROM `%s`.`%s` FINAL WHERE _is_deleted = 0 ORDER BY tenant_id, id", p.database, side.name)
	p.converge(listed.pgQuery, listed.chQuery, capture, sink)
	if reasons := refusedIn(captureStatus(t, metrics), side.name); reasons != nil {
		t.Errorf("/status says %s is left out for %q: its column list keeps its key and tenant", side.name, reasons)
	}

	capture, sink = p.recoverExact(tb, listed, capture, sink)
	var n uint64
	q := fmt.Sprintf("SELECT count() FROM system.columns WHERE database = %s AND table = %s AND name = 'v'", schema.QuoteString(p.database), schema.QuoteString(side.name))
	if err := p.ch.QueryRow(context.Background(), q).Scan(&n); err != nil || n != 0 {
		t.Errorf("ClickHouse table %s rebuilt after the recovery has %d columns v (%v); want none: the list leaves it out", side.name, n, err)
	}
	p.change(tb, 0)
	p.converge(tb.pgQuery, tb.chQuery, capture, sink)
}
