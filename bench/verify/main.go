package main

import (
	"context"
	"flag"
	"fmt"
	"math"
	"os"
	"runtime/pprof"
	"syscall"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/jackc/pgx/v5"

	"github.com/walhouse/walhouse/clickhouse"
	"github.com/walhouse/walhouse/harness/testenv"
	"github.com/walhouse/walhouse/record"
	"github.com/walhouse/walhouse/schema"
	"github.com/walhouse/walhouse/verify"
)

func main() { testenv.BenchMain("bench verify", run) }

type options struct {
	rows, tenants, bucket, repair int
	localDir                      string
	timeout                       time.Duration
}

func run() error {
	var o options
	flag.IntVar(&o.rows, "rows", 10_000_000, "rows of the table")
	flag.IntVar(&o.tenants, "tenants", 10, "tenants the rows are spread over")
	flag.IntVar(&o.bucket, "bucket-rows", 50_000, "verify's --bucket-rows")
	flag.IntVar(&o.repair, "repair", 1000, "scattered rows changed in ClickHouse, then found and repaired")
	flag.StringVar(&o.localDir, "local-dir", ".local", "directory of the local services (for their pid files, to account their CPU)")
	flag.DurationVar(&o.timeout, "timeout", time.Hour, "give up after this long")
	cpuProfile := flag.String("cpuprofile", "", "write the CPU profile of the first verify (nothing different) to this file")
	flag.Parse()
	env := testenv.Load()
	if env.PG == "" || env.ClickHouse == "" {
		return fmt.Errorf("WALHOUSE_PG_URL and WALHOUSE_CLICKHOUSE_URL not set: run `make services` and source .local/env")
	}
	ctx, cancel := testenv.BenchContext(o.timeout)
	defer cancel()
	pg, err := pgx.Connect(ctx, env.PG)
	if err != nil {
		return err
	}
	defer pg.Close(context.Background())
	ch, err := clickhouse.Open(ctx, env.ClickHouse)
	if err != nil {
		return err
	}
	defer ch.Close()
	b := &bench{o: o, pg: pg, ch: ch, table: testenv.Name("bench_verify"), database: testenv.Name("bench_verify")}
	defer b.cleanup()
	if err := b.build(ctx); err != nil {
		return err
	}
	v, err := verify.New(env.PG, ch, verify.WithDatabase(b.database), verify.WithBucketRows(o.bucket), verify.WithMaxMismatches(max(10_000, o.repair)))
	if err != nil {
		return err
	}
	src := record.Source{Schema: "public", Table: b.table}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
	}
	res, m, err := b.measure(func() (verify.TableResult, error) { return v.Verify(ctx, src) })
	pprof.StopCPUProfile()
	if err != nil {
		return err
	}
	fmt.Printf("verify, nothing different: %d rows in %d buckets, %s: %.0f rows/s; CPU seconds: walhouse %.1f, PostgreSQL %.1f, ClickHouse %.1f; %d rows differ\n",
		res.RowsChecked, res.Buckets, m.took.Round(time.Millisecond), float64(res.RowsChecked)/m.took.Seconds(), m.self, m.pg, m.ch, len(res.Mismatches))
	if o.repair <= 0 {
		return nil
	}
	step := max(1, o.rows/o.repair)
	if err := ch.Exec(ctx, fmt.Sprintf("ALTER TABLE `%s`.`%s` UPDATE status = 'changed' WHERE id %% %d = 0 SETTINGS mutations_sync = 2", b.database, b.table, step)); err != nil {
		return fmt.Errorf("change %d rows in ClickHouse: %w", o.repair, err)
	}
	res, m, err = b.measure(func() (verify.TableResult, error) { return v.Verify(ctx, src) })
	if err != nil {
		return err
	}
	fmt.Printf("verify, %d scattered rows different: %s (%d split buckets, %d rows found, each confirmed in two more snapshots); CPU seconds: walhouse %.1f, PostgreSQL %.1f, ClickHouse %.1f\n",
		o.rows/step, m.took.Round(time.Millisecond), res.SplitBuckets, len(res.Mismatches), m.self, m.pg, m.ch)
	_, m, err = b.measure(func() (verify.TableResult, error) { return res, v.Repair(ctx, src, &res) })
	if err != nil {
		return err
	}
	repaired := 0
	for _, x := range res.Mismatches {
		if x.Repaired {
			repaired++
		}
	}
	fmt.Printf("repair of %d rows (write and check again): %s, %d repaired; CPU seconds: walhouse %.1f, PostgreSQL %.1f, ClickHouse %.1f\n",
		len(res.Mismatches), m.took.Round(time.Millisecond), repaired, m.self, m.pg, m.ch)
	return nil
}

type bench struct {
	o               options
	pg              *pgx.Conn
	ch              driver.Conn
	table, database string
}

// measured is the wall time and CPU seconds of one step.
type measured struct {
	took         time.Duration
	self, pg, ch float64
}

func (b *bench) measure(f func() (verify.TableResult, error)) (verify.TableResult, measured, error) {
	self0, pg0, ch0 := selfCPU(), testenv.ServiceCPU(b.o.localDir, testenv.PostgreSQL), testenv.ServiceCPU(b.o.localDir, testenv.ClickHouse)
	start := time.Now()
	res, err := f()
	m := measured{took: time.Since(start), self: selfCPU() - self0,
		pg: testenv.ServiceCPU(b.o.localDir, testenv.PostgreSQL) - pg0, ch: testenv.ServiceCPU(b.o.localDir, testenv.ClickHouse) - ch0}
	return res, m, err
}

// build creates the table in PostgreSQL and, with the same rows, the
// table the sink would create in ClickHouse, and a load watermark past
// every WAL position.
func (b *bench) build(ctx context.Context) error {
	start := time.Now()
	qt := pgx.Identifier{b.table}.Sanitize()
	// Unlogged: the benchmark measures reads, and spares the shared WAL.
	for _, sql := range []string{
		fmt.Sprintf(`CREATE UNLOGGED TABLE %s (tenant_id text NOT NULL, id bigint NOT NULL, amount numeric(12,2), status text, qty int, note text, updated_at timestamptz NOT NULL)`, qt),
		fmt.Sprintf(`INSERT INTO %s SELECT 't' || lpad((g %% %d)::text, 2, '0'), g, g * 0.25, 'new', g %% 1000, 'n' || g, '2026-01-01 00:00:00+00'::timestamptz + g * interval '1 second'
			FROM generate_series(1, %d) g`, qt, b.o.tenants, b.o.rows),
		fmt.Sprintf(`ALTER TABLE %s ADD PRIMARY KEY (tenant_id, id)`, qt),
		fmt.Sprintf(`ANALYZE %s`, qt),
	} {
		if _, err := b.pg.Exec(ctx, sql); err != nil {
			return fmt.Errorf("%s: %w", sql, err)
		}
	}
	pgTook := time.Since(start)
	cols := []record.Column{
		{Name: "tenant_id", Type: "text", TypMod: -1, Key: true, Attnum: 1},
		{Name: "id", Type: "int8", TypMod: -1, Key: true, Attnum: 2},
		{Name: "amount", Type: "numeric", TypMod: (12<<16 | 2) + 4, Attnum: 3},
		{Name: "status", Type: "text", TypMod: -1, Attnum: 4},
		{Name: "qty", Type: "int4", TypMod: -1, Attnum: 5},
		{Name: "note", Type: "text", TypMod: -1, Attnum: 6},
		{Name: "updated_at", Type: "timestamptz", TypMod: -1, Attnum: 7},
	}
	t, err := schema.NewTable(record.Source{Schema: "public", Table: b.table}, "tenant_id", cols, schema.Options{Database: b.database})
	if err != nil {
		return err
	}
	q := fmt.Sprintf("`%s`.`%s`", b.database, t.Name)
	for _, sql := range []string{
		"CREATE DATABASE `" + b.database + "`",
		t.CreateDDL(0),
		schema.SyncTableDDL(b.database),
		fmt.Sprintf(`INSERT INTO %s (tenant_id, id, amount, status, qty, note, updated_at, _version, _is_deleted, _commit_ts)
			SELECT concat('t', leftPad(toString(number %% %d), 2, '0')), number, toDecimal64(number, 2) / 4, 'new', toInt32(number %% 1000), concat('n', toString(number)),
			       toDateTime64('2026-01-01 00:00:00', 6, 'UTC') + toIntervalSecond(number), 0, 0, now64(6)
			FROM numbers(1, %d)`, q, b.o.tenants, b.o.rows),
		fmt.Sprintf("INSERT INTO `%s`.%s (source_table, partition, loaded_through, lsn, updated_at, partitions) VALUES ('%s', 0, now64(6), %d, now64(6), 1)",
			b.database, schema.SyncTable, t.Name, uint64(math.MaxInt64)),
	} {
		if err := b.ch.Exec(ctx, sql); err != nil {
			return fmt.Errorf("%.200s: %w", sql, err)
		}
	}
	fmt.Printf("built %d rows of %d tenants: PostgreSQL %s, ClickHouse %s\n", b.o.rows, b.o.tenants, pgTook.Round(time.Second), (time.Since(start) - pgTook).Round(time.Second))
	return nil
}

// selfCPU is the CPU seconds this process used so far.
func selfCPU() float64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Utime.Sec+ru.Stime.Sec) + float64(ru.Utime.Usec+ru.Stime.Usec)/1e6
}

func (b *bench) cleanup() {
	ctx := context.Background()
	_, _ = b.pg.Exec(ctx, "DROP TABLE IF EXISTS "+pgx.Identifier{b.table}.Sanitize())
	_ = b.ch.Exec(ctx, "DROP DATABASE IF EXISTS `"+b.database+"`")
}
