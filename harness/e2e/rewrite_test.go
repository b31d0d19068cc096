package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/walhouse/walhouse/harness/testenv"
)

// rewriteSeries is the series of walhouse_capture_table_rewrites_total of
// a table.
func rewriteSeries(table string) string {
	return fmt.Sprintf(`walhouse_capture_table_rewrites_total{table=%q}`, "public."+table)
}

// rewriteTable is a table of the rewrite tests: its DDL, and the queries
// that compare it.
type rewriteTable struct {
	name, quoted     string
	pgQuery, chQuery string
}

// newRewriteTable creates a table with columns tenant_id, id, v int and
// the column d of type typ, filled with n rows whose d is value(i).
func (p *pipeline) newRewriteTable(prefix, typ string, n int, value string) rewriteTable {
	p.t.Helper()
	name, quoted := p.table(prefix, fmt.Sprintf(`(tenant_id text NOT NULL, id int NOT NULL, v int, d %s, PRIMARY KEY (tenant_id, id))`, typ))
	p.exec(fmt.Sprintf(`INSERT INTO %s SELECT 't' || (i %% 2), i, i, %s FROM generate_series(1, %d) i`, quoted, value, n))
	return rewriteTable{name: name, quoted: quoted,
		// d compared as text: numeric without trailing zeros, as
		// ClickHouse prints a Decimal.
		pgQuery: fmt.Sprintf(`SELECT tenant_id, id::text, coalesce(v::text, '<null>'),
			coalesce(CASE WHEN pg_typeof(d) = 'numeric'::regtype THEN trim_scale(d::text::numeric)::text ELSE d::text END, '<null>')
			FROM %s AS t ORDER BY t.tenant_id, t.id`, quoted),
		chQuery: fmt.Sprintf("SELECT tenant_id, toString(id), ifNull(toString(v), '<null>'), ifNull(toString(d), '<null>') FROM `%s`.`%s` FINAL WHERE _is_deleted = 0 ORDER BY tenant_id, id", p.database, name),
	}
}

// writeWhile keeps updating rows of tb (v, which every DDL here leaves
// alone) and inserting new ones, with d given as an untyped literal so
// that it is valid before and after a type change.
func (p *pipeline) writeWhile(tb rewriteTable, n int, d string) (stop func()) {
	return p.keepWriting(5*time.Millisecond, func(k int) string {
		if k%5 == 4 {
			return fmt.Sprintf(`INSERT INTO %s (tenant_id, id, v, d) VALUES ('t%d', %d, %d, '%s') ON CONFLICT DO NOTHING`, tb.quoted, k%2, 100000+k, k, d)
		}
		return fmt.Sprintf(`UPDATE %s SET v = v + 1 WHERE id = %d`, tb.quoted, 1+k%n)
	})
}

// TestIntegrationRewritesConverge: DDL that rewrites every row without a
// row change in the WAL, while changes stream, each on a table whose rows
// were all updated before (so a copy at version 0 would lose to them):
// ALTER COLUMN TYPE with USING (text '00007' becomes integer 7), ADD
// COLUMN with a volatile default (gen_random_uuid()), and a cast that is
// not binary-coercible (numeric(12,2) to numeric(10,0) rounds). Each ends
// in ClickHouse FINAL equal to PostgreSQL, value for value. A binary-
// coercible change (varchar(n) to text, a wider numeric) rewrites nothing
// and copies nothing, and still ends equal.
func TestIntegrationRewritesConverge(t *testing.T) {
	p := newPipeline(t)
	p.dropTopicsAtEnd()
	const n = 60
	using := p.newRewriteTable("rw_using", "text", n, `lpad(i::text, 5, '0')`)
	volatile := p.newRewriteTable("rw_volatile", "int", n, `i`)
	cast := p.newRewriteTable("rw_cast", "numeric(12,2)", n, `i + 0.25 + (i % 3) * 0.25`)
	coercible := p.newRewriteTable("rw_coercible", "varchar(20)", n, `'c' || i`)
	wider := p.newRewriteTable("rw_wider", "numeric(10,2)", n, `i + 0.25`)
	tables := []rewriteTable{using, volatile, cast, coercible, wider}
	names := make([]string, len(tables))
	for i, tb := range tables {
		names[i] = tb.name
	}
	metrics := testenv.FreeAddr(t)
	capture := p.runCapture(p.captureArgs(names, "--metrics-addr", metrics))
	sink := p.startSink()
	for _, tb := range tables {
		p.converge(tb.pgQuery, tb.chQuery, capture, sink)
		// Every row now has a streamed version, above a version-0 copy.
		p.exec(fmt.Sprintf(`UPDATE %s SET v = v + 1000`, tb.quoted))
	}

	stops := []func(){
		p.writeWhile(using, n, "00042"),
		p.writeWhile(volatile, n, "42"),
		p.writeWhile(cast, n, "4.75"),
		p.writeWhile(coercible, n, "c42"),
		p.writeWhile(wider, n, "4.25"),
	}
	p.exec(fmt.Sprintf(`ALTER TABLE %s ALTER COLUMN d TYPE integer USING d::integer`, using.quoted))
	p.exec(fmt.Sprintf(`ALTER TABLE %s ADD COLUMN u uuid DEFAULT gen_random_uuid()`, volatile.quoted))
	p.exec(fmt.Sprintf(`ALTER TABLE %s ALTER COLUMN d TYPE numeric(10,0)`, cast.quoted))
	p.exec(fmt.Sprintf(`ALTER TABLE %s ALTER COLUMN d TYPE text`, coercible.quoted))
	p.exec(fmt.Sprintf(`ALTER TABLE %s ALTER COLUMN d TYPE numeric(14,2)`, wider.quoted))
	for _, tb := range []rewriteTable{using, volatile, cast} {
		waitMetric(t, metrics, rewriteSeries(tb.name), 1, capture)
	}
	// Changes after the DDL, still streaming while the copies run.
	waitLog(t, capture, "copying it again", using.name)
	for _, stop := range stops {
		stop()
	}

	volatile.pgQuery = strings.Replace(volatile.pgQuery, "'<null>')\n", "'<null>'), coalesce(u::text, '<null>')\n", 1)
	volatile.chQuery = strings.Replace(volatile.chQuery, "'<null>') FROM", "'<null>'), ifNull(toString(u), '<null>') FROM", 1)
	for _, tb := range tables {
		p.converge(tb.pgQuery, tb.chQuery, capture, sink)
	}
	for _, tb := range []rewriteTable{coercible, wider} {
		if v := metric(t, metrics, rewriteSeries(tb.name)); v != 0 {
			t.Errorf("%s = %v: a binary-coercible type change rewrote nothing and must copy nothing", rewriteSeries(tb.name), v)
		}
	}
	for _, tb := range tables {
		if v := metric(t, metrics, inexactSeries(tb.name)); v != 0 {
			t.Errorf("%s = %v after a rewrite that was copied, want 0", inexactSeries(tb.name), v)
		}
	}
	requireRunning(t, capture, sink)
}

// TestIntegrationRewriteNotCopiedIsInexact: a rewritten table over
// --rewrite-copy-max-rows is not copied but marked inexact
// (walhouse_capture_tables_inexact, which WalhouseTableInexact alerts on),
// saved so that a restart keeps the mark, while a smaller one is copied and
// converges; with --rewrite-copy off a rewritten table is marked inexact
// too. The other tables go on streaming.
func TestIntegrationRewriteNotCopiedIsInexact(t *testing.T) {
	p := newPipeline(t)
	p.dropTopicsAtEnd()
	small := p.newRewriteTable("rw_small", "text", 10, `lpad(i::text, 5, '0')`)
	large := p.newRewriteTable("rw_large", "text", 40, `lpad(i::text, 5, '0')`)
	metrics := testenv.FreeAddr(t)
	args := func(extra ...string) []string {
		return p.captureArgs([]string{small.name, large.name}, append([]string{"--metrics-addr", metrics}, extra...)...)
	}
	capture := p.runCapture(args("--rewrite-copy-max-rows", "20"))
	sink := p.startSink()
	for _, tb := range []rewriteTable{small, large} {
		p.converge(tb.pgQuery, tb.chQuery, capture, sink)
		p.exec(fmt.Sprintf(`UPDATE %s SET v = v + 1000`, tb.quoted))
		p.exec(fmt.Sprintf(`ALTER TABLE %s ALTER COLUMN d TYPE integer USING d::integer`, tb.quoted))
	}
	waitMetric(t, metrics, inexactSeries(large.name), 1, capture)
	waitLog(t, capture, "not copied again", large.name, "--rewrite-copy-max-rows")
	p.converge(small.pgQuery, small.chQuery, capture, sink)
	if v := metric(t, metrics, inexactSeries(small.name)); v != 0 {
		t.Errorf("%s = %v for a rewrite that was copied, want 0", inexactSeries(small.name), v)
	}
	p.exec(fmt.Sprintf(`INSERT INTO %s VALUES ('t0', 1000, 1, '7')`, large.quoted))
	p.waitCount(fmt.Sprintf("SELECT count() FROM `%s`.`%s` FINAL WHERE _is_deleted = 0 AND id = 1000", p.database, large.name), 1, "inserted after the rewrite")

	capture.Stop()
	p.waitSlotReleased()
	metrics = testenv.FreeAddr(t)
	capture = p.runCapture(args("--rewrite-copy", "off"))
	if v := metric(t, metrics, inexactSeries(large.name)); v != 1 {
		t.Errorf("%s = %v after a restart, want 1: the mark is saved", inexactSeries(large.name), v)
	}
	p.exec(fmt.Sprintf(`ALTER TABLE %s ALTER COLUMN d TYPE bigint`, small.quoted))
	waitMetric(t, metrics, inexactSeries(small.name), 1, capture)
	waitLog(t, capture, "not copied again", small.name, "--rewrite-copy is off")
	p.exec(fmt.Sprintf(`INSERT INTO %s VALUES ('t0', 1000, 1, 7)`, small.quoted))
	p.waitCount(fmt.Sprintf("SELECT count() FROM `%s`.`%s` FINAL WHERE _is_deleted = 0 AND id = 1000", p.database, small.name), 1, "inserted after the rewrite")
	requireRunning(t, capture, sink)
}

// TestIntegrationRewriteWithoutTrigger: the same rewrites with the event
// triggers silent (session_replication_role = replica keeps event
// triggers from firing in that session only, as if capture were no
// superuser): capture sees them in the table's next Relation message and
// copies the table again, and ClickHouse FINAL ends equal to PostgreSQL.
func TestIntegrationRewriteWithoutTrigger(t *testing.T) {
	p := newPipeline(t)
	p.dropTopicsAtEnd()
	const n = 60
	using := p.newRewriteTable("rw_nt_using", "text", n, `lpad(i::text, 5, '0')`)
	volatile := p.newRewriteTable("rw_nt_volatile", "int", n, `i`)
	plain := p.newRewriteTable("rw_nt_plain", "varchar(20)", n, `'c' || i`)
	tables := []rewriteTable{using, volatile, plain}
	metrics := testenv.FreeAddr(t)
	capture := p.runCapture(p.captureArgs([]string{using.name, volatile.name, plain.name}, "--metrics-addr", metrics))
	sink := p.startSink()
	for _, tb := range tables {
		p.converge(tb.pgQuery, tb.chQuery, capture, sink)
		p.exec(fmt.Sprintf(`UPDATE %s SET v = v + 1000`, tb.quoted))
	}
	stops := []func(){p.writeWhile(using, n, "00042"), p.writeWhile(volatile, n, "42"), p.writeWhile(plain, n, "c42")}
	silently := func(ddl string) {
		p.exec("BEGIN; SET LOCAL session_replication_role = replica; " + ddl + "; COMMIT")
	}
	silently(fmt.Sprintf(`ALTER TABLE %s ALTER COLUMN d TYPE integer USING d::integer`, using.quoted))
	silently(fmt.Sprintf(`ALTER TABLE %s ADD COLUMN u uuid DEFAULT gen_random_uuid()`, volatile.quoted))
	silently(fmt.Sprintf(`ALTER TABLE %s ADD COLUMN w int`, plain.quoted))
	for _, tb := range []rewriteTable{using, volatile} {
		waitMetric(t, metrics, rewriteSeries(tb.name), 1, capture)
	}
	waitLog(t, capture, "no event trigger notice said so", using.name)
	for _, stop := range stops {
		stop()
	}
	volatile.pgQuery = strings.Replace(volatile.pgQuery, "'<null>')\n", "'<null>'), coalesce(u::text, '<null>')\n", 1)
	volatile.chQuery = strings.Replace(volatile.chQuery, "'<null>') FROM", "'<null>'), ifNull(toString(u), '<null>') FROM", 1)
	for _, tb := range tables {
		p.converge(tb.pgQuery, tb.chQuery, capture, sink)
	}
	if v := metric(t, metrics, rewriteSeries(plain.name)); v != 0 {
		t.Errorf("%s = %v: a column added without a default rewrote nothing and must copy nothing", rewriteSeries(plain.name), v)
	}
	requireRunning(t, capture, sink)
}
