package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/walhouse/walhouse/harness/testenv"
)

// options are the benchmark's settings, from flags and the environment.
type options struct {
	pgURL      string
	brokers    []string
	rows       int
	txRows     int
	workers    int
	profileDir string
	recvBin    string
	localDir   string
	phases     string
	timeout    time.Duration
	verbose    bool
}

func main() { testenv.BenchMain("bench capture", run) }

func run() error {
	opts, err := parseOptions(os.Args[1:])
	if err != nil {
		return err
	}
	ctx, cancel := testenv.BenchContext(opts.timeout)
	defer cancel()

	b, err := newBench(ctx, opts)
	if err != nil {
		return err
	}
	err = b.run(ctx)
	if cerr := b.close(); cerr != nil {
		err = errors.Join(err, fmt.Errorf("clean up: %w", cerr))
	}
	return err
}

func parseOptions(args []string) (options, error) {
	env := testenv.Load()
	fs := flag.NewFlagSet("bench-capture", flag.ContinueOnError)
	o := options{pgURL: env.PG}
	fs.IntVar(&o.rows, "rows", 1_000_000, "row changes in the backlog (and rows in the snapshotted table)")
	fs.IntVar(&o.txRows, "tx-rows", 1000, "rows per inserting transaction")
	fs.IntVar(&o.workers, "snapshot-workers", 2, "walhouse --snapshot-workers for the snapshot phase")
	fs.StringVar(&o.profileDir, "profile", "", "directory for cpu.pprof and allocs.pprof of an extra in-process streaming run (off when empty)")
	fs.StringVar(&o.recvBin, "pg-recvlogical", "/usr/lib/postgresql/15/bin/pg_recvlogical", "path of PostgreSQL's pg_recvlogical")
	fs.StringVar(&o.localDir, "local-dir", ".local", "directory of the local services (for their pid files, to account their CPU)")
	fs.StringVar(&o.phases, "phases", "stream,snapshot", "phases to run, comma-separated: stream, snapshot, produce (Kafka alone, per compression codec)")
	fs.BoolVar(&o.verbose, "v", false, "print the end of walhouse's log after each run (to stderr)")
	fs.DurationVar(&o.timeout, "timeout", 30*time.Minute, "give up after this long")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	for _, b := range strings.Split(env.Kafka, ",") {
		if b = strings.TrimSpace(b); b != "" {
			o.brokers = append(o.brokers, b)
		}
	}
	var errs []error
	if o.pgURL == "" || len(o.brokers) == 0 {
		errs = append(errs, errors.New("WALHOUSE_PG_URL and WALHOUSE_KAFKA_BROKERS are not set: run `make services` and source .local/env (make bench-capture does both)"))
	}
	for _, f := range []struct {
		name  string
		value int
	}{{"rows", o.rows}, {"tx-rows", o.txRows}, {"snapshot-workers", o.workers}} {
		if f.value < 1 {
			errs = append(errs, fmt.Errorf("-%s %d: want at least 1", f.name, f.value))
		}
	}
	for _, p := range strings.Split(o.phases, ",") {
		if p != "stream" && p != "snapshot" && p != "produce" {
			errs = append(errs, fmt.Errorf("-phases %q: want a comma-separated list of stream, snapshot and produce", o.phases))
			break
		}
	}
	return o, errors.Join(errs...)
}

func (o options) phase(name string) bool {
	for _, p := range strings.Split(o.phases, ",") {
		if p == name {
			return true
		}
	}
	return false
}

// header describes the run before any figure.
func (b *bench) header() {
	fmt.Printf("walhouse capture benchmark: %d rows (%d per transaction) in %s, %d CPUs, %s\n",
		b.opts.rows, b.opts.txRows, b.names.table, runtime.NumCPU(), runtime.Version())
	fmt.Println("figures are printed, never asserted; other work on this machine adds noise")
}
