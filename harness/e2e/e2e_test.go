package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walhouse/walhouse/clickhouse"
	"github.com/walhouse/walhouse/harness/testenv"
	"github.com/walhouse/walhouse/query"
	"github.com/walhouse/walhouse/record"
	"github.com/walhouse/walhouse/schema"
)

var walhouseBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "walhouse-e2e")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	walhouseBin, err = testenv.BuildBinary(context.Background(), dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// pipeline is one isolated capture → Kafka → sink setup: its own table
// names, slot, publication, topics, consumer group and ClickHouse database.
type pipeline struct {
	t        *testing.T
	env      testenv.Env
	pg       *pgx.Conn
	ch       driver.Conn
	slot     string
	pub      string
	prefix   string
	group    string
	database string
	records  *testenv.Records // decodes the pipeline's records; made on first use
}

// decode decodes one record of the pipeline's topics, as the sink would:
// a row batch into its rows, another record into itself.
func (p *pipeline) decode(kr *kgo.Record) ([]*record.Record, error) {
	if p.records == nil {
		p.records = testenv.NewRecords(p.t, p.env, p.prefix)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return p.records.DecodeAll(ctx, kr)
}

func newPipeline(t *testing.T) *pipeline {
	t.Helper()
	env := testenv.Require(t, "pg", "kafka", "clickhouse")
	return newPipelineAt(t, env)
}

// newPipelineAt is newPipeline on the services of env, e.g. with the
// PostgreSQL of a primary/standby pair as env.PG.
func newPipelineAt(t *testing.T, env testenv.Env) *pipeline {
	t.Helper()
	ctx := context.Background()
	pg, err := pgx.Connect(ctx, env.PG)
	if err != nil {
		t.Fatalf("connect to PostgreSQL: %v", err)
	}
	t.Cleanup(func() { pg.Close(context.Background()) })
	chc, err := clickhouse.Open(ctx, env.ClickHouse)
	if err != nil {
		t.Fatalf("connect to ClickHouse: %v", err)
	}
	t.Cleanup(func() { chc.Close() })
	p := &pipeline{
		t: t, env: env, pg: pg, ch: chc,
		slot:     testenv.Name("slot"),
		pub:      testenv.Name("pub"),
		prefix:   testenv.Name("wh"),
		group:    testenv.Name("grp"),
		database: testenv.Name("e2e"),
	}
	testenv.DeleteTopicsAtCleanup(t, env, p.prefix)
	t.Cleanup(func() {
		ctx := context.Background()
		if err := testenv.DropSlot(ctx, p.pg, p.slot); err != nil {
			t.Errorf("drop slot %s: %v", p.slot, err)
		}
		_, _ = p.pg.Exec(ctx, "DROP PUBLICATION IF EXISTS "+pgx.Identifier{p.pub}.Sanitize())
		_ = p.ch.Exec(ctx, "DROP DATABASE IF EXISTS `"+p.database+"`")
	})
	return p
}

func (p *pipeline) exec(sql string, args ...any) {
	p.t.Helper()
	if _, err := p.pg.Exec(context.Background(), sql, args...); err != nil {
		p.t.Fatalf("%s: %v", sql, err)
	}
}

// keepWriting executes statement(k) for k = 0, 1, … on a connection of
// its own, one every interval, ignoring errors, until the returned stop is
// called or the test ends. stop waits for the writer to
// finish; calling it again does nothing.
func (p *pipeline) keepWriting(interval time.Duration, statement func(k int) string) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		conn, err := pgx.Connect(ctx, p.env.PG)
		if err != nil {
			return
		}
		defer conn.Close(context.Background())
		for k := 0; ctx.Err() == nil; k++ {
			_, _ = conn.Exec(ctx, statement(k))
			time.Sleep(interval)
		}
	}()
	stop = func() { cancel(); wg.Wait() }
	p.t.Cleanup(stop)
	return stop
}

// table creates a PostgreSQL table in public with a fresh name that starts
// with prefix and drops it when the test ends. definition is what follows
// the name in CREATE TABLE: the columns, and PARTITION BY for a partitioned
// table (whose partitions the drop takes along). It returns the name and the
// name quoted for PostgreSQL.
func (p *pipeline) table(prefix, definition string) (name, quoted string) {
	p.t.Helper()
	name = testenv.Name(prefix)
	quoted = pgx.Identifier{name}.Sanitize()
	p.exec("CREATE TABLE " + quoted + " " + definition)
	p.t.Cleanup(func() { _, _ = p.pg.Exec(context.Background(), "DROP TABLE IF EXISTS "+quoted) })
	return name, quoted
}

// captureArgs returns the arguments of `walhouse capture` for this
// pipeline's tables, with the tests' defaults and then extra.
func (p *pipeline) captureArgs(tables []string, extra ...string) []string {
	return append([]string{"capture",
		"--pg", p.env.PG, "--kafka", p.env.Kafka,
		"--slot", p.slot, "--publication", p.pub, "--topic-prefix", p.prefix,
		"--tables", strings.Join(tables, ","), "--partitions", "3", "--status-interval", "1s", "--heartbeat-interval", "1s"}, extra...)
}

// startCapture runs `walhouse capture` on tables and waits until it streams.
func (p *pipeline) startCapture(tables ...string) *testenv.Proc {
	p.t.Helper()
	return p.runCapture(p.captureArgs(tables))
}

// runCapture starts `walhouse capture` with args and waits until it
// streams: it logged so and the slot is active.
func (p *pipeline) runCapture(args []string) *testenv.Proc {
	p.t.Helper()
	proc := testenv.Start(p.t, "capture", walhouseBin, args...)
	waitLog(p.t, proc, "msg=streaming")
	err := testenv.Eventually(context.Background(), 60*time.Second, func(ctx context.Context) error {
		if err := exited(proc); err != nil {
			return err
		}
		var active bool
		err := p.pg.QueryRow(ctx, "SELECT active FROM pg_replication_slots WHERE slot_name = $1", p.slot).Scan(&active)
		if err != nil || !active {
			return fmt.Errorf("slot %s not active yet (%v)", p.slot, err)
		}
		return nil
	})
	if err != nil {
		p.t.Fatalf("capture did not start streaming: %v\n%s", err, proc.Output())
	}
	return proc
}

// startSink runs `walhouse sink` on the pipeline's topics, group and
// database; extra flags (e.g. "--dedup-addr", "off") follow the defaults.
func (p *pipeline) startSink(extra ...string) *testenv.Proc {
	p.t.Helper()
	return testenv.Start(p.t, "sink", walhouseBin, p.sinkArgs(extra...)...)
}

// sinkArgs returns the arguments of `walhouse sink` for this pipeline.
func (p *pipeline) sinkArgs(extra ...string) []string {
	return append([]string{"sink",
		"--kafka", p.env.Kafka, "--clickhouse", p.env.ClickHouse,
		"--database", p.database, "--group", p.group, "--topic-prefix", p.prefix}, extra...)
}

// converge waits until ClickHouse's FINAL view equals PostgreSQL.
func (p *pipeline) converge(pgQuery, chQuery string, procs ...*testenv.Proc) {
	p.t.Helper()
	p.convergeWithin(90*time.Second, pgQuery, chQuery, procs...)
}

// convergeWithin is converge with a timeout of its own, for workloads
// that take longer than usual to load.
func (p *pipeline) convergeWithin(timeout time.Duration, pgQuery, chQuery string, procs ...*testenv.Proc) {
	p.t.Helper()
	describe := func(want, got [][]string) string { return diff(joinCells(want), joinCells(got)) }
	p.convergeBy(timeout, describe, pgQuery, chQuery, procs...)
}

// convergeBy waits until describe finds no difference between the rows of
// pgQuery in PostgreSQL and those of chQuery in ClickHouse, cell by cell,
// and fails the test with its last description when timeout passes or one
// of procs exits.
func (p *pipeline) convergeBy(timeout time.Duration, describe func(want, got [][]string) string, pgQuery, chQuery string, procs ...*testenv.Proc) {
	p.t.Helper()
	var last string
	err := testenv.Eventually(context.Background(), timeout, func(ctx context.Context) error {
		if err := exited(procs...); err != nil {
			return err
		}
		want, err := pgCells(ctx, p.pg, pgQuery)
		if err != nil {
			return fmt.Errorf("query PostgreSQL: %w", err)
		}
		got, err := chCells(ctx, p.ch, chQuery, nil)
		if err != nil {
			return fmt.Errorf("query ClickHouse: %w", err)
		}
		if last = describe(want, got); last != "" {
			return errors.New("ClickHouse differs from PostgreSQL")
		}
		return nil
	})
	if err != nil {
		p.t.Fatalf("%v\n%s", err, last)
	}
}

// exited returns an error naming the first of procs that has exited, and
// how; nil while all of them run. Waits check it so that they fail at once
// rather than time out on a process that is gone.
func exited(procs ...*testenv.Proc) error {
	for _, pr := range procs {
		if done, err := pr.Exited(); done {
			return fmt.Errorf("%s exited: %v", pr.Name, err)
		}
	}
	return nil
}

// requireRunning fails the test, with the output of the process, if one of
// procs has exited.
func requireRunning(t *testing.T, procs ...*testenv.Proc) {
	t.Helper()
	for _, pr := range procs {
		if done, err := pr.Exited(); done {
			t.Fatalf("%s exited: %v\n%s", pr.Name, err, pr.Output())
		}
	}
}

func TestIntegrationEndToEnd(t *testing.T) {
	p := newPipeline(t)
	table, qt := p.table("orders", `(
		tenant_id  text NOT NULL,
		id         bigint NOT NULL,
		amount     numeric(12,2),
		status     text,
		tags       text[],
		created_at timestamptz NOT NULL DEFAULT now(),
		payload    jsonb,
		PRIMARY KEY (tenant_id, id))`)

	capture := p.startCapture(table)
	sink := p.startSink()

	// Two tenants with overlapping ids: a change in one must never touch
	// the other.
	for _, tenant := range []string{"acme", "globex"} {
		p.exec(fmt.Sprintf(`INSERT INTO %s (tenant_id, id, amount, status, tags, created_at, payload)
			SELECT $1, g, g * 1.25, 'new', ARRAY['a', 'b c', NULL], '2026-01-01 00:00:00+00'::timestamptz + g * interval '1 hour',
			       jsonb_build_object('n', g, 'quote', 'it''s "q"')
			FROM generate_series(1, 50) g`, qt), tenant)
	}
	p.exec(fmt.Sprintf(`UPDATE %s SET status = 'paid', amount = amount + 100 WHERE tenant_id = 'acme' AND id <= 10`, qt))
	// The same row twice in one transaction: the second change must win.
	tx, err := p.pg.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"first", "second"} {
		if _, err := tx.Exec(context.Background(), fmt.Sprintf(`UPDATE %s SET status = $1 WHERE tenant_id = 'globex' AND id = 7`, qt), s); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	p.exec(fmt.Sprintf(`DELETE FROM %s WHERE tenant_id = 'acme' AND id BETWEEN 20 AND 25`, qt))
	p.exec(fmt.Sprintf(`DELETE FROM %s WHERE tenant_id = 'globex' AND id IN (1, 49)`, qt))
	p.exec(fmt.Sprintf(`UPDATE %s SET tags = NULL, payload = NULL, status = NULL WHERE tenant_id = 'globex' AND id = 2`, qt))
	p.exec(fmt.Sprintf(`INSERT INTO %s (tenant_id, id, amount, status) VALUES ('acme', 20, 1, 're-inserted after delete')`, qt))

	pgQuery := fmt.Sprintf(`SELECT tenant_id, id::text, coalesce(trim_scale(amount)::text, '<null>'), coalesce(status, '<null>'),
		coalesce(array_to_string(tags, ',', '<null>'), ''),
		to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US'), coalesce(payload::text, '<null>')
		FROM %s AS t ORDER BY t.tenant_id, t.id`, qt)
	chQuery := fmt.Sprintf("SELECT tenant_id, toString(id), ifNull(toString(amount), '<null>'), ifNull(status, '<null>'),"+
		" arrayStringConcat(arrayMap(x -> ifNull(x, '<null>'), tags), ','),"+
		" formatDateTime(created_at, '%%Y-%%m-%%d %%H:%%i:%%S.%%f'), ifNull(payload, '<null>')"+
		" FROM `%s`.`%s` FINAL WHERE _is_deleted = 0 ORDER BY tenant_id, id", p.database, table)
	p.converge(pgQuery, chQuery, capture, sink)
}

// pgNow returns PostgreSQL's rows of q as they are now, for a later
// requireCH.
func (p *pipeline) pgNow(q string) []string {
	p.t.Helper()
	rows, err := pgRows(context.Background(), p.pg, q)
	if err != nil {
		p.t.Fatal(err)
	}
	return rows
}

// requireCH fails the test unless ClickHouse's rows of q are want; what
// says what want stands for ("PostgreSQL as it was before …").
func (p *pipeline) requireCH(q string, want []string, what string) {
	p.t.Helper()
	got, err := chRows(context.Background(), p.ch, q, nil)
	if err != nil {
		p.t.Fatal(err)
	}
	if d := diff(want, got); d != "" {
		p.t.Errorf("ClickHouse's rows (%s) are not %s:\n%s", q, what, d)
	}
}

// queryAPI serves the query API in process over the pipeline's database
// until the test ends, and returns the URL of table's query endpoint and a
// read key of tenant.
func (p *pipeline) queryAPI(tenant, table string) (url, secret string) {
	t := p.t
	t.Helper()
	secret, err := query.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal([]query.Key{{ID: "reader-" + tenant, Hash: query.HashKey(secret), Tenant: tenant, Scopes: []query.Scope{query.ScopeRead}}})
	keys, err := query.ParseKeys(raw)
	if err != nil {
		t.Fatal(err)
	}
	api, err := query.NewServer(query.Config{Conn: p.ch, Database: p.database, Keys: keys, CursorSecret: []byte("e2e-test-cursor-secret")})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	return srv.URL + "/v1/tables/" + schema.TableName(record.Source{Schema: "public", Table: table}) + "/query", secret
}
