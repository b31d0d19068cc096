package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"golang.org/x/sync/errgroup"

	"github.com/walhouse/walhouse/capture"
	"github.com/walhouse/walhouse/clickhouse"
	"github.com/walhouse/walhouse/dedup"
	"github.com/walhouse/walhouse/harness/writeapi"
	"github.com/walhouse/walhouse/idempotency"
	"github.com/walhouse/walhouse/internal/pgslot"
	"github.com/walhouse/walhouse/kafka"
	"github.com/walhouse/walhouse/pipeline"
	"github.com/walhouse/walhouse/record"
	"github.com/walhouse/walhouse/schema"
	"github.com/walhouse/walhouse/sink"
	"github.com/walhouse/walhouse/verify"
)

// DefaultName names what the demo owns and resets on every run (see
// --name): a PostgreSQL database of its own, so that its tables, slot and
// capture's heartbeats touch nothing else, and the slot, publication,
// topic prefix, ClickHouse database and dedup prefix.
const DefaultName = "walhouse_demo"

// demoNameRE is what --name may be: a name valid as a PostgreSQL database,
// a replication slot (lower case, digits, _) and a ClickHouse database.
var demoNameRE = regexp.MustCompile(`^[a-z][a-z0-9_]{0,47}$`)

var demoTables = []string{"public.demo_orders", "public.demo_customers"}

// demoTenant is the tenant whose data the demo reads through the query API
// and whose read key it prints for the example dashboard.
const demoTenant = "tenant_1"

// Config is what one run of the demo is built from.
type Config struct {
	// PG is the URL of the PostgreSQL server, with its password, where the
	// demo creates (or reuses) the database Name.
	PG string
	// ClickHouse is where the demo's database Name is loaded (its Database
	// is set to Name).
	ClickHouse pipeline.ClickHouse
	Kafka      kafka.Config
	// Dedup is Layer 2's store, its login and TLS set (nil: off); the demo
	// sets its Prefix and TTL.
	Dedup *dedup.Config
	// Name names the PostgreSQL database, replication slot, publication,
	// topic prefix, ClickHouse database and dedup prefix the demo owns and
	// resets on every run (ValidName; default DefaultName).
	Name string
	// Tenants and Orders size the generated workload: orders per tenant.
	Tenants, Orders int
	// Listen and WriteListen are the addresses of the query API and of the
	// Layer 1 write API (a free port instead when one is taken).
	Listen, WriteListen string
	// Keep keeps the pipeline and both APIs running after the demo until
	// ctx ends.
	Keep bool
	// Out receives the demo's report.
	Out io.Writer
}

// ValidName reports whether name may name what the demo owns: a name
// valid as a PostgreSQL database, a replication slot (lower case, digits,
// _) and a ClickHouse database.
func ValidName(name string) bool { return demoNameRE.MatchString(name) }

// Run resets what the demo owns, runs capture, the sink and the query API
// on a generated multi-tenant workload, compares both sides and reads a
// write back with its consistency token; with c.Keep it then runs on until
// ctx ends.
func Run(ctx context.Context, c Config) error {
	out := c.Out
	c.ClickHouse.Database = c.Name
	pgURL, err := demoDatabase(ctx, c.PG, c.Name)
	if err != nil {
		return err
	}
	pg, err := pgx.Connect(ctx, pgURL)
	if err != nil {
		return fmt.Errorf("connect to the demo's database %s: %w (run `make services` first)", c.Name, err)
	}
	defer pg.Close(context.WithoutCancel(ctx))
	chc, err := c.ClickHouse.Open(ctx)
	if err != nil {
		return err
	}
	defer chc.Close()
	kc, err := kafka.NewClient(ctx, c.Kafka, kafka.ProducerOpts(record.DefaultMaxBytes, capture.Partitioner())...)
	if err != nil {
		return err
	}
	defer kc.Close()

	fmt.Fprintf(out, "==> resetting the demo (PostgreSQL database, slot, topics and ClickHouse database %s)\n", c.Name)
	if err := resetDemo(ctx, pg, chc, kadm.NewClient(kc), c.Name); err != nil {
		return err
	}
	capt, err := capture.New(pgURL, kc, append(pipeline.CaptureKafka(kc, c.Name, -1, record.DefaultMaxBytes),
		capture.WithSlot(c.Name), capture.WithPublication(c.Name), capture.WithTables(demoTables...),
		capture.WithTopicPrefix(c.Name), capture.WithTopicPartitions(4),
		capture.WithDeadLetterTopic(kafka.DeadLetterTopic(c.Name)), capture.WithStatusInterval(time.Second),
		// Frequent heartbeats: the load watermark that walhouse verify waits for moves each second.
		capture.WithHeartbeatInterval(time.Second))...)
	if err != nil {
		return err
	}
	snk, closeSink, err := c.sink(ctx, chc)
	if err != nil {
		return err
	}
	defer closeSink()

	pool, err := pipeline.OpenPG(ctx, pgURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	api, err := newDemoAPI(ctx, demoAPIRequest{
		pool: pool, ch: chc, kafka: kadm.NewClient(kc), name: c.Name, group: snk.group,
		listen: c.Listen, writeListen: c.WriteListen,
	})
	if err != nil {
		return err
	}
	defer api.close()
	if c.Dedup != nil {
		fmt.Fprintf(out, "==> starting capture, the sink (Layer 2 on: eventIds remembered in %s) and the query API\n", c.Dedup.Addr)
	} else {
		fmt.Fprintln(out, "==> starting capture, the sink (Layer 2 off: no --dedup-addr) and the query API")
	}
	err = c.run(ctx, demoRun{pgURL: pgURL, pg: pg, pool: pool, ch: chc, capt: capt, snk: snk.Sink, api: api, database: c.Name, tenants: c.Tenants, orders: c.Orders})
	// An idle slot would hold WAL on the local database until the next demo.
	if derr := pgslot.Drop(context.WithoutCancel(ctx), pg, c.Name); derr != nil {
		fmt.Fprintf(out, "could not drop the demo's replication slot %s: %v; drop it with SELECT pg_drop_replication_slot('%s') in database %s\n", c.Name, derr, c.Name, c.Name)
	}
	return err
}

// demoSink is the demo's sink and its consumer group.
type demoSink struct {
	*sink.Sink
	group string
}

// sink builds the demo's sink into chc, with Layer 2 when c.Dedup is set;
// the function returned closes what it opened.
func (c Config) sink(ctx context.Context, chc driver.Conn) (demoSink, func(), error) {
	var closers []func()
	closeAll := func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	w, err := clickhouse.NewWriter(ctx, chc, c.Name, "")
	if err != nil {
		return demoSink{}, nil, err
	}
	// A fresh group per run: members of an earlier, killed run would hold
	// the partitions until their session times out.
	group := fmt.Sprintf("%s_%d", c.Name, time.Now().UnixNano())
	schemas, closeSchemas, err := pipeline.SchemaReader(ctx, c.Kafka, c.Name)
	if err != nil {
		return demoSink{}, nil, err
	}
	closers = append(closers, closeSchemas)
	// As walhouse sink loads by default: one insert per table per flush,
	// two tables at a time.
	st := pipeline.SinkSettings{Group: group, Prefix: c.Name, Watermarks: w, MaxWait: 500 * time.Millisecond, Schemas: schemas, CombinePartitions: true, Parallel: 2}
	if c.Dedup != nil {
		// An hour is plenty for a demo; the keys of earlier runs expire
		// on their own (eventIds are WAL positions: a new run never
		// repeats one).
		cfg := *c.Dedup
		cfg.Prefix, cfg.TTL = c.Name+":dedup:", time.Hour
		store, err := pipeline.OpenDedup(ctx, cfg)
		if err != nil {
			closeAll()
			return demoSink{}, nil, err
		}
		closers = append(closers, func() { _ = store.Close() })
		st.Dedup = store
	}
	snk, cc, err := pipeline.Sink(ctx, c.Kafka, w, st)
	if err != nil {
		closeAll()
		return demoSink{}, nil, err
	}
	closers = append(closers, cc.CloseAllowingRebalance)
	return demoSink{snk, group}, closeAll, nil
}

// run runs capture, the sink and the APIs of d while the workload runs,
// then stops them (with c.Keep, when ctx ends).
func (c Config) run(ctx context.Context, d demoRun) error {
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	g, gctx := errgroup.WithContext(runCtx)
	var finished atomic.Bool
	g.Go(func() error { return d.capt.Run(gctx) })
	g.Go(func() error { return d.snk.Run(gctx) })
	g.Go(func() error { return d.api.run(gctx) })
	g.Go(func() error {
		if err := demoWorkload(gctx, c.Out, d); err != nil {
			return err
		}
		finished.Store(true)
		printDemoLinks(c.Out, d.api, c.Keep)
		if c.Keep {
			<-gctx.Done() // Ctrl-C
			fmt.Fprintln(c.Out, "\n==> stopping the demo")
		}
		stop()
		return nil
	})
	err := g.Wait()
	if errors.Is(err, context.Canceled) && (ctx.Err() == nil || finished.Load()) {
		err = nil // the workload finished and stopped the pipeline, or Ctrl-C ended a kept one
	}
	return err
}

// demoDatabase creates the PostgreSQL database name on the server of
// serverURL unless it exists, and returns the URL of it.
func demoDatabase(ctx context.Context, serverURL, name string) (string, error) {
	admin, err := pgx.Connect(ctx, serverURL)
	if err != nil {
		return "", fmt.Errorf("connect to PostgreSQL: %w (run `make services` first)", err)
	}
	defer admin.Close(context.WithoutCancel(ctx))
	var exists bool
	if err := admin.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		return "", fmt.Errorf("look for the demo's database %s: %w", name, err)
	}
	if !exists {
		if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
			return "", fmt.Errorf("create the demo's database %s: %w (the demo needs a role that may CREATE DATABASE, or an existing database named by --name)", name, err)
		}
	}
	return WithDatabase(serverURL, name)
}

// WithDatabase returns the connection string conn (a URL or key=value
// pairs) naming database db instead of its own.
func WithDatabase(conn, db string) (string, error) {
	if strings.HasPrefix(conn, "postgres://") || strings.HasPrefix(conn, "postgresql://") {
		u, err := url.Parse(conn)
		if err != nil {
			return "", fmt.Errorf("--pg is not a valid URL: %w", err)
		}
		u.Path, u.RawPath = "/"+db, ""
		return u.String(), nil
	}
	// In key=value form, the last value of a key wins.
	return conn + " dbname=" + db, nil
}

func resetDemo(ctx context.Context, pg *pgx.Conn, chc driver.Conn, adm *kadm.Client, name string) error {
	// Slot names are the server's, not the database's: an earlier
	// demo's slot may sit in another database (before --name, the demo's
	// objects lived in --pg's database), where only a session of that
	// database can drop it.
	var elsewhere string
	err := pg.QueryRow(ctx, `SELECT coalesce(database::text, '') FROM pg_replication_slots WHERE slot_name = $1 AND database IS DISTINCT FROM current_database()`, name).Scan(&elsewhere)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return fmt.Errorf("look for the demo's replication slot %s: %w", name, err)
	default:
		return fmt.Errorf("replication slot %s already exists in database %q (an earlier demo's?): drop it there with SELECT pg_drop_replication_slot('%s'), or give the demo another --name", name, elsewhere, name)
	}
	stmts := []string{
		`SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = '` + name + `'`,
		`DROP PUBLICATION IF EXISTS ` + name,
		`DROP TABLE IF EXISTS demo_orders, demo_customers`,
		// Layer 1's table pattern: each row carries the key of the write
		// that made it, and that write's fingerprint.
		`CREATE TABLE demo_customers (
			tenant_id text NOT NULL,
			id        uuid NOT NULL DEFAULT gen_random_uuid(),
			name      text NOT NULL,
			email     text,
			tier      text,
			idempotency_key         uuid  NOT NULL UNIQUE,
			idempotency_fingerprint bytea NOT NULL,
			PRIMARY KEY (tenant_id, id))`,
		`CREATE TABLE demo_orders (
			tenant_id  text NOT NULL,
			id         bigint NOT NULL,
			customer   text NOT NULL,
			amount     numeric(12,2) NOT NULL,
			status     text NOT NULL,
			items      text[],
			details    jsonb,
			created_at timestamptz NOT NULL DEFAULT now(),
			PRIMARY KEY (tenant_id, id))`,
	}
	for _, s := range stmts {
		if _, err := pg.Exec(ctx, s); err != nil {
			return fmt.Errorf("prepare PostgreSQL (%s): %w", firstLine(s), err)
		}
	}
	if err := idempotency.Migrate(ctx, pg); err != nil {
		return err
	}
	if err := chc.Exec(ctx, "DROP DATABASE IF EXISTS "+name); err != nil {
		return fmt.Errorf("reset ClickHouse database %s: %w", name, err)
	}
	topics, err := adm.ListTopics(ctx)
	if err != nil {
		return fmt.Errorf("list Kafka topics: %w", err)
	}
	var old []string
	for _, t := range topics.Names() {
		if strings.HasPrefix(t, name+".") || t == kafka.DeadLetterTopic(name) {
			old = append(old, t)
		}
	}
	if len(old) > 0 {
		if _, err := adm.DeleteTopics(ctx, old...); err != nil {
			return fmt.Errorf("delete old demo topics: %w", err)
		}
	}
	return nil
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}

// demoRun is what the demo's workload writes with and reads from.
type demoRun struct {
	pgURL    string
	pg       *pgx.Conn
	pool     *pgxpool.Pool
	ch       driver.Conn
	capt     *capture.Capturer
	snk      *sink.Sink
	api      *demoAPI
	database string // ClickHouse's
	tenants  int
	orders   int
}

// demoWorkload writes a multi-tenant workload through Layer 1, retries
// some of its writes to show the duplicates absorbed, waits until
// ClickHouse has caught up and prints the comparison, then reads through
// the query API and reads a write of its own back with its token.
func demoWorkload(ctx context.Context, out io.Writer, d demoRun) error {
	// Wait for the slot before writing, so that nothing is written before
	// the stream starts (the demo takes no initial snapshot).
	for d.capt.Stats().Confirmed == 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	keys := idempotency.New(d.pool)
	start := time.Now()
	fmt.Fprintf(out, "==> writing through Layer 1: %d tenants × %d orders, then updates and deletes (a key on every write)\n", d.tenants, d.orders)
	w := &demoWriter{keys: keys, orders: d.orders}
	for t := 1; t <= d.tenants; t++ {
		if err := w.customers(ctx, fmt.Sprintf("tenant_%d", t)); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "    %-30s done\n", "customers (row pattern)")
	for _, s := range demoSteps {
		for t := 1; t <= d.tenants; t++ {
			if _, err := w.step(ctx, s, fmt.Sprintf("tenant_%d", t)); err != nil {
				return err
			}
		}
		fmt.Fprintf(out, "    %-30s done\n", s.what)
	}
	if err := demoRetries(ctx, out, d.pool, w, d.orders); err != nil {
		return err
	}
	fmt.Fprintln(out, "==> waiting for ClickHouse to catch up")
	var pgCount, chCount uint64
	lastPrint := time.Time{}
	db := schema.QuoteIdent(d.database)
	for {
		if err := d.pg.QueryRow(ctx, "SELECT (SELECT count(*) FROM demo_orders) + (SELECT count(*) FROM demo_customers)").Scan(&pgCount); err != nil {
			return fmt.Errorf("count PostgreSQL rows: %w", err)
		}
		err := d.ch.QueryRow(ctx, "SELECT (SELECT count() FROM "+db+".demo_orders FINAL WHERE _is_deleted = 0) + (SELECT count() FROM "+db+".demo_customers FINAL WHERE _is_deleted = 0)").Scan(&chCount)
		if err == nil && chCount == pgCount && sameOrders(ctx, d.pg, d.ch, db) {
			break
		}
		if time.Since(lastPrint) > 2*time.Second {
			st := d.capt.Stats()
			fmt.Fprintf(out, "    captured %d changes, loaded %d; rows PostgreSQL %d, ClickHouse %d\n", st.Rows, d.snk.Loaded(), pgCount, chCount)
			lastPrint = time.Now()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	st := d.capt.Stats()
	fmt.Fprintf(out, "==> caught up in %.1fs: %d changes captured, %d loaded\n\n", time.Since(start).Seconds(), st.Rows, d.snk.Loaded())
	if err := printDemoSummary(ctx, out, d); err != nil {
		return err
	}
	if err := d.api.dashboardRead(ctx, out); err != nil {
		return err
	}
	return d.api.tokenRead(ctx, out, writeapi.Order{ID: int64(d.orders) + 2, Customer: "Customer 7", Amount: "19.90", Status: "new"})
}

// sameOrders compares per-tenant order counts and sums between both sides.
func sameOrders(ctx context.Context, pg *pgx.Conn, chc driver.Conn, db string) bool {
	var a, b string
	if err := pg.QueryRow(ctx, "SELECT coalesce(string_agg(tenant_id || ':' || n || ':' || s, ',' ORDER BY tenant_id), '') FROM (SELECT tenant_id, count(*) n, trim_scale(sum(amount)) s FROM demo_orders GROUP BY 1) x").Scan(&a); err != nil {
		return false
	}
	if err := chc.QueryRow(ctx, "SELECT arrayStringConcat(groupArray(tenant_id || ':' || toString(n) || ':' || toString(s)), ',') FROM (SELECT tenant_id, count() n, sum(amount) s FROM "+db+".demo_orders FINAL WHERE _is_deleted = 0 GROUP BY tenant_id ORDER BY tenant_id)").Scan(&b); err != nil {
		return false
	}
	return a == b
}

func printDemoSummary(ctx context.Context, out io.Writer, d demoRun) error {
	db := schema.QuoteIdent(d.database)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "table\tPostgreSQL rows\tClickHouse FINAL rows\tClickHouse stored versions\t")
	for _, t := range []string{"demo_customers", "demo_orders"} {
		var p, f, raw uint64
		if err := d.pg.QueryRow(ctx, "SELECT count(*) FROM "+t).Scan(&p); err != nil {
			return err
		}
		if err := d.ch.QueryRow(ctx, "SELECT count() FROM "+db+"."+t+" FINAL WHERE _is_deleted = 0").Scan(&f); err != nil {
			return err
		}
		if err := d.ch.QueryRow(ctx, "SELECT count() FROM "+db+"."+t).Scan(&raw); err != nil {
			return err
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t\n", t, p, f, raw)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if err := verifyDemo(ctx, out, d.pgURL, d.ch, d.database); err != nil {
		return err
	}
	fmt.Fprintln(out, "\nPostgreSQL and ClickHouse agree. The stored versions beyond the FINAL rows are the older versions of updated rows\nand the tombstones of deleted ones: FINAL reads each row's latest version only, and background merges fold the rest away.")
	return nil
}

// verifyDemo runs one round of walhouse verify over the demo's tables: the
// counts above could agree by chance, a comparison of every value cannot.
func verifyDemo(ctx context.Context, out io.Writer, pgURL string, chc driver.Conn, database string) error {
	v, err := verify.New(pgURL, chc, verify.WithDatabase(database), verify.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "\nwalhouse verify, every row and value of PostgreSQL against ClickHouse FINAL:\n")
	for _, t := range []string{"demo_customers", "demo_orders"} {
		res, err := v.Verify(ctx, record.Source{Schema: "public", Table: t})
		if err != nil {
			return fmt.Errorf("verify %s: %w", t, err)
		}
		fmt.Fprintf(out, "  %-15s %6d rows compared in %s, %d differ\n", t, res.RowsChecked, res.Duration, len(res.Mismatches))
		if len(res.Mismatches) > 0 {
			return fmt.Errorf("walhouse verify found %d rows of %s that differ: run `walhouse verify --database %s --tables public.%s --report verify.json` to see them", len(res.Mismatches), t, database, t)
		}
	}
	return nil
}

// demoSteps are the workload's writes after the customers, each run once
// per tenant ($1) as one keyed transaction of Layer 1's key table; $2 is
// the orders per tenant.
var demoSteps = []struct {
	what string
	sql  string
}{
	{"orders", `INSERT INTO demo_orders (tenant_id, id, customer, amount, status, items, details, created_at)
		SELECT $1, o, 'Customer ' || (1 + o % 50), round((random() * 500)::numeric, 2), 'new',
		       ARRAY['sku-' || (o % 17), 'sku-' || (o % 5)], jsonb_build_object('channel', (ARRAY['web','app','store'])[1 + o % 3]),
		       now() - (o || ' minutes')::interval
		FROM generate_series(1, $2::int) o`},
	{"pay 30% of orders", `UPDATE demo_orders SET status = 'paid' WHERE tenant_id = $1 AND id % 10 < 3 AND $2::int > 0`},
	{"ship a third of the paid", `UPDATE demo_orders SET status = 'shipped', amount = amount + 4.99 WHERE tenant_id = $1 AND id % 10 = 0 AND $2::int > 0`},
	{"delete 5% of orders", `DELETE FROM demo_orders WHERE tenant_id = $1 AND id % 20 = 7 AND $2::int > 0`},
	{"upgrade a customer per tenant", `UPDATE demo_customers SET tier = 'enterprise' WHERE tenant_id = $1 AND name = 'Customer 1' AND $2::int > 0`},
}

// demoWriter writes the workload through Layer 1 and remembers the last
// request of each pattern, so that it can be sent again.
type demoWriter struct {
	keys   *idempotency.Keys
	orders int
	// The last request of each step and its result, and the last
	// customer inserted and its id: demoRetries sends them again.
	sent         map[string]sentStep
	lastCustomer idempotency.Insert
	lastID       any
}

type sentStep struct {
	r      idempotency.Request
	result []byte
}

// customers inserts a tenant's 50 customers with the table pattern, one
// keyed row each.
func (w *demoWriter) customers(ctx context.Context, tenant string) error {
	for c := 1; c <= 50; c++ {
		ins := idempotency.Insert{Table: "demo_customers", Tenant: tenant, Key: idempotency.NewKey(),
			Columns:   []string{"name", "email", "tier"},
			Values:    []any{fmt.Sprintf("Customer %d", c), fmt.Sprintf("c%d@%s.example", c, tenant), []string{"free", "pro", "enterprise"}[c%3]},
			Returning: []string{"id"}}
		got, err := w.keys.Insert(ctx, ins)
		if err != nil {
			return fmt.Errorf("insert customer %d of %s: %w", c, tenant, err)
		}
		w.lastCustomer, w.lastID = ins, got.Values[0]
	}
	return nil
}

// step runs one workload step for tenant as a keyed write.
func (w *demoWriter) step(ctx context.Context, s struct{ what, sql string }, tenant string) (idempotency.Outcome, error) {
	fp, err := idempotency.FingerprintOf(s.what, []any{tenant, w.orders})
	if err != nil {
		return idempotency.Outcome{}, err
	}
	r := idempotency.Request{Tenant: tenant, Key: idempotency.NewKey(), Fingerprint: fp}
	out, err := w.do(ctx, r, s.sql)
	if w.sent == nil {
		w.sent = map[string]sentStep{}
	}
	w.sent[s.what] = sentStep{r, out.Result}
	return out, err
}

func (w *demoWriter) do(ctx context.Context, r idempotency.Request, sql string) (idempotency.Outcome, error) {
	out, err := w.keys.Do(ctx, r, func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
		tag, err := tx.Exec(ctx, sql, r.Tenant, w.orders)
		return []byte(fmt.Sprintf("%d rows", tag.RowsAffected())), err
	})
	if err != nil {
		return out, fmt.Errorf("workload step of %s: %w", r.Tenant, err)
	}
	return out, nil
}

// demoRetries sends writes again with their keys, as a client whose
// response was lost would, and shows that each duplicate was absorbed:
// the first result comes back, nothing changes in PostgreSQL.
func demoRetries(ctx context.Context, out io.Writer, pool *pgxpool.Pool, w *demoWriter, orders int) error {
	fmt.Fprintln(out, "==> retrying writes with their keys (Layer 1 absorbs the duplicates)")
	fingerprintOf := func(tenant string) (string, error) {
		var s string
		err := pool.QueryRow(ctx, `SELECT count(*) || ' orders, sum ' || coalesce(sum(amount), 0) FROM demo_orders WHERE tenant_id = $1`, tenant).Scan(&s)
		return s, err
	}
	// "ship a third of the paid" adds 4.99 to amounts: done twice, it
	// would change them twice.
	ship := demoSteps[2]
	first := w.sent[ship.what]
	tenant := first.r.Tenant
	before, err := fingerprintOf(tenant)
	if err != nil {
		return err
	}
	again, err := w.do(ctx, first.r, ship.sql)
	if err != nil {
		return err
	}
	after, err := fingerprintOf(tenant)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "    key table:   %q (amount + 4.99) of %s retried with its key: replayed %q; %s before and %s after\n",
		ship.what, tenant, again.Result, before, after)
	if !again.Replayed || before != after || string(again.Result) != string(first.result) {
		return fmt.Errorf("layer 1 did not absorb the retried update (replayed %v, %s then %s)", again.Replayed, before, after)
	}

	got, err := w.keys.Insert(ctx, w.lastCustomer)
	if err != nil {
		return err
	}
	if !got.Replayed || got.Values[0] != w.lastID {
		return fmt.Errorf("layer 1 did not absorb the retried insert (replayed %v, id %v then %v)", got.Replayed, w.lastID, got.Values[0])
	}
	fmt.Fprintf(out, "    row pattern: the insert of %s's %s retried with its key: replayed, the same id\n", w.lastCustomer.Tenant, w.lastCustomer.Values[0])

	// A write API of its own that loses the first response to each key
	// (the dashboard's does not).
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: writeapi.LoseFirstResponses(writeapi.Handler(w.keys, "demo_orders")), ReadHeaderTimeout: 5 * time.Second, ErrorLog: log.New(io.Discard, "", 0)}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	c := writeapi.Client{BaseURL: "http://" + ln.Addr().String()}
	key := idempotency.NewKey()
	order := writeapi.Order{ID: int64(orders) + 1, Customer: "Customer 1", Amount: "42.00", Status: "new"}
	resp, attempts, err := c.CallRetrying(ctx, 5, tenant, key, "POST", "/orders", order)
	if err != nil {
		return err
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM demo_orders WHERE tenant_id = $1 AND id = $2`, tenant, order.ID).Scan(&n); err != nil {
		return err
	}
	fmt.Fprintf(out, "    HTTP:        POST /orders, its response lost after the commit: %d attempts, the last replayed %d %s; %d row\n", attempts, resp.Status, http.StatusText(resp.Status), n)
	if !resp.Replayed || n != 1 {
		return fmt.Errorf("layer 1 did not absorb the HTTP retry (replayed %v, %d rows)", resp.Replayed, n)
	}
	order.Amount = "43.00"
	resp, err = c.Call(ctx, tenant, key, "POST", "/orders", order)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "    HTTP:        the same key with another amount: %d %s\n", resp.Status, http.StatusText(resp.Status))
	if resp.Status != http.StatusUnprocessableEntity {
		return fmt.Errorf("a reused key with another payload got %d, want 422", resp.Status)
	}
	return nil
}
