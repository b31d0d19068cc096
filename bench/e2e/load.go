package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walhouse/walhouse/schema"
)

// column is one column of a benchmark table: its PostgreSQL type and the
// SQL expression that fills it from g, the row number.
type column struct{ name, typ, expr string }

// shape is a benchmark table: its columns, the first two being the
// primary key (tenant_id, id).
type shape struct {
	name    string
	columns []column
}

// narrowShape is a 6-column table of orders over 100 tenants (the table
// of the measurements and of bench/capture).
func narrowShape() shape {
	return shape{name: "narrow", columns: []column{
		{"tenant_id", "text NOT NULL", "'tenant_' || (g % 100)"},
		{"id", "bigint NOT NULL", "g"},
		{"amount", "numeric(12,2) NOT NULL", "(g % 1000000) / 100.0"},
		{"note", "text", "'note ' || md5(g::text)"},
		{"created_at", "timestamptz NOT NULL", "timestamptz '2024-01-01 00:00:00+00' + g * interval '1 second'"},
		{"attrs", "jsonb", "jsonb_build_object('g', g, 'tag', 'k' || (g % 7), 'ok', g % 2 = 0)"},
	}}
}

// wideShape is a 30-column table of about 1 KB a row: texts of several
// lengths, integers, numerics, timestamps, booleans, a date, a uuid and
// jsonb, as a wide business table would have.
func wideShape() shape {
	cols := []column{
		{"tenant_id", "text NOT NULL", "'tenant_' || (g % 100)"},
		{"id", "bigint NOT NULL", "g"},
	}
	for i := 1; i <= 7; i++ { // 7 × 33 bytes
		cols = append(cols, column{fmt.Sprintf("code_%d", i), "text", fmt.Sprintf("md5((g + %d)::text)", i)})
	}
	for i := 1; i <= 4; i++ { // 4 × 97 bytes
		cols = append(cols, column{fmt.Sprintf("label_%d", i), "text", fmt.Sprintf("repeat(md5((g * %d)::text), 3)", i+1)})
	}
	for i := 1; i <= 4; i++ {
		cols = append(cols, column{fmt.Sprintf("count_%d", i), "bigint", fmt.Sprintf("g * %d", i+7)})
	}
	for i := 1; i <= 4; i++ {
		cols = append(cols, column{fmt.Sprintf("price_%d", i), "numeric(14,4)", fmt.Sprintf("(g %% 100000) / %d.0", i+2)})
	}
	for i := 1; i <= 3; i++ {
		cols = append(cols, column{fmt.Sprintf("at_%d", i), "timestamptz", fmt.Sprintf("timestamptz '2024-01-01 00:00:00+00' + (g + %d) * interval '1 minute'", i)})
	}
	cols = append(cols,
		column{"active", "boolean", "g % 2 = 0"},
		column{"archived", "boolean", "g % 5 = 0"},
		column{"day", "date", "date '2024-01-01' + (g % 365)::int"},
		column{"ref", "uuid", "md5(g::text)::uuid"},
		column{"description", "text", "'row ' || g || ' ' || repeat(md5(g::text), 4)"},
		column{"props", "jsonb", "jsonb_build_object('g', g, 'tag', 'k' || (g % 7), 'ok', g % 2 = 0, 'path', md5(g::text))"},
	)
	return shape{name: "wide", columns: cols}
}

// loadRun is one way of loading the table: walhouse or the engine's pull.
type loadRun struct {
	Name          string  `json:"name"`
	Seconds       float64 `json:"seconds"`
	RowsPerSecond float64 `json:"rows_per_second"`
	// FirstRowSeconds is when ClickHouse first held a row of the table
	// (walhouse only): the fixed cost of starting, before the throughput.
	FirstRowSeconds float64 `json:"first_row_seconds,omitempty"`
	Usage           []usage `json:"usage"`
	// Profiles are capture's and the sink's CPU over the load, by stage
	// (walhouse with -profile).
	Profiles []processProfile `json:"profiles,omitempty"`
	// Engine is the engine process's side of the load (engine.go).
	Engine *engineProfile `json:"engine,omitempty"`
}

// loadResult is the initial load of one table.
type loadResult struct {
	Table       string  `json:"table"`
	Columns     int     `json:"columns"`
	RowBytes    float64 `json:"avg_row_bytes"`
	Rows        int64   `json:"rows"`
	FillSeconds float64 `json:"fill_seconds"`
	// Runs are walhouse first, then the engine's pull, then
	// MaterializedPostgreSQL (when it ran), then walhouse without Layer 2.
	Runs []loadRun `json:"runs"`
	// Ratio is walhouse's rows/s over the engine's pull.
	Ratio float64 `json:"ratio_walhouse_to_engine"`
	// MaterializedRatio and MaterializedCPURatio are walhouse's rows/s and
	// CPU seconds (every process) over MaterializedPostgreSQL's (0 when it
	// did not run); MaterializedError says why it did not.
	MaterializedRatio    float64 `json:"ratio_walhouse_to_materialized,omitempty"`
	MaterializedCPURatio float64 `json:"cpu_ratio_walhouse_to_materialized,omitempty"`
	MaterializedError    string  `json:"materialized_error,omitempty"`
}

// run returns the run named name.
func (r loadResult) run(name string) (loadRun, bool) {
	for _, run := range r.Runs {
		if run.Name == name {
			return run, true
		}
	}
	return loadRun{}, false
}

// engineRowsPerSecond returns the engine's pull's rows/s, what every run
// is compared with (0 when absent).
func (r loadResult) engineRowsPerSecond() float64 {
	eng, _ := r.run(runEngine)
	return eng.RowsPerSecond
}

// Names of the load runs.
const (
	runWalhouse    = "walhouse (Layer 2 on)"
	runEngine      = "ClickHouse postgresql() pull"
	runNoLayer2    = "walhouse (Layer 2 off)"
	loadLimit      = 15 * time.Minute
	loadPollPeriod = 200 * time.Millisecond
)

// load fills a fresh table of shape s with rows rows and loads it with
// walhouse and with the engine's own pull.
func (b *bench) load(ctx context.Context, s shape, rows int, layer2Off bool) (loadResult, error) {
	table := b.base + "_" + s.name
	res := loadResult{Table: s.name, Columns: len(s.columns), Rows: int64(rows)}
	fmt.Printf("\n%s table (%d columns): filling %d rows...\n", s.name, len(s.columns), rows)
	took, err := b.createAndFill(ctx, table, s, rows)
	if err != nil {
		return res, err
	}
	res.FillSeconds = took.Seconds()
	q := "SELECT avg(pg_column_size(t.*)) FROM (SELECT * FROM " + quotePG(table) + " LIMIT 10000) t"
	if err := b.pg.QueryRow(ctx, q).Scan(&res.RowBytes); err != nil {
		return res, fmt.Errorf("measure the row size of %s: %w", table, err)
	}

	fmt.Printf("filled in %.1fs (%.0f bytes a row); loading with walhouse...\n", took.Seconds(), res.RowBytes)
	wh, p, err := b.loadWithWalhouse(ctx, s.name, table, int64(rows), true)
	if err != nil {
		return res, err
	}
	fmt.Printf("loading with the engine's postgresql() pull...\n")
	eng, err := b.loadWithEngine(ctx, p, table, s, int64(rows))
	if err != nil {
		return res, err
	}
	res.Runs = append(res.Runs, wh, eng)
	res.Ratio = wh.RowsPerSecond / eng.RowsPerSecond
	if b.o.materialized {
		fmt.Printf("loading with ClickHouse's MaterializedPostgreSQL...\n")
		// A copy much slower than the pull's has failed (the engine logs
		// why, and retries); 10× the pull and at least a minute.
		limit := max(time.Minute, 10*time.Duration(eng.Seconds*float64(time.Second)))
		mat, err := b.loadWithMaterialized(ctx, s.name, table, int64(rows), limit)
		if err != nil {
			res.MaterializedError = err.Error()
			fmt.Printf("  MaterializedPostgreSQL did not load the table, going on without it: %v\n", err)
		} else {
			res.Runs = append(res.Runs, mat)
			res.MaterializedRatio = wh.RowsPerSecond / mat.RowsPerSecond
			if c := totalCPU(mat.Usage); c > 0 {
				res.MaterializedCPURatio = totalCPU(wh.Usage) / c
			}
		}
	}
	if layer2Off {
		fmt.Printf("loading with walhouse, Layer 2 off...\n")
		off, _, err := b.loadWithWalhouse(ctx, s.name+"_l2off", table, int64(rows), false)
		if err != nil {
			return res, err
		}
		res.Runs = append(res.Runs, off)
	}
	return res, nil
}

// createAndFill creates table with shape s, fills it with rows rows in
// transactions of 100,000 and vacuums it, so that no reader pays for hint
// bits or statistics.
func (b *bench) createAndFill(ctx context.Context, table string, s shape, rows int) (time.Duration, error) {
	defs := make([]string, len(s.columns))
	names := make([]string, len(s.columns))
	exprs := make([]string, len(s.columns))
	for i, c := range s.columns {
		defs[i] = pgx.Identifier{c.name}.Sanitize() + " " + c.typ
		names[i] = pgx.Identifier{c.name}.Sanitize()
		exprs[i] = c.expr
	}
	t := quotePG(table)
	if _, err := b.pg.Exec(ctx, "CREATE TABLE "+t+" ("+strings.Join(defs, ", ")+", PRIMARY KEY (tenant_id, id))"); err != nil {
		return 0, fmt.Errorf("create table %s: %w", table, err)
	}
	b.undo.Push("drop table "+table, func(ctx context.Context) error {
		_, err := b.pg.Exec(ctx, "DROP TABLE IF EXISTS "+t)
		return err
	})
	insert := "INSERT INTO " + t + " (" + strings.Join(names, ", ") + ") SELECT " + strings.Join(exprs, ", ") +
		" FROM generate_series($1::bigint, $2::bigint) g"
	began := time.Now()
	const chunk = 100_000
	for from := 1; from <= rows; from += chunk {
		if _, err := b.pg.Exec(ctx, insert, from, min(from+chunk-1, rows)); err != nil {
			return 0, fmt.Errorf("fill %s: %w", table, err)
		}
	}
	took := time.Since(began)
	if _, err := b.pg.Exec(ctx, "VACUUM (ANALYZE) "+t); err != nil {
		return 0, fmt.Errorf("vacuum %s: %w", table, err)
	}
	return took, nil
}

// loadWithWalhouse starts a fresh pipeline on table and times it from the
// start of both processes until ClickHouse holds every row. It returns the
// pipeline, stopped, for its names.
func (b *bench) loadWithWalhouse(ctx context.Context, role, table string, rows int64, layer2 bool) (loadRun, *pipeline, error) {
	run := loadRun{Name: runWalhouse}
	if !layer2 {
		run.Name = runNoLayer2
	}
	m := b.startMeter()
	eng := b.startEngineProfile(ctx, "load-"+role)
	p, err := b.startPipeline(ctx, pipelineRequest{role: role, tables: []string{"public." + table}, layer2: layer2})
	if err != nil {
		m.finish()
		eng.finish(ctx)
		return run, nil, err
	}
	defer p.stop(b.o.verbose)
	m.add(p.processes()...)
	profiles := func() []processProfile { return nil }
	if p.prof != nil {
		profiles = p.prof.startLoop(ctx, "load-"+role)
	}
	target := p.clickhouseTable(table)
	var loaded uint64
	err = b.waitFor(ctx, p, loadLimit, loadPollPeriod, func(ctx context.Context) (bool, error) {
		err := b.ch.QueryRow(ctx, "SELECT count() FROM "+target).Scan(&loaded)
		if loaded > 0 && run.FirstRowSeconds == 0 {
			run.FirstRowSeconds = time.Since(p.capture.Started()).Seconds()
		}
		return loaded >= uint64(rows), err
	})
	took := time.Since(p.capture.Started())
	run.Usage = m.finish()
	run.Engine = eng.finish(ctx)
	run.Profiles = profiles()
	if err != nil {
		return run, p, fmt.Errorf("waiting for %d rows in %s (%d there): %w", rows, target, loaded, err)
	}
	run.Seconds, run.RowsPerSecond = took.Seconds(), float64(rows)/took.Seconds()
	return run, p, nil
}

// loadWithEngine times ClickHouse pulling table from PostgreSQL itself into
// a table of the same shape as walhouse's (CREATE TABLE … AS), through the
// same HTTP front the sink uses.
func (b *bench) loadWithEngine(ctx context.Context, p *pipeline, table string, s shape, rows int64) (loadRun, error) {
	run := loadRun{Name: runEngine}
	cfg, err := pgx.ParseConfig(b.o.env.PG)
	if err != nil {
		return run, fmt.Errorf("parse WALHOUSE_PG_URL: %w", err)
	}
	target := p.clickhouseTable(table)
	copyTable := schema.QuoteIdent(p.name) + "." + schema.QuoteIdent("engine_pull")
	if err := b.ch.Exec(ctx, "CREATE TABLE "+copyTable+" AS "+target); err != nil {
		return run, fmt.Errorf("create %s like %s: %w", copyTable, target, err)
	}
	cols := make([]string, len(s.columns))
	for i, c := range s.columns {
		cols[i] = schema.QuoteIdent(c.name)
	}
	list := strings.Join(cols, ", ")
	insert := fmt.Sprintf("INSERT INTO %s (%s) SELECT %s FROM postgresql(%s, %s, %s, %s, %s)", copyTable, list, list,
		chString(fmt.Sprintf("%s:%d", cfg.Host, cfg.Port)), chString(cfg.Database), chString(table), chString(cfg.User), chString(cfg.Password))
	m := b.startMeter()
	eng := b.startEngineProfile(ctx, "load-"+s.name+"-pull")
	began := time.Now()
	err = b.ch.Exec(ctx, insert)
	took := time.Since(began)
	run.Usage = m.finish()
	run.Engine = eng.finish(ctx)
	if err != nil {
		return run, fmt.Errorf("the engine's pull of %s (does this ClickHouse have the postgresql table function?): %w", table, err)
	}
	var n uint64
	if err := b.ch.QueryRow(ctx, "SELECT count() FROM "+copyTable).Scan(&n); err != nil || n != uint64(rows) {
		return run, fmt.Errorf("the engine's pull holds %d rows, want %d (%v)", n, rows, err)
	}
	run.Seconds, run.RowsPerSecond = took.Seconds(), float64(rows)/took.Seconds()
	return run, nil
}

// quotePG quotes a table of schema public for PostgreSQL.
func quotePG(table string) string { return pgx.Identifier{"public", table}.Sanitize() }

// chString quotes s as a ClickHouse string literal.
func chString(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}

// print writes the load's table: each run's rows/s and its usage.
func (r loadResult) print(w io.Writer) {
	fmt.Fprintf(w, "\ninitial load, %s table: %d rows, %d columns, %.0f bytes a row in PostgreSQL\n", r.Table, r.Rows, r.Columns, r.RowBytes)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "run\tseconds\trows/s\tvs pull\tfirst row s\tCPU s: total\t"+usageHeader())
	for _, run := range r.Runs {
		first := "-"
		if run.FirstRowSeconds > 0 {
			first = fmt.Sprintf("%.1f", run.FirstRowSeconds)
		}
		fmt.Fprintf(tw, "%s\t%.2f\t%.0f\t%.3f\t%s\t%.1f\t%s\n", run.Name, run.Seconds, run.RowsPerSecond, run.RowsPerSecond/r.engineRowsPerSecond(), first, totalCPU(run.Usage), usageCPU(run.Usage))
	}
	tw.Flush()
	for _, run := range r.Runs {
		run.Engine.print(w, run.Name)
	}
	wh, _ := r.run(runWalhouse)
	eng, _ := r.run(runEngine)
	mat, ok := r.run(runMaterialized)
	if !ok {
		if r.MaterializedError != "" {
			fmt.Fprintf(w, "MaterializedPostgreSQL: none (%s)\n", r.MaterializedError)
		}
		return
	}
	fmt.Fprintf(w, "walhouse / MaterializedPostgreSQL / pull: rows/s %.0f / %.0f / %.0f, CPU s %.1f / %.1f / %.1f; walhouse is %.2f× MaterializedPostgreSQL's rows/s at %.2f× its CPU\n",
		wh.RowsPerSecond, mat.RowsPerSecond, eng.RowsPerSecond, totalCPU(wh.Usage), totalCPU(mat.Usage), totalCPU(eng.Usage), r.MaterializedRatio, r.MaterializedCPURatio)
}
