package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/walhouse/walhouse/clickhouse"
	"github.com/walhouse/walhouse/harness/testenv"
	"github.com/walhouse/walhouse/schema"
)

func main() { testenv.BenchMain("bench query", run) }

// options are the benchmark's settings.
type options struct {
	clickhouse  string
	rows        int
	tenants     int
	oldVersions float64
	tombstones  float64
	compare     string // the layouts measured through the API (apiLayouts)
	merges      bool
	settings    string // more table settings for the CREATE TABLE
	requests    int
	warmup      int
	timeout     time.Duration
	// sweepRows is the rows of each table of the settings sweep (0: no
	// sweep); sweepRequests and sweepWarmup its loads per variant.
	sweepRows     int
	sweepRequests int
	sweepWarmup   int
	layouts       string
}

func run() error {
	var o options
	flag.IntVar(&o.rows, "rows", 10_000_000, "current rows in the table (one version each)")
	flag.IntVar(&o.tenants, "tenants", 100, "tenants the rows are spread over")
	flag.Float64Var(&o.oldVersions, "old-versions", 0.10, "older versions of existing rows to add, as a fraction of -rows")
	flag.Float64Var(&o.tombstones, "tombstones", 0.05, "deletes of existing rows to add (tombstones: a later version with _is_deleted = 1), as a fraction of -rows")
	flag.StringVar(&o.compare, "compare", "default,monthly,monthly-closed-merged", "the layouts measured through the API, each a table of its own with the same rows, comma-separated: default (the sink's DDL), monthly (ORDER BY tenant, created_at, id; PARTITION BY month of created_at), monthly-closed-merged (monthly, past months merged), tenant8 (8 partitions by a hash of the tenant)")
	flag.BoolVar(&o.merges, "merges", false, "let ClickHouse merge the table's parts in the background during the run; by default merges are stopped so every older version stays for FINAL to collapse and both variants see the same parts")
	flag.StringVar(&o.settings, "table-settings", "", "more settings of the table, appended to the sink's SETTINGS clause, to weigh a change of the sink's DDL, e.g. 'index_granularity = 1024'")
	flag.IntVar(&o.requests, "requests", 200, "dashboard loads measured per variant")
	flag.IntVar(&o.warmup, "warmup", 20, "dashboard loads per variant before measuring")
	flag.IntVar(&o.sweepRows, "sweep-rows", 1_000_000, "current rows of each table of the FINAL settings sweep, which compares table layouts and FINAL query settings side by side, running the API's SQL directly (0: no sweep)")
	flag.IntVar(&o.sweepRequests, "sweep-requests", 60, "dashboard loads per variant and row of the sweep")
	flag.IntVar(&o.sweepWarmup, "sweep-warmup", 5, "dashboard loads per variant and row of the sweep before measuring")
	flag.StringVar(&o.layouts, "layouts", "", "sweep only the layouts whose name contains one of these comma-separated words (e.g. \"default,key\")")
	flag.DurationVar(&o.timeout, "timeout", 30*time.Minute, "give up after this long")
	flag.Parse()
	o.clickhouse = testenv.Load().ClickHouse
	var problems []error
	if o.clickhouse == "" {
		problems = append(problems, errors.New("WALHOUSE_CLICKHOUSE_URL not set: run `make services` (or deploy/local/services.sh start) and source .local/env"))
	}
	if o.sweepRows < 0 || o.sweepRequests < 1 || o.sweepWarmup < 0 {
		problems = append(problems, fmt.Errorf("-sweep-rows %d and -sweep-warmup %d must not be negative and -sweep-requests %d must be positive", o.sweepRows, o.sweepWarmup, o.sweepRequests))
	}
	if o.rows < 1 || o.tenants < 1 || o.requests < 1 || o.warmup < 0 {
		problems = append(problems, fmt.Errorf("-rows %d, -tenants %d and -requests %d must be positive and -warmup %d not negative", o.rows, o.tenants, o.requests, o.warmup))
	}
	if o.oldVersions < 0 || o.oldVersions > 1 || o.tombstones < 0 || o.tombstones > 1 {
		problems = append(problems, fmt.Errorf("-old-versions %g and -tombstones %g must be between 0 and 1", o.oldVersions, o.tombstones))
	}
	layouts, err := o.compared()
	if err != nil {
		problems = append(problems, err)
	}
	if err := errors.Join(problems...); err != nil {
		return err
	}
	ctx, cancel := testenv.BenchContext(o.timeout)
	defer cancel()

	conn, err := clickhouse.Open(ctx, o.clickhouse)
	if err != nil {
		return err
	}
	defer conn.Close()
	b := &bench{o: o, conn: conn, database: testenv.Name("bench_query"), now: time.Now().UTC().Truncate(time.Second)}
	err = b.run(ctx, layouts)
	if cerr := b.cleanup(); cerr != nil {
		err = errors.Join(err, fmt.Errorf("clean up: %w", cerr))
	}
	return err
}

// bench is one run: one loaded database, measured with both variants.
type bench struct {
	o        options
	conn     driver.Conn
	database string
	created  bool
	// now is the benchmark's "today": rows are created up to 90 days before
	// it and dashboards look at the 30 days before it.
	now time.Time
}

func (b *bench) run(ctx context.Context, layouts []apiLayout) error {
	ds, err := b.load(ctx, layouts)
	if err != nil {
		return err
	}
	for _, d := range ds {
		fmt.Printf("%-22s loaded in %v: %d rows stored (%d current; older versions and tombstones: %d) over %d tenants; %d active parts in %d partitions\n",
			d.layout.name, loadedIn(d.elapsed), d.stored, d.current, d.stored-d.current, b.o.tenants, d.parts, d.partitions)
	}

	srv, err := startAPI(ctx, b.conn, b.database, b.o.tenants)
	if err != nil {
		return err
	}
	defer srv.close()

	m := &measurer{api: srv, now: b.now, tenants: b.o.tenants, layouts: layouts}
	fmt.Printf("warming up: %d dashboard loads per variant...\n", b.o.warmup)
	if _, err := m.measure(ctx, b.o.warmup); err != nil {
		return fmt.Errorf("warm up: %w", err)
	}
	fmt.Printf("measuring: %d dashboard loads per layout and variant (2 requests each), layouts and variants alternating, tenants rotating...\n", b.o.requests)
	res, err := m.measure(ctx, b.o.requests)
	if err != nil {
		return err
	}
	b.print(ds, res)
	if b.o.sweepRows == 0 {
		return nil
	}
	return b.sweep(ctx)
}

// cleanup drops the benchmark's database.
func (b *bench) cleanup() error {
	if !b.created {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := b.conn.Exec(ctx, "DROP DATABASE IF EXISTS "+schema.QuoteIdent(b.database)); err != nil {
		return fmt.Errorf("drop database %s: %w", b.database, err)
	}
	return nil
}
