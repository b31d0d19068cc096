package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"golang.org/x/sync/errgroup"

	"github.com/walhouse/walhouse/capture"
	"github.com/walhouse/walhouse/clickhouse"
	"github.com/walhouse/walhouse/internal/pgslot"
	"github.com/walhouse/walhouse/kafka"
	"github.com/walhouse/walhouse/record"
	"github.com/walhouse/walhouse/sink"
)

// The demo owns these names and resets them on every run.
const (
	demoSlot     = "walhouse_demo"
	demoPrefix   = "walhouse_demo"
	demoDatabase = "walhouse_demo"
)

var demoTables = []string{"public.demo_orders", "public.demo_customers"}

func runDemo(ctx context.Context, inv *invocation) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	var ep endpoints
	ep.register(fs, true, true, true)
	tenants := fs.Int("tenants", 8, "tenants in the generated workload")
	orders := fs.Int("orders", 2500, "orders inserted per tenant")
	if err := inv.parse(fs); err != nil {
		return err
	}
	if *tenants < 1 || *orders < 1 {
		return errors.New("--tenants and --orders must be positive")
	}
	out := os.Stdout
	ep.database = demoDatabase

	pgURL, err := ep.pgURL()
	if err != nil {
		return err
	}
	pg, err := pgx.Connect(ctx, pgURL)
	if err != nil {
		return fmt.Errorf("connect to PostgreSQL: %w (run `make services` first)", err)
	}
	defer pg.Close(context.WithoutCancel(ctx))
	chc, err := ep.openClickHouse(ctx)
	if err != nil {
		return err
	}
	defer chc.Close()
	kcfg, err := ep.kafkaConfig()
	if err != nil {
		return err
	}
	kc, err := kafka.NewClient(ctx, kcfg, kafka.ProducerOpts(record.DefaultMaxBytes, capture.Partitioner())...)
	if err != nil {
		return err
	}
	defer kc.Close()

	fmt.Fprintln(out, "==> resetting the demo (tables, slot, topics, ClickHouse database)")
	if err := resetDemo(ctx, pg, chc, kadm.NewClient(kc)); err != nil {
		return err
	}

	capt, err := capture.New(pgURL, kc, append(captureKafka(kc, demoPrefix, -1, record.DefaultMaxBytes),
		capture.WithSlot(demoSlot), capture.WithPublication(demoSlot), capture.WithTables(demoTables...),
		capture.WithTopicPrefix(demoPrefix), capture.WithTopicPartitions(4),
		capture.WithDeadLetterTopic(kafka.DeadLetterTopic(demoPrefix)), capture.WithStatusInterval(time.Second))...)
	if err != nil {
		return err
	}
	w, err := clickhouse.NewWriter(ctx, chc, demoDatabase, "")
	if err != nil {
		return err
	}
	// A fresh group per run: members of an earlier, killed run would hold
	// the partitions until their session times out.
	group := fmt.Sprintf("walhouse_demo_%d", time.Now().UnixNano())
	schemas, closeSchemas, err := schemaReader(ctx, kcfg, demoPrefix)
	if err != nil {
		return err
	}
	defer closeSchemas()
	snk, cc, err := newSink(ctx, kcfg, w, sinkSettings{group: group, prefix: demoPrefix, watermarks: w, maxWait: 500 * time.Millisecond, schemas: schemas})
	if err != nil {
		return err
	}
	defer cc.CloseAllowingRebalance()

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	g, gctx := errgroup.WithContext(runCtx)
	g.Go(func() error { return capt.Run(gctx) })
	g.Go(func() error { return snk.Run(gctx) })
	g.Go(func() error {
		defer stop()
		return demoWorkload(gctx, out, pg, chc, capt, snk, *tenants, *orders)
	})
	err = g.Wait()
	if errors.Is(err, context.Canceled) && ctx.Err() == nil {
		err = nil // the workload finished and stopped the pipeline
	}
	// An idle slot would hold WAL on the local database until the next demo.
	if derr := pgslot.Drop(context.WithoutCancel(ctx), pg, demoSlot); derr != nil {
		fmt.Fprintf(out, "could not drop the demo's replication slot %s: %v; drop it with SELECT pg_drop_replication_slot('%s')\n", demoSlot, derr, demoSlot)
	}
	return err
}

func resetDemo(ctx context.Context, pg *pgx.Conn, chc driver.Conn, adm *kadm.Client) error {
	stmts := []string{
		`SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = '` + demoSlot + `'`,
		`DROP PUBLICATION IF EXISTS ` + demoSlot,
		`DROP TABLE IF EXISTS demo_orders, demo_customers`,
		`CREATE TABLE demo_customers (
			tenant_id text NOT NULL,
			id        uuid NOT NULL DEFAULT gen_random_uuid(),
			name      text NOT NULL,
			email     text,
			tier      text,
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
	if err := chc.Exec(ctx, "DROP DATABASE IF EXISTS "+demoDatabase); err != nil {
		return fmt.Errorf("reset ClickHouse database %s: %w", demoDatabase, err)
	}
	topics, err := adm.ListTopics(ctx)
	if err != nil {
		return fmt.Errorf("list Kafka topics: %w", err)
	}
	var old []string
	for _, t := range topics.Names() {
		if strings.HasPrefix(t, demoPrefix+".") || t == kafka.DeadLetterTopic(demoPrefix) {
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

// demoWorkload writes a multi-tenant workload, waits until ClickHouse has
// caught up and prints the comparison.
func demoWorkload(ctx context.Context, out io.Writer, pg *pgx.Conn, chc driver.Conn, capt *capture.Capturer, snk *sink.Sink, tenants, orders int) error {
	// Wait for the slot before writing, so that nothing is written before
	// the stream starts (the demo takes no initial snapshot).
	for capt.Stats().Confirmed == 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	start := time.Now()
	fmt.Fprintf(out, "==> writing: %d tenants × %d orders, then updates and deletes\n", tenants, orders)
	steps := []struct {
		what string
		sql  string
	}{
		{"customers", `INSERT INTO demo_customers (tenant_id, name, email, tier)
			SELECT 'tenant_' || t, 'Customer ' || c, 'c' || c || '@tenant' || t || '.example', (ARRAY['free','pro','enterprise'])[1 + c % 3]
			FROM generate_series(1, $1::int) t, generate_series(1, 50) c`},
		{"orders", `INSERT INTO demo_orders (tenant_id, id, customer, amount, status, items, details, created_at)
			SELECT 'tenant_' || t, o, 'Customer ' || (1 + o % 50), round((random() * 500)::numeric, 2), 'new',
			       ARRAY['sku-' || (o % 17), 'sku-' || (o % 5)], jsonb_build_object('channel', (ARRAY['web','app','store'])[1 + o % 3]),
			       now() - (o || ' minutes')::interval
			FROM generate_series(1, $1::int) t, generate_series(1, $2::int) o`},
		{"pay 30% of orders", `UPDATE demo_orders SET status = 'paid' WHERE id % 10 < 3 AND $1::int > 0 AND $2::int > 0`},
		{"ship a third of the paid", `UPDATE demo_orders SET status = 'shipped', amount = amount + 4.99 WHERE id % 10 = 0 AND $1::int > 0 AND $2::int > 0`},
		{"delete 5% of orders", `DELETE FROM demo_orders WHERE id % 20 = 7 AND $1::int > 0 AND $2::int > 0`},
		{"upgrade a customer per tenant", `UPDATE demo_customers SET tier = 'enterprise' WHERE name = 'Customer 1' AND $1::int > 0`},
	}
	for _, s := range steps {
		var err error
		if strings.Contains(s.sql, "$2") {
			_, err = pg.Exec(ctx, s.sql, tenants, orders)
		} else {
			_, err = pg.Exec(ctx, s.sql, tenants)
		}
		if err != nil {
			return fmt.Errorf("workload step %q: %w", s.what, err)
		}
		fmt.Fprintf(out, "    %-30s done\n", s.what)
	}
	fmt.Fprintln(out, "==> waiting for ClickHouse to catch up")
	var pgCount, chCount uint64
	lastPrint := time.Time{}
	for {
		if err := pg.QueryRow(ctx, "SELECT (SELECT count(*) FROM demo_orders) + (SELECT count(*) FROM demo_customers)").Scan(&pgCount); err != nil {
			return fmt.Errorf("count PostgreSQL rows: %w", err)
		}
		err := chc.QueryRow(ctx, "SELECT (SELECT count() FROM walhouse_demo.demo_orders FINAL WHERE _is_deleted = 0) + (SELECT count() FROM walhouse_demo.demo_customers FINAL WHERE _is_deleted = 0)").Scan(&chCount)
		if err == nil && chCount == pgCount && sameOrders(ctx, pg, chc) {
			break
		}
		if time.Since(lastPrint) > 2*time.Second {
			st := capt.Stats()
			fmt.Fprintf(out, "    captured %d changes, loaded %d; rows PostgreSQL %d, ClickHouse %d\n", st.Rows, snk.Loaded(), pgCount, chCount)
			lastPrint = time.Now()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	st := capt.Stats()
	fmt.Fprintf(out, "==> caught up in %.1fs: %d changes captured, %d loaded\n\n", time.Since(start).Seconds(), st.Rows, snk.Loaded())
	return printDemoSummary(ctx, out, pg, chc)
}

// sameOrders compares per-tenant order counts and sums between both sides.
func sameOrders(ctx context.Context, pg *pgx.Conn, chc driver.Conn) bool {
	var a, b string
	if err := pg.QueryRow(ctx, "SELECT coalesce(string_agg(tenant_id || ':' || n || ':' || s, ',' ORDER BY tenant_id), '') FROM (SELECT tenant_id, count(*) n, trim_scale(sum(amount)) s FROM demo_orders GROUP BY 1) x").Scan(&a); err != nil {
		return false
	}
	if err := chc.QueryRow(ctx, "SELECT arrayStringConcat(groupArray(tenant_id || ':' || toString(n) || ':' || toString(s)), ',') FROM (SELECT tenant_id, count() n, sum(amount) s FROM walhouse_demo.demo_orders FINAL WHERE _is_deleted = 0 GROUP BY tenant_id ORDER BY tenant_id)").Scan(&b); err != nil {
		return false
	}
	return a == b
}

func printDemoSummary(ctx context.Context, out io.Writer, pg *pgx.Conn, chc driver.Conn) error {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "table\tPostgreSQL rows\tClickHouse FINAL rows\tClickHouse stored versions\t")
	for _, t := range []string{"demo_customers", "demo_orders"} {
		var p, f, raw uint64
		if err := pg.QueryRow(ctx, "SELECT count(*) FROM "+t).Scan(&p); err != nil {
			return err
		}
		if err := chc.QueryRow(ctx, "SELECT count() FROM walhouse_demo."+t+" FINAL WHERE _is_deleted = 0").Scan(&f); err != nil {
			return err
		}
		if err := chc.QueryRow(ctx, "SELECT count() FROM walhouse_demo."+t).Scan(&raw); err != nil {
			return err
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t\n", t, p, f, raw)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	const q = `SELECT tenant_id, status, count() AS orders, toString(sum(amount)) AS revenue
FROM walhouse_demo.demo_orders FINAL
WHERE _is_deleted = 0 AND tenant_id = 'tenant_1'
GROUP BY tenant_id, status ORDER BY status`
	fmt.Fprintf(out, "\nA dashboard query, read with FINAL:\n\n%s\n\n", q)
	rows, err := chc.Query(ctx, q)
	if err != nil {
		return fmt.Errorf("sample query: %w", err)
	}
	defer rows.Close()
	tw = tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "tenant_id\tstatus\torders\trevenue\t")
	for rows.Next() {
		var tenant, status string
		var n uint64
		var rev string
		if err := rows.Scan(&tenant, &status, &n, &rev); err != nil {
			return err
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t\n", tenant, status, n, rev)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(out, "\nPostgreSQL and ClickHouse agree. The stored versions beyond the FINAL rows are the older versions of updated rows\nand the tombstones of deleted ones: FINAL reads each row's latest version only, and background merges fold the rest away.")
	return nil
}
