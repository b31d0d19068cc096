package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/jackc/pgx/v5"

	"github.com/walhouse/walhouse/harness/testenv"
	"github.com/walhouse/walhouse/record"
	"github.com/walhouse/walhouse/schema"
)

// stepResult is one offered rate of the steady sweep.
type stepResult struct {
	OfferedRowsPerSecond  int     `json:"offered_rows_per_second"`
	AchievedRowsPerSecond float64 `json:"achieved_rows_per_second"` // what PostgreSQL committed
	Rows                  int64   `json:"rows"`
	Visible               int64   `json:"visible"` // rows in ClickHouse after the drain
	Drained               bool    `json:"drained"`
	DrainSeconds          float64 `json:"drain_seconds"` // from the step's end until every row was visible
	P50                   float64 `json:"p50_seconds"`
	P99                   float64 `json:"p99_seconds"`
	Max                   float64 `json:"max_seconds"`
	// MaxCaptureBacklog and MaxSinkBacklog are the most rows, sampled
	// every second of the step and its drain, that were committed but not
	// in Kafka yet (capture's backlog; commits estimated from the committed
	// rate) and in Kafka but not visible yet (the sink's): which stage a
	// latency comes from.
	MaxCaptureBacklog int64 `json:"max_capture_backlog_rows"`
	MaxSinkBacklog    int64 `json:"max_sink_backlog_rows"`
	// TokenReads are the probes of the step (tokenProbers writers, each
	// writing a row through Layer 1 and reading it back through the query
	// API with the write's consistency token, one after another);
	// TokenStale of them ended their read's wait without the write. The
	// token wait is from the write's commit (Keys.Do returned) until the
	// read returned, over every probe.
	TokenReads int `json:"token_reads"`
	TokenStale int `json:"token_stale"`
	// TokenFailed probes got an error instead of an answer (not in the
	// quantiles); TokenError is the first one's.
	TokenFailed  int     `json:"token_failed,omitempty"`
	TokenError   string  `json:"token_error,omitempty"`
	TokenWaitP50 float64 `json:"token_wait_p50_seconds"`
	TokenWaitP99 float64 `json:"token_wait_p99_seconds"`
	TokenWaitMax float64 `json:"token_wait_max_seconds"`
	// TokenServerP50 and TokenServerP99 are the quantiles of the part of
	// the token waits the server spent waiting for the table's load
	// watermark (query.TimingHeader); the rest is the query and HTTP.
	TokenServerP50 float64 `json:"token_server_wait_p50_seconds"`
	TokenServerP99 float64 `json:"token_server_wait_p99_seconds"`
	// EngineInserts are the engine's inserts (InsertQuery: the table's and
	// the sink's watermarks') and TableParts the parts written into the
	// table (its block numbers), over InsertSeconds: the step and its
	// drain.
	EngineInserts int64   `json:"engine_inserts"`
	TableParts    int64   `json:"table_parts"`
	InsertSeconds float64 `json:"insert_seconds"`
	Usage         []usage `json:"usage"`
	// Lag is walhouse's and (with -materialized) MaterializedPostgreSQL's
	// newest visible row's age while the rate was offered (lag.go), the
	// same sampler for both.
	Lag []lagResult `json:"lag,omitempty"`
	// MaterializedVisible are the step's rows in MaterializedPostgreSQL's
	// table when walhouse's drain ended.
	MaterializedVisible int64 `json:"materialized_visible,omitempty"`
	// Profiles are capture's and the sink's CPU over the offered load, by
	// stage (with -profile).
	Profiles []processProfile `json:"profiles,omitempty"`
}

// firstRow is one table added to the publication while everything runs.
type firstRow struct {
	Table string `json:"table"`
	// VisibleAfter is from the commit of the table's first row (as the
	// client saw it) until a query found the row in ClickHouse.
	VisibleAfter float64 `json:"visible_after_seconds"`
	// CommitToSynced is the row's _synced_at minus its _commit_ts.
	CommitToSynced float64 `json:"commit_to_synced_seconds"`
}

// Settings of the steady phase.
const (
	txRows         = 10 // rows per pgbench transaction
	tenants        = 100
	pgbenchClients = 16
	firstRowLimit  = 90 * time.Second
)

// steadyScript is pgbench's transaction: 10 rows of one of 100 tenants,
// tagged with the step (pgbench -D step=N).
func steadyScript(table string) string {
	return fmt.Sprintf(`\set t random(0, %d)
INSERT INTO %s (tenant_id, step, amount, note) SELECT 'tenant_' || :t, :step, g * 1.25, 'steady row ' || g FROM generate_series(1, %d) g;
`, tenants-1, quotePG(table), txRows)
}

// steady runs one pipeline on an empty table, offers each rate for a step
// and measures commit → visible, then adds tables to the publication.
func (b *bench) steady(ctx context.Context) error {
	table := b.base + "_steady"
	t := quotePG(table)
	_, err := b.pg.Exec(ctx, "CREATE TABLE "+t+` (
		tenant_id  text NOT NULL,
		id         bigint GENERATED ALWAYS AS IDENTITY,
		step       int NOT NULL,
		amount     numeric(12,2),
		note       text,
		created_at timestamptz NOT NULL DEFAULT now(),
		PRIMARY KEY (tenant_id, id))`)
	if err != nil {
		return fmt.Errorf("create table %s: %w", table, err)
	}
	b.undo.Push("drop table "+table, func(ctx context.Context) error {
		_, err := b.pg.Exec(ctx, "DROP TABLE IF EXISTS "+t)
		return err
	})
	script := filepath.Join(b.tmp, "steady.sql")
	if err := os.WriteFile(script, []byte(steadyScript(table)), 0o644); err != nil {
		return err
	}

	fmt.Printf("\nsteady: starting a pipeline on an empty 6-column table...\n")
	p, err := b.startPipeline(ctx, pipelineRequest{role: "steady", tables: []string{"public." + table}, layer2: true})
	if err != nil {
		return err
	}
	defer p.stop(b.o.verbose)
	target := p.clickhouseTable(table)
	// A first row makes capture and sink create everything they need.
	if _, err := b.pg.Exec(ctx, "INSERT INTO "+t+" (tenant_id, step) VALUES ('tenant_0', 0)"); err != nil {
		return err
	}
	if err := b.waitFor(ctx, p, 2*time.Minute, 100*time.Millisecond, b.countAtLeast(target, 0, 1)); err != nil {
		return fmt.Errorf("the pipeline did not load a first row: %w", err)
	}
	lag := []lagTarget{{name: runWalhouse, table: target}}
	stopMat := func() {}
	if b.o.materialized {
		mat, err := b.steadyMaterialized(ctx, table)
		if err != nil {
			fmt.Printf("steady: MaterializedPostgreSQL did not start, going on without it: %v\n", err)
		} else {
			lag = append(lag, lagTarget{name: runMaterialized, table: mat.table(table)})
			stopMat = func() {
				if err := b.stopMaterialized(ctx, mat); err != nil {
					fmt.Printf("  removing %s: %v\n", mat.db, err)
				}
			}
		}
	}
	defer stopMat()
	// The query API, as serve runs it, for the token probes of each step.
	tr, err := b.startTokenReader(ctx, p.name, table, schema.TableName(record.Source{Schema: "public", Table: table}))
	if err != nil {
		return err
	}
	defer tr.close()

	for i, rate := range b.o.rates {
		step := i + 1
		fmt.Printf("steady: offering %d rows/s for %v...\n", rate, b.o.step)
		r, err := b.runStep(ctx, p, tr, script, target, step, rate, lag)
		if err != nil {
			return fmt.Errorf("step at %d rows/s: %w", rate, err)
		}
		b.rep.Steady = append(b.rep.Steady, r)
		fmt.Printf("  committed %.0f rows/s; p50 %.3fs p99 %.3fs max %.3fs; %d of %d visible %.1fs after the step; most rows behind: capture %d, sink %d\n",
			r.AchievedRowsPerSecond, r.P50, r.P99, r.Max, r.Visible, r.Rows, r.DrainSeconds, r.MaxCaptureBacklog, r.MaxSinkBacklog)
		fmt.Printf("  token wait (Layer 1 write → read with its token returned): p50 %.3fs p99 %.3fs max %.3fs over %d reads, %d stale; of it, the server's wait for the watermark: p50 %.3fs p99 %.3fs\n",
			r.TokenWaitP50, r.TokenWaitP99, r.TokenWaitMax, r.TokenReads, r.TokenStale, r.TokenServerP50, r.TokenServerP99)
		if r.TokenFailed > 0 {
			fmt.Printf("  %d token probe(s) failed; the first: %s\n", r.TokenFailed, r.TokenError)
		}
		for _, l := range r.Lag {
			fmt.Printf("  lag (newest row visible, sampled every %v) %s: p50 %.3fs p99 %.3fs max %.3fs over %d samples\n", lagInterval, l.System, l.P50, l.P99, l.Max, l.Samples)
		}
		if len(lag) > 1 {
			fmt.Printf("  MaterializedPostgreSQL: %d of %d visible when walhouse's drain ended\n", r.MaterializedVisible, r.Rows)
		}
		if !r.Drained {
			fmt.Printf("  not drained within %v: the sweep stops here (higher rates would start behind)\n", b.o.drain)
			break
		}
	}
	// The first rows measure walhouse alone (stopMaterialized is idempotent).
	stopMat()
	if b.o.newTables == 0 {
		return nil
	}
	return b.firstRows(ctx, p, script)
}

// steadyMaterialized starts a MaterializedPostgreSQL database on the
// steady table, which holds a first row, and waits until it shows that row.
func (b *bench) steadyMaterialized(ctx context.Context, table string) (*materialized, error) {
	fmt.Printf("steady: starting a MaterializedPostgreSQL database on the same table...\n")
	mat, err := b.startMaterialized(ctx, "steady", []string{table})
	if err == nil {
		err = b.waitFor(ctx, nil, 2*time.Minute, 100*time.Millisecond, func(ctx context.Context) (bool, error) {
			var n uint64
			err := b.ch.QueryRow(ctx, "SELECT count() FROM "+mat.table(table)).Scan(&n)
			return n > 0, err
		})
	}
	if err != nil {
		if mat != nil {
			if serr := b.stopMaterialized(ctx, mat); serr != nil {
				err = errors.Join(err, serr)
			}
		}
		return nil, err
	}
	return mat, nil
}

// runStep offers rate rows/s for one step, waits until its rows are
// visible (at most the drain time) and reads their latencies. lag lists
// the tables the lag sampler asks, walhouse's first.
func (b *bench) runStep(ctx context.Context, p *pipeline, tr *tokenReader, script, target string, step, rate int, lag []lagTarget) (stepResult, error) {
	r := stepResult{OfferedRowsPerSecond: rate}
	bl, err := b.startBacklog(ctx, p.topic(b.base+"_steady"), target, step)
	if err != nil {
		return r, err
	}
	m := b.startMeter(p.processes()...)
	profiles := func() []processProfile { return nil }
	if p.prof != nil {
		profiles = p.prof.start(ctx, b.o.step, fmt.Sprintf("steady-%d", rate))
	}
	db, table := p.name, schema.TableName(record.Source{Schema: "public", Table: b.base + "_steady"})
	inserts0, parts0, err := b.insertCounters(ctx, db, table)
	if err != nil {
		return r, err
	}
	insertsFrom := time.Now()
	// The token probes run while pgbench offers the rate.
	probeCtx, stopProbes := context.WithCancel(ctx)
	probes := make(chan probeRun, 1)
	go func() { probes <- tr.probes(probeCtx, step) }()
	ls := b.startLag(ctx, step, lag)
	out, err := b.pgbench(ctx, m, script, step, rate, b.o.step)
	r.Lag = ls.finish()
	stopProbes()
	pr := <-probes
	r.TokenReads, r.TokenStale, r.TokenWaitP50, r.TokenWaitP99, r.TokenWaitMax = tokenWaits(pr.probes)
	r.TokenServerP50, r.TokenServerP99 = serverWaits(pr.probes)
	if r.TokenFailed = pr.failed; pr.firstErr != nil {
		r.TokenError = pr.firstErr.Error()
	}
	r.Profiles = profiles()
	if err != nil {
		m.finish()
		bl.finish()
		return r, err
	}
	tx, err := processedTransactions(out)
	if err != nil {
		m.finish()
		return r, err
	}
	stepEnd := time.Now()
	r.Rows = tx * txRows
	r.AchievedRowsPerSecond = float64(r.Rows) / b.o.step.Seconds()
	err = b.waitFor(ctx, p, b.o.drain, 100*time.Millisecond, b.countAtLeast(target, step, r.Rows))
	r.Drained = err == nil
	r.DrainSeconds = time.Since(stepEnd).Seconds()
	r.Usage = m.finish()
	r.MaxCaptureBacklog, r.MaxSinkBacklog = bl.finish().max(r.AchievedRowsPerSecond, r.Rows)
	inserts1, parts1, err := b.insertCounters(ctx, db, table)
	if err != nil {
		return r, err
	}
	r.EngineInserts, r.TableParts, r.InsertSeconds = inserts1-inserts0, parts1-parts0, time.Since(insertsFrom).Seconds()
	if perr := p.alive(); perr != nil {
		return r, perr
	}
	q := fmt.Sprintf(`SELECT count(), quantileExact(0.5)(l), quantileExact(0.99)(l), max(l)
		FROM (SELECT dateDiff('microsecond', _commit_ts, _synced_at) / 1e6 AS l FROM %s WHERE step = %d)`, target, step)
	var visible uint64
	if err := b.ch.QueryRow(ctx, q).Scan(&visible, &r.P50, &r.P99, &r.Max); err != nil {
		return r, fmt.Errorf("read the step's latencies: %w", err)
	}
	r.Visible = int64(visible)
	if len(lag) > 1 {
		var n uint64
		if err := b.ch.QueryRow(ctx, fmt.Sprintf("SELECT count() FROM %s WHERE step = %d", lag[1].table, step)).Scan(&n); err != nil {
			return r, fmt.Errorf("count MaterializedPostgreSQL's rows of the step: %w", err)
		}
		r.MaterializedVisible = int64(n)
	}
	return r, nil
}

// insertCounters reads the engine's inserts so far and the parts written
// into db.table so far: its highest block number, which every new part
// takes the next of (a merge takes none).
func (b *bench) insertCounters(ctx context.Context, db, table string) (inserts, parts int64, err error) {
	ev, err := b.engineEvents(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("read the engine's counters: %w", err)
	}
	var block int64
	q := "SELECT toInt64(max(max_block_number)) FROM system.parts WHERE database = {db:String} AND table = {t:String}"
	if err := b.ch.QueryRow(ctx, q, ch.Named("db", db), ch.Named("t", table)).Scan(&block); err != nil {
		return 0, 0, fmt.Errorf("read the parts written into %s.%s: %w", db, table, err)
	}
	return ev["InsertQuery"], block, nil
}

// countAtLeast reports whether target holds at least want rows of step.
func (b *bench) countAtLeast(target string, step int, want int64) func(context.Context) (bool, error) {
	return func(ctx context.Context) (bool, error) {
		var n uint64
		err := b.ch.QueryRow(ctx, fmt.Sprintf("SELECT count() FROM %s WHERE step = %d", target, step)).Scan(&n)
		return err == nil && int64(n) >= want, err
	}
}

// pgbench runs the script at rate rows/s for d, as step, and returns its
// output. m follows its CPU and memory.
func (b *bench) pgbench(ctx context.Context, m *meter, script string, step, rate int, d time.Duration) (string, error) {
	args := []string{
		"-n", "-M", "prepared", "-f", script, "-c", strconv.Itoa(pgbenchClients), "-j", "2",
		"-T", strconv.Itoa(int(d.Seconds())), "-R", strconv.Itoa(max(1, rate/txRows)),
		"-D", "step=" + strconv.Itoa(step), b.o.env.PG,
	}
	proc, err := testenv.StartProcess(ctx, testenv.ProcessRequest{Name: "pgbench", Bin: b.o.pgbench, Args: args})
	if err != nil {
		return "", err
	}
	if m != nil {
		m.add(proc)
	}
	defer proc.Stop(5 * time.Second)
	if err := proc.Wait(ctx); err != nil {
		return "", err
	}
	return proc.Output(), nil
}

var processedRE = regexp.MustCompile(`number of transactions actually processed: (\d+)`)

// processedTransactions reads how many transactions pgbench committed.
func processedTransactions(out string) (int64, error) {
	m := processedRE.FindStringSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("no transaction count in pgbench's output:\n%s", out)
	}
	return strconv.ParseInt(m[1], 10, 64)
}

// firstRows adds tables to the publication one after another while
// pgbench offers the lowest rate, and times each one's first row.
func (b *bench) firstRows(ctx context.Context, p *pipeline, script string) error {
	bctx, stopLoad := context.WithCancel(ctx)
	loadDone := make(chan struct{})
	go func() {
		defer close(loadDone)
		_, _ = b.pgbench(bctx, nil, script, len(b.o.rates)+1, b.o.rates[0], time.Duration(b.o.newTables)*firstRowLimit)
	}()
	defer func() { stopLoad(); <-loadDone }()
	fmt.Printf("first row: adding %d table(s) to the publication while pgbench offers %d rows/s...\n", b.o.newTables, b.o.rates[0])
	time.Sleep(2 * time.Second) // let the load settle
	for i := 1; i <= b.o.newTables; i++ {
		r, err := b.firstRow(ctx, p, fmt.Sprintf("%s_new%d", b.base, i))
		if err != nil {
			return err
		}
		b.rep.FirstRows = append(b.rep.FirstRows, r)
		fmt.Printf("  %s: visible %.2fs after its commit (_synced_at - _commit_ts %.2fs)\n", r.Table, r.VisibleAfter, r.CommitToSynced)
	}
	return nil
}

// firstRow creates table, adds it to the pipeline's publication, commits
// one row and waits until ClickHouse returns it.
func (b *bench) firstRow(ctx context.Context, p *pipeline, table string) (firstRow, error) {
	r := firstRow{Table: table}
	t := quotePG(table)
	if _, err := b.pg.Exec(ctx, "CREATE TABLE "+t+" (tenant_id text NOT NULL, id bigint NOT NULL, note text, PRIMARY KEY (tenant_id, id))"); err != nil {
		return r, fmt.Errorf("create table %s: %w", table, err)
	}
	b.undo.Push("drop table "+table, func(ctx context.Context) error {
		_, err := b.pg.Exec(ctx, "DROP TABLE IF EXISTS "+t)
		return err
	})
	if _, err := b.pg.Exec(ctx, "ALTER PUBLICATION "+quoteIdentPG(p.name)+" ADD TABLE "+t); err != nil {
		return r, fmt.Errorf("add %s to publication %s: %w", table, p.name, err)
	}
	if _, err := b.pg.Exec(ctx, "INSERT INTO "+t+" VALUES ('tenant_1', 1, 'first row')"); err != nil {
		return r, err
	}
	committed := time.Now()
	target := p.clickhouseTable(table)
	err := b.waitFor(ctx, p, firstRowLimit, 50*time.Millisecond, func(ctx context.Context) (bool, error) {
		err := b.ch.QueryRow(ctx, "SELECT dateDiff('microsecond', _commit_ts, _synced_at) / 1e6 FROM "+target+" LIMIT 1").Scan(&r.CommitToSynced)
		return err == nil, err
	})
	r.VisibleAfter = time.Since(committed).Seconds()
	if err != nil {
		return r, fmt.Errorf("the first row of %s: %w", table, err)
	}
	return r, nil
}

// quoteIdentPG quotes a PostgreSQL identifier.
func quoteIdentPG(name string) string { return pgx.Identifier{name}.Sanitize() }
