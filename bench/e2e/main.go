package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/walhouse/walhouse/harness/testenv"
)

func main() { testenv.BenchMain("bench e2e", run) }

// options are the benchmark's settings, from flags and the environment.
type options struct {
	env         testenv.Env
	quick       bool
	narrowRows  int
	wideRows    int
	layer2Off   bool
	rates       []int // offered rows/s of the steady steps
	step        time.Duration
	drain       time.Duration
	newTables   int
	warmup      int
	out         string
	name        string // base name of the files under out
	localDir    string
	pgbench     string
	timeout     time.Duration
	verbose     bool
	chartFrom   string   // redraw the chart of this JSON report and exit
	sinkArgs    []string // more flags for every `walhouse sink`
	captureArgs []string // more flags for every `walhouse capture`
	profile     bool     // CPU profiles of capture and sink in each load and steady step
	// materialized runs ClickHouse's MaterializedPostgreSQL next to
	// walhouse in the loads and the steady steps.
	materialized bool
	steady       bool   // run the steady steps and the first rows after the loads
	perf         string // perf's path, to profile the engine process during each load ("": not)
}

func run() error {
	o, err := parseOptions(os.Args[1:])
	if err != nil {
		return err
	}
	if o.chartFrom != "" {
		return redraw(o.chartFrom)
	}
	if o.profile {
		// The processes the run starts inherit it (pipeline.HTTP.Pprof).
		if err := os.Setenv("WALHOUSE_PPROF", "1"); err != nil {
			return err
		}
	}
	ctx, cancel := testenv.BenchContext(o.timeout)
	defer cancel()
	b, err := newBench(ctx, o)
	if err == nil {
		err = b.run(ctx)
	}
	if b != nil {
		if cerr := b.close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("clean up: %w", cerr))
		}
	}
	return err
}

// defaultOut is where a run writes its raw outputs: a folder git ignores,
// so that they are never committed by accident (docs/benchmarks.md is the
// committed summary; its charts are copied next to it by hand).
const defaultOut = "bench/out"

// quickDefaults are the settings -quick changes, for a run of about three
// minutes: smaller tables, fewer rates, shorter steps.
func quickDefaults() map[string]string {
	return map[string]string{
		"narrow-rows": "200000", "wide-rows": "30000", "rates": "10000,60000",
		"step": "10s", "drain": "30s", "new-tables": "1", "name": "e2e-quick",
	}
}

func parseOptions(args []string) (options, error) {
	o := options{env: testenv.Load()}
	fs := flag.NewFlagSet("bench-e2e", flag.ContinueOnError)
	var rates string
	fs.BoolVar(&o.quick, "quick", false, "a short run (about 3 minutes): smaller tables, rates 10k and 60k, 10 s steps; flags given explicitly still win")
	fs.IntVar(&o.narrowRows, "narrow-rows", 2_000_000, "rows of the narrow table (6 columns) loaded initially")
	fs.IntVar(&o.wideRows, "wide-rows", 300_000, "rows of the wide table (30 columns, about 1 KB a row) loaded initially")
	fs.BoolVar(&o.layer2Off, "layer2-off", true, "load the narrow table a second time with Layer 2 off, for what Layer 2 costs")
	fs.StringVar(&rates, "rates", "10000,30000,60000,90000", "offered rows/s of the steady steps, comma-separated")
	fs.DurationVar(&o.step, "step", 30*time.Second, "how long each steady rate is offered")
	fs.DurationVar(&o.drain, "drain", 60*time.Second, "longest wait after a step for its rows to be visible; the sweep stops after a step that does not drain")
	fs.IntVar(&o.warmup, "warmup", 200_000, "rows of an unmeasured walhouse load before the measured ones (0: none): Kafka's JIT compiles its request paths in its first loads, which a broker in use has done long before")
	fs.IntVar(&o.newTables, "new-tables", 3, "tables added to the publication while the pipeline runs, one after another (0: skip)")
	fs.StringVar(&o.out, "out", defaultOut, "directory for the CSV, JSON and PNG files and the profiles (empty: write none); git ignores the default")
	fs.StringVar(&o.name, "name", "e2e", "base name of the files written under -out")
	fs.StringVar(&o.localDir, "local-dir", ".local", "directory of the local services (their pid files, for CPU and memory)")
	fs.StringVar(&o.pgbench, "pgbench", "/usr/lib/postgresql/15/bin/pgbench", "path of PostgreSQL's pgbench")
	fs.DurationVar(&o.timeout, "timeout", 30*time.Minute, "give up after this long")
	fs.BoolVar(&o.verbose, "v", false, "print the end of capture's and sink's output after each phase (to stderr)")
	fs.StringVar(&o.chartFrom, "chart-from", "", "only redraw the PNG chart of this JSON report (next to it), then exit")
	fs.Func("sink-args", "more flags for every `walhouse sink`, space-separated, e.g. '--max-wait 100ms --log-level debug' (with -v, its last lines show each insert's time)", func(v string) error {
		o.sinkArgs = strings.Fields(v)
		return nil
	})
	fs.BoolVar(&o.materialized, "materialized", true, "measure ClickHouse's own CDC, a MaterializedPostgreSQL database, next to walhouse: its initial load of each table and, during the steady steps, its lag on the same table (-materialized=false: walhouse and the pull only)")
	fs.StringVar(&o.perf, "perf", "", "path of Linux perf (e.g. /usr/bin/perf; needs perf_event_paranoid ≤ 1 or root): record the engine process during each load and split its CPU by shared object (HTTP front, engine, kernel) into the report, perf's data under -out/<name>-profiles")
	fs.BoolVar(&o.steady, "steady", true, "after the initial loads, run the steady steps and the first rows (-steady=false: the loads only)")
	fs.BoolVar(&o.profile, "profile", true, "take a CPU profile of capture and of the sink during each walhouse load and steady step (they serve /debug/pprof/ with WALHOUSE_PPROF=1 on a port of their own; sampling costs them a few percent of CPU), print where their CPU went by stage and write the profiles under -out/<name>-profiles; -profile=false for none")
	fs.Func("capture-args", "more flags for every `walhouse capture`, space-separated, e.g. '--metrics-addr 127.0.0.1:9465' (with WALHOUSE_PPROF=1 in the environment, /debug/pprof/ is served there too)", func(v string) error {
		o.captureArgs = strings.Fields(v)
		return nil
	})
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if o.quick {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		for name, v := range quickDefaults() {
			if !set[name] {
				if err := fs.Set(name, v); err != nil {
					return o, err
				}
			}
		}
	}
	if o.chartFrom != "" {
		return o, nil
	}
	var errs []error
	for _, s := range strings.Split(rates, ",") {
		r, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || r < 10 {
			errs = append(errs, fmt.Errorf("-rates %q: want comma-separated rows/s of at least 10 each", rates))
			break
		}
		o.rates = append(o.rates, r)
	}
	var missing []string
	for name, v := range map[string]string{"WALHOUSE_PG_URL": o.env.PG, "WALHOUSE_KAFKA_BROKERS": o.env.Kafka, "WALHOUSE_CLICKHOUSE_URL": o.env.ClickHouse, "WALHOUSE_REDIS_ADDR": o.env.Redis} {
		if v == "" {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		errs = append(errs, fmt.Errorf("%s not set: run `make services` and source .local/env (make bench-e2e does both)", strings.Join(missing, ", ")))
	}
	if o.narrowRows < 1 || o.wideRows < 1 {
		errs = append(errs, fmt.Errorf("-narrow-rows %d and -wide-rows %d: want at least 1", o.narrowRows, o.wideRows))
	}
	if o.step < time.Second || o.drain < time.Second {
		errs = append(errs, fmt.Errorf("-step %v and -drain %v: want at least 1s", o.step, o.drain))
	}
	if o.newTables < 0 {
		errs = append(errs, fmt.Errorf("-new-tables %d: want 0 or more", o.newTables))
	}
	if _, err := os.Stat(o.pgbench); err != nil {
		errs = append(errs, fmt.Errorf("-pgbench %s: %w (Debian's postgresql-15 has it; make services installs it)", o.pgbench, err))
	}
	return o, errors.Join(errs...)
}
