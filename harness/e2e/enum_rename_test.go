package e2e

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walhouse/walhouse/harness/testenv"
)

// TestIntegrationEnumRenameConverges: ALTER TYPE ... RENAME VALUE on an
// enum that walhouse stores as text (no layout), held by a table in a
// column of the enum, an array of it and a domain over it, changes what
// every stored 'sad' reads as in PostgreSQL without a row change. With the
// event trigger, capture copies the table again and ClickHouse FINAL ends
// equal to PostgreSQL, value for value, also for the two rows that race
// with the rename, which locks the type and not the table: one written by a
// transaction open across the rename's commit (the copy must wait for it),
// one written between the rename and its commit (which decoding may read
// with the old label, after the rename's notice: the copy must be above
// it). ADD VALUE, OWNER TO and a captured table without the enum copy
// nothing.
func TestIntegrationEnumRenameConverges(t *testing.T) {
	p := newPipeline(t)
	p.dropTopicsAtEnd()
	ctx := context.Background()
	mood, dmood := testenv.Name("mood"), testenv.Name("dmood")
	qmood, qdmood := pgx.Identifier{mood}.Sanitize(), pgx.Identifier{dmood}.Sanitize()
	p.exec(fmt.Sprintf(`CREATE TYPE %s AS ENUM ('sad', 'ok', 'glad')`, qmood))
	t.Cleanup(func() { _, _ = p.pg.Exec(ctx, "DROP TYPE IF EXISTS "+qmood+" CASCADE") })
	p.exec(fmt.Sprintf(`CREATE DOMAIN %s AS %s`, qdmood, qmood))
	const n = 60
	table, qt := p.table("enum_rn", fmt.Sprintf(`(tenant_id text NOT NULL, id int NOT NULL, v int, m %s, ms %s[], dm %s, PRIMARY KEY (tenant_id, id))`, qmood, qmood, qdmood))
	p.exec(fmt.Sprintf(`INSERT INTO %[1]s SELECT 't' || (i %% 2), i, i, l, ARRAY[l, 'ok'::%[2]s], l::text::%[3]s
		FROM (SELECT i, (ARRAY['sad', 'ok', 'glad'])[i %% 3 + 1]::%[2]s AS l FROM generate_series(1, %[4]d) i) s`, qt, qmood, qdmood, n))
	other := p.newRewriteTable("enum_rn_other", "text", 10, `'x' || i`)

	pgQuery := fmt.Sprintf(`SELECT tenant_id, id::text, coalesce(v::text, '<null>'), coalesce(m::text, '<null>'),
		coalesce(array_to_string(ms, ','), '<null>'), coalesce(dm::text, '<null>') FROM %s AS t ORDER BY t.tenant_id, t.id`, qt)
	chQuery := fmt.Sprintf("SELECT tenant_id, toString(id), ifNull(toString(v), '<null>'), ifNull(toString(m), '<null>'), "+
		"arrayStringConcat(ms, ','), ifNull(toString(dm), '<null>') FROM `%s`.`%s` FINAL WHERE _is_deleted = 0 ORDER BY tenant_id, id", p.database, table)

	metrics := testenv.FreeAddr(t)
	capture := p.runCapture(p.captureArgs([]string{table, other.name}, "--metrics-addr", metrics))
	sink := p.startSink()
	p.converge(pgQuery, chQuery, capture, sink)
	p.converge(other.pgQuery, other.chQuery, capture, sink)
	// Every row now has a streamed version, above a version-0 copy.
	p.exec(fmt.Sprintf(`UPDATE %s SET v = v + 1000`, qt))
	// Forms of ALTER TYPE that rename no label copy nothing.
	p.exec(fmt.Sprintf(`ALTER TYPE %s ADD VALUE 'meh'`, qmood))
	p.exec(fmt.Sprintf(`ALTER TYPE %s OWNER TO CURRENT_USER`, qmood))
	stop := p.keepWriting(5*time.Millisecond, func(k int) string {
		if k%5 == 4 {
			return fmt.Sprintf(`INSERT INTO %s VALUES ('t%d', %d, %d, 'ok', '{ok,glad}', 'glad') ON CONFLICT DO NOTHING`, qt, k%2, 100000+k, k)
		}
		return fmt.Sprintf(`UPDATE %s SET v = v + 1 WHERE id = %d`, qt, 1+k%n)
	})

	connect := func() *pgx.Conn {
		conn, err := pgx.Connect(ctx, p.env.PG)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close(ctx) })
		return conn
	}
	// A writer open across the rename's commit, and the rename itself in a
	// transaction, so that a row can be written between its notice and its
	// commit.
	open, ddl := connect(), connect()
	openTx, err := open.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := openTx.Exec(ctx, fmt.Sprintf(`INSERT INTO %s VALUES ('t0', 900, 900, 'sad', '{sad}', 'sad')`, qt)); err != nil {
		t.Fatal(err)
	}
	ddlTx, err := ddl.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ddlTx.Exec(ctx, fmt.Sprintf(`ALTER TYPE %s RENAME VALUE 'sad' TO 'blue'`, qmood)); err != nil {
		t.Fatal(err)
	}
	p.exec(fmt.Sprintf(`INSERT INTO %s VALUES ('t1', 901, 901, 'sad', '{sad,ok}', 'sad')`, qt))
	if err := ddlTx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	waitMetric(t, metrics, rewriteSeries(table), 1, capture)
	waitLog(t, capture, "RENAME VALUE", "copying it again", table)
	if _, err := openTx.Exec(ctx, fmt.Sprintf(`UPDATE %s SET v = v + 1 WHERE id = 1`, qt)); err != nil {
		t.Fatal(err)
	}
	if err := openTx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// Changes after the rename, with the new label and the old rows.
	p.exec(fmt.Sprintf(`UPDATE %s SET m = 'blue', ms = ms || 'blue'::%s WHERE id %% 7 = 0`, qt, qmood))
	p.exec(fmt.Sprintf(`INSERT INTO %s VALUES ('t0', 902, 902, 'blue', '{blue,glad}', 'blue')`, qt))
	p.exec(fmt.Sprintf(`DELETE FROM %s WHERE id = 2`, qt))
	stop()

	p.converge(pgQuery, chQuery, capture, sink)
	p.converge(other.pgQuery, other.chQuery, capture, sink)
	if v := metric(t, metrics, rewriteSeries(other.name)); v != 0 {
		t.Errorf("%s = %v: a table without the enum must not be copied", rewriteSeries(other.name), v)
	}
	if v := metric(t, metrics, rewriteSeries(table)); v != 1 {
		t.Errorf("%s = %v, want 1: the rename alone copies the table", rewriteSeries(table), v)
	}
	for _, name := range []string{table, other.name} {
		if v := metric(t, metrics, inexactSeries(name)); v != 0 {
			t.Errorf("%s = %v after a rename that was copied, want 0", inexactSeries(name), v)
		}
	}
	requireRunning(t, capture, sink)
}

// TestIntegrationEnumRenameWithoutTriggerIsInexact: capture as a role that
// is no superuser gets no event trigger notice (it cannot read the key
// that signs them), so a RENAME VALUE is not copied; capture notices it at
// the first change with the new label (a label of the enum is gone) and
// marks every captured table with a column or an array of the enum
// inexact (walhouse_capture_tables_inexact, alert WalhouseTableInexact),
// naming the fix, while the stream goes on. A captured table without the
// enum is not marked.
func TestIntegrationEnumRenameWithoutTriggerIsInexact(t *testing.T) {
	p := newPipeline(t)
	p.dropTopicsAtEnd()
	ctx := context.Background()
	mood := testenv.Name("mood")
	qmood := pgx.Identifier{mood}.Sanitize()
	p.exec(fmt.Sprintf(`CREATE TYPE %s AS ENUM ('sad', 'ok', 'glad')`, qmood))
	t.Cleanup(func() { _, _ = p.pg.Exec(ctx, "DROP TYPE IF EXISTS "+qmood+" CASCADE") })
	direct, qd := p.table("enum_nt", fmt.Sprintf(`(tenant_id text NOT NULL, id int NOT NULL, m %s, PRIMARY KEY (tenant_id, id))`, qmood))
	array, qa := p.table("enum_nt_arr", fmt.Sprintf(`(tenant_id text NOT NULL, id int NOT NULL, ms %s[], PRIMARY KEY (tenant_id, id))`, qmood))
	other := p.newRewriteTable("enum_nt_other", "text", 10, `'x' || i`)
	p.exec(fmt.Sprintf(`INSERT INTO %s SELECT 't' || (i %% 2), i, (ARRAY['sad', 'ok', 'glad'])[i %% 3 + 1]::%s FROM generate_series(1, 30) i`, qd, qmood))
	p.exec(fmt.Sprintf(`INSERT INTO %s SELECT 't' || (i %% 2), i, ARRAY['ok', (ARRAY['sad', 'ok', 'glad'])[i %% 3 + 1]]::%s[] FROM generate_series(1, 30) i`, qa, qmood))

	// A replication role that owns nothing, reading the tables through a
	// publication made for it.
	role, password := testenv.Name("capture_role"), testenv.Name("pw")
	qrole := pgx.Identifier{role}.Sanitize()
	p.exec(fmt.Sprintf(`CREATE ROLE %s LOGIN REPLICATION PASSWORD '%s'`, qrole, password))
	t.Cleanup(func() {
		_, _ = p.pg.Exec(ctx, "DROP OWNED BY "+qrole)
		_, _ = p.pg.Exec(ctx, "DROP ROLE IF EXISTS "+qrole)
	})
	tables := []string{direct, array, other.name}
	p.exec(fmt.Sprintf(`GRANT SELECT ON %s, %s, %s TO %s`, qd, qa, other.quoted, qrole))
	p.exec(fmt.Sprintf(`CREATE PUBLICATION %s FOR TABLE %s, %s, %s WITH (publish_via_partition_root = true)`, pgx.Identifier{p.pub}.Sanitize(), qd, qa, other.quoted))
	u, err := url.Parse(p.env.PG)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(role, password)
	metrics := testenv.FreeAddr(t)
	args := p.captureArgs(tables, "--metrics-addr", metrics)
	args[slices.Index(args, "--pg")+1] = u.String()
	capture := p.runCapture(args)
	sink := p.startSink()
	waitLog(t, capture, "DDL event trigger not installed")

	dq := fmt.Sprintf(`SELECT tenant_id, id::text, coalesce(m::text, '<null>') FROM %s AS t ORDER BY t.tenant_id, t.id`, qd)
	dch := fmt.Sprintf("SELECT tenant_id, toString(id), ifNull(toString(m), '<null>') FROM `%s`.`%s` FINAL WHERE _is_deleted = 0 ORDER BY tenant_id, id", p.database, direct)
	p.converge(dq, dch, capture, sink)
	p.converge(other.pgQuery, other.chQuery, capture, sink)

	p.exec(fmt.Sprintf(`ALTER TYPE %s RENAME VALUE 'sad' TO 'blue'`, qmood))
	p.exec(fmt.Sprintf(`UPDATE %s SET m = 'blue' WHERE id = 1`, qd))
	for _, name := range []string{direct, array} {
		waitMetric(t, metrics, inexactSeries(name), 1, capture)
		waitLog(t, capture, "RENAME VALUE", "not copied again", name, "--resnapshot")
	}
	p.exec(fmt.Sprintf(`INSERT INTO %s VALUES ('t0', 100, 'blue')`, qd))
	p.exec(fmt.Sprintf(`INSERT INTO %s VALUES ('t0', 100, 1, 'x100')`, other.quoted))
	p.waitCount(fmt.Sprintf("SELECT count() FROM `%s`.`%s` FINAL WHERE _is_deleted = 0 AND id = 100 AND m = 'blue'", p.database, direct), 1, "inserted after the rename")
	p.converge(other.pgQuery, other.chQuery, capture, sink)
	if v := metric(t, metrics, inexactSeries(other.name)); v != 0 {
		t.Errorf("%s = %v: a table without the enum is exact", inexactSeries(other.name), v)
	}
	requireRunning(t, capture, sink)
}
