package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walhouse/walhouse/clickhouse"
	"github.com/walhouse/walhouse/harness/testenv"
	"github.com/walhouse/walhouse/schema"
)

// bench holds the connections and resources of one run.
type bench struct {
	o    options
	base string // fresh prefix of every name the run creates
	tmp  string
	bin  string // the walhouse binary
	pg   *pgx.Conn
	ch   driver.Conn
	adm  *kadm.Client
	undo testenv.Cleanups
	rep  report
}

// newBench builds the walhouse binary and connects to PostgreSQL,
// ClickHouse and Kafka. The caller calls close, also after an error.
func newBench(ctx context.Context, o options) (*bench, error) {
	b := &bench{o: o, base: testenv.Name("bench_e2e")}
	tmp, err := os.MkdirTemp("", b.base+"-")
	if err != nil {
		return b, fmt.Errorf("make a temporary directory: %w", err)
	}
	b.tmp = tmp
	b.undo.Push("remove "+tmp, func(context.Context) error { return os.RemoveAll(tmp) })
	if b.bin, err = testenv.BuildBinary(ctx, tmp); err != nil {
		return b, err
	}
	if b.pg, err = pgx.Connect(ctx, o.env.PG); err != nil {
		return b, fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	b.undo.Push("close the PostgreSQL connection", func(ctx context.Context) error { return b.pg.Close(ctx) })
	if b.ch, err = clickhouse.Open(ctx, o.env.ClickHouse); err != nil {
		return b, err
	}
	b.undo.Push("close the ClickHouse connection", func(context.Context) error { return b.ch.Close() })
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(o.env.Kafka, ",")...))
	if err != nil {
		return b, fmt.Errorf("kafka client: %w", err)
	}
	b.adm = kadm.NewClient(cl)
	b.undo.Push("close the Kafka client", func(context.Context) error { cl.Close(); return nil })
	b.undo.Push("delete topics "+b.base+"*", b.deleteTopics)
	b.undo.Push("drop ClickHouse databases "+b.base+"*", b.dropDatabases)
	b.undo.Push("delete dedup keys "+b.base+"*", b.deleteDedupKeys)
	return b, nil
}

// close releases everything the run created, even after ctx ended.
func (b *bench) close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	return b.undo.Run(ctx)
}

// run measures every phase, prints the results and writes their files.
func (b *bench) run(ctx context.Context) error {
	b.rep = report{
		Started: time.Now().UTC().Format(time.RFC3339), Quick: b.o.quick, CPUs: runtime.NumCPU(),
		GoVersion: runtime.Version(), LoadAverageBefore: loadAverage(), Command: "make bench-e2e",
	}
	if b.o.quick {
		b.rep.Command += " QUICK=1"
	}
	fmt.Printf("walhouse end-to-end benchmark (%s): %d CPUs, %s, load average %s\n", b.rep.Command, b.rep.CPUs, b.rep.GoVersion, b.rep.LoadAverageBefore)
	if tds, err := b.adm.ListTopics(ctx); err == nil {
		b.rep.BrokerTopics = len(tds)
		tds.EachPartition(func(kadm.PartitionDetail) { b.rep.BrokerPartitions++ })
		fmt.Printf("Kafka holds %d topics, %d partitions", b.rep.BrokerTopics, b.rep.BrokerPartitions)
		if b.rep.BrokerPartitions > brokerPartitionsNoted {
			// Measured: 7,196 partitions of tests' topics took the
			// broker's CPU over a 1M-row load from about 1.2 to 2.3-3.1 s.
			fmt.Print(": the broker's housekeeping of that many adds to its CPU column; delete the topics earlier tests left")
		}
		fmt.Println()
	}
	fmt.Println("capture and sink run as processes, Layer 2 on unless said; figures are printed, never asserted; other work on this machine adds noise")
	if b.o.materialized {
		if err := b.removeMaterializedLeftovers(ctx); err != nil {
			fmt.Printf("removing what earlier runs left of MaterializedPostgreSQL: %v (going on; its runs may fail)\n", err)
		}
	}
	if b.o.warmup > 0 {
		if err := b.warmUp(ctx); err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
	}
	for _, s := range []shape{narrowShape(), wideShape()} {
		rows := b.o.narrowRows
		if s.name == "wide" {
			rows = b.o.wideRows
		}
		r, err := b.load(ctx, s, rows, b.o.layer2Off && s.name == "narrow")
		if err != nil {
			return fmt.Errorf("initial load of the %s table: %w", s.name, err)
		}
		b.rep.Loads = append(b.rep.Loads, r)
		r.print(os.Stdout)
	}
	if b.o.steady {
		if err := b.steady(ctx); err != nil {
			return fmt.Errorf("steady phase: %w", err)
		}
	}
	b.rep.LoadAverageAfter = loadAverage()
	b.rep.summarize()
	b.rep.print(os.Stdout)
	if b.o.out == "" {
		return nil
	}
	files, err := b.rep.write(b.o.out, b.o.name)
	if err != nil {
		return err
	}
	fmt.Printf("\nwrote %s\n", strings.Join(files, ", "))
	return nil
}

// warmUp runs an unmeasured walhouse load of b.o.warmup narrow rows. A
// freshly started broker spends CPU compiling its request paths (its JIT)
// during the first loads: 1.2 CPU seconds over a 1M-row load in the first
// minutes after a restart, 0.5-0.9 later (2026-12-07), which a broker in
// use has long behind it.
func (b *bench) warmUp(ctx context.Context) error {
	table := b.base + "_warmup"
	fmt.Printf("\nwarming up: an unmeasured walhouse load of %d rows...\n", b.o.warmup)
	if _, err := b.createAndFill(ctx, table, narrowShape(), b.o.warmup); err != nil {
		return err
	}
	_, _, err := b.loadWithWalhouse(ctx, "warmup", table, int64(b.o.warmup), true)
	return err
}

// brokerPartitionsNoted is how many partitions on the brokers make the
// header warn that the broker's CPU figures include their housekeeping.
const brokerPartitionsNoted = 1000

// loadAverage returns the 1, 5 and 15 minute load averages of the machine,
// as /proc/loadavg has them: how busy the shared machine was.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// deleteTopics deletes every topic of the run (tables', state, schema
// registry and dead letters: all start with the base name).
func (b *bench) deleteTopics(ctx context.Context) error {
	return testenv.DeleteTopicsWithPrefix(ctx, b.adm, b.base)
}

// dropDatabases drops the ClickHouse databases of the run.
func (b *bench) dropDatabases(ctx context.Context) error {
	rows, err := b.ch.Query(ctx, "SELECT name FROM system.databases WHERE startsWith(name, {base:String})", ch.Named("base", b.base))
	if err != nil {
		return err
	}
	var names []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			rows.Close()
			return err
		}
		names = append(names, n)
	}
	rows.Close()
	var errs []error
	for _, n := range names {
		if err := b.ch.Exec(ctx, "DROP DATABASE IF EXISTS "+schema.QuoteIdent(n)); err != nil {
			errs = append(errs, fmt.Errorf("drop database %s: %w", n, err))
		}
	}
	return errors.Join(errs...)
}

// deleteDedupKeys deletes the Layer 2 keys the run's sinks wrote.
func (b *bench) deleteDedupKeys(ctx context.Context) error {
	return testenv.DeleteKeys(ctx, b.o.env.Redis, b.base+"*")
}
