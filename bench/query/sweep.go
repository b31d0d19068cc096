package main

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"

	"github.com/walhouse/walhouse/query"
	"github.com/walhouse/walhouse/record"
	"github.com/walhouse/walhouse/schema"
)

// layout is one shape of the dashboard's table for the sweep: the DDL
// options the sink would create it with and the versions it holds.
type layout struct {
	name string
	opts schema.Options
	// shape is the table's schema.Layout (zero: the default shape).
	shape schema.Layout
	// old and deleted are the older versions and the tombstones (deletes of
	// existing rows), as fractions of -sweep-rows.
	old, deleted float64
	// merged runs OPTIMIZE … FINAL after the load: every key has one
	// version left, as after a long quiet period of background merges.
	merged bool
}

// tuning is query settings added to the API's own for one sweep row.
type tuning struct {
	name     string
	settings map[string]any
	// unsafe marks a setting measured only: it can give wrong results.
	unsafe bool
}

// sweepRow is one (layout, tuning) measured FINAL and plain.
type sweepRow struct {
	table  string
	layout layout
	tune   tuning
}

// sweepLayouts are the table shapes the sweep compares, each against the
// first (the sink's default DDL) with one thing changed.
func (b *bench) sweepLayouts() []layout {
	o := b.o.oldVersions
	return []layout{
		{name: "default DDL", old: o},
		{name: "8 tenant partitions", opts: schema.Options{TenantPartitions: 8}, old: o},
		{name: "index_granularity 8192", opts: schema.Options{IndexGranularity: 8192}, old: o},
		{name: "no older versions", old: 0},
		{name: "50% older versions", old: 0.5},
		{name: "10% tombstones", old: o, deleted: 0.10},
		{name: "merged (OPTIMIZE FINAL)", old: o, merged: true},
		{name: "8 tenant partitions, merged", opts: schema.Options{TenantPartitions: 8}, old: o, merged: true},
		{name: "monthly by created_at", shape: monthly, old: o},
	}
}

// sweepTunings are the FINAL query settings the sweep compares on the
// default DDL and on the monthly layout, one at a time.
var sweepTunings = []tuning{
	{name: "API settings"},
	{name: "max_final_threads=1", settings: map[string]any{"max_final_threads": 1}},
	{name: "split_parts_ranges_into_intersecting_and_non_intersecting_final=0", settings: map[string]any{"split_parts_ranges_into_intersecting_and_non_intersecting_final": 0}},
	{name: "split_intersecting_parts_ranges_into_layers_final=0", settings: map[string]any{"split_intersecting_parts_ranges_into_layers_final": 0}},
	{name: "enable_vertical_final=0", settings: map[string]any{"enable_vertical_final": 0}},
	{name: "query_plan_optimize_lazy_final=1", settings: map[string]any{"query_plan_optimize_lazy_final": 1}},
	{name: "optimize_move_to_prewhere_if_final=1", settings: map[string]any{"optimize_move_to_prewhere_if_final": 1}, unsafe: true},
	{name: "layers_final=0, max_final_threads=1", settings: map[string]any{"split_intersecting_parts_ranges_into_layers_final": 0, "max_final_threads": 1}},
	// The first row again: how far the conditions drifted during the rows
	// above (the machine's load, merges of other tables).
	{name: "API settings, again"},
}

// partitionTunings are compared on the partitioned layout: whether FINAL
// merges across partitions (ClickHouse decides by itself when the
// partition key uses only sorting-key columns).
var partitionTunings = []tuning{
	{name: "API settings"},
	{name: "merge across partitions", settings: map[string]any{"do_not_merge_across_partitions_select_final": 0, "enable_automatic_decision_for_merging_across_partitions_for_final": 0}},
}

// sweep loads each layout into a table of its own, then measures the
// dashboard's two statements, as the API builds them, FINAL and plain,
// with each tuning. It runs the SQL directly, so that query settings can
// vary; the API's own overhead is in the main figures.
func (b *bench) sweep(ctx context.Context) error {
	rows := b.o.sweepRows
	fmt.Printf("\nsweep: %d rows per table, %d dashboard loads per row and variant\n", rows, b.o.sweepRequests)
	cat := query.NewCatalog(b.conn, b.database, time.Hour)
	var plan []sweepRow
	for i, l := range b.sweepLayouts() {
		if !b.wanted(l) {
			continue
		}
		name := fmt.Sprintf("%s_l%d", tableName, i)
		start := time.Now()
		if err := b.fill(ctx, name, rows, l); err != nil {
			return fmt.Errorf("layout %q: %w", l.name, err)
		}
		fmt.Printf("  %-30s loaded in %v\n", l.name, time.Since(start).Round(time.Millisecond))
		ts := []tuning{{name: "API settings"}}
		switch {
		case i == 0 || l.shape.PartitionBy != "":
			ts = sweepTunings
		case l.opts.TenantPartitions > 0 && !l.merged:
			ts = partitionTunings
		}
		for _, t := range ts {
			plan = append(plan, sweepRow{table: name, layout: l, tune: t})
		}
	}
	fmt.Printf("\n%-30s %-68s %9s %9s %9s %9s %6s %6s %16s\n", "layout", "FINAL settings", "final p50", "p99", "plain p50", "p99", "p50 ×", "p99 ×", "rows/marks")
	for _, r := range plan {
		t, err := cat.Table(ctx, r.table)
		if err != nil {
			return fmt.Errorf("read back table %s: %w", r.table, err)
		}
		res, err := b.measureDirect(ctx, t, r.tune)
		if err != nil {
			return fmt.Errorf("%s, %s: %w", r.layout.name, r.tune.name, err)
		}
		name := r.tune.name
		if r.tune.unsafe {
			name += " (unsafe)"
		}
		f, p := statsOf(res.final), statsOf(res.plain)
		fmt.Printf("%-30s %-68s %9s %9s %9s %9s %6s %6s %16s\n", r.layout.name, name, ms(f.p50), ms(f.p99), ms(p.p50), ms(p.p99),
			ratio(f.p50, p.p50), ratio(f.p99, p.p99), res.read)
	}
	return nil
}

// wanted reports whether -layouts selects l: every layout when empty,
// else those whose name contains one of its comma-separated words.
func (b *bench) wanted(l layout) bool {
	if b.o.layouts == "" {
		return true
	}
	for _, w := range strings.Split(b.o.layouts, ",") {
		if w != "" && strings.Contains(l.name, w) {
			return true
		}
	}
	return false
}

// fill creates table name with l's options and loads rows current rows
// plus l's older versions and tombstones, merges stopped (or merged once,
// with l.merged).
func (b *bench) fill(ctx context.Context, name string, rows int, l layout) error {
	l.opts.Database = b.database
	if l.shape.PartitionBy != "" || len(l.shape.OrderBy) > 0 {
		l.opts.Layouts = map[string]schema.Layout{"public." + name: l.shape}
	}
	t, err := ordersTableNamed(name, l.opts)
	if err != nil {
		return err
	}
	if err := b.conn.Exec(ctx, t.CreateDDL(0x1000000)); err != nil {
		return fmt.Errorf("create table %s: %w", t.QualifiedName(), err)
	}
	if err := b.conn.Exec(ctx, "SYSTEM STOP MERGES "+t.QualifiedName()); err != nil {
		return fmt.Errorf("stop merges of %s: %w", t.QualifiedName(), err)
	}
	if err := b.insertVersions(ctx, t, rows, int(float64(rows)*l.old), int(float64(rows)*l.deleted)); err != nil {
		return err
	}
	if l.merged {
		if err := b.conn.Exec(ctx, "SYSTEM START MERGES "+t.QualifiedName()); err != nil {
			return fmt.Errorf("start merges of %s: %w", t.QualifiedName(), err)
		}
		if err := b.conn.Exec(ctx, "OPTIMIZE TABLE "+t.QualifiedName()+" FINAL"); err != nil {
			return fmt.Errorf("merge %s: %w", t.QualifiedName(), err)
		}
	}
	return nil
}

// directResult is one sweep row's latencies and what one FINAL and one
// plain dashboard read from storage.
type directResult struct {
	final, plain []time.Duration
	read         string // rows/marks selected, FINAL or not
}

// measureDirect loads the dashboard -sweep-requests times per variant, FINAL and plain
// alternating, each with tu's settings added to the API's.
func (b *bench) measureDirect(ctx context.Context, t *query.Table, tu tuning) (directResult, error) {
	var res directResult
	m := &measurer{now: b.now, tenants: b.o.tenants}
	build := func(tenantIdx int, c query.Consistency) ([]query.Statement, error) {
		var sts []query.Statement
		for _, r := range []request{summary, listing} {
			st, err := query.BuildSelect(query.SelectInput{Table: t, Tenant: tenant(tenantIdx), Req: m.request(r, variant{consistency: c})})
			if err != nil {
				return nil, err
			}
			maps.Copy(st.Settings, tu.settings)
			sts = append(sts, st)
		}
		return sts, nil
	}
	run := func(sts []query.Statement) (time.Duration, error) {
		start := time.Now()
		for _, st := range sts {
			if err := b.drain(ctx, st); err != nil {
				return 0, err
			}
		}
		return time.Since(start), nil
	}
	sts, err := build(0, query.Final)
	if err != nil {
		return res, err
	}
	if res.read, err = b.readCost(ctx, sts); err != nil {
		return res, err
	}
	for i := range b.o.sweepWarmup + b.o.sweepRequests {
		order := []query.Consistency{query.Final, query.Approximate}
		if i%2 == 1 {
			order[0], order[1] = order[1], order[0]
		}
		for _, c := range order {
			sts, err := build(i%b.o.tenants, c)
			if err != nil {
				return res, err
			}
			d, err := run(sts)
			if err != nil {
				return res, fmt.Errorf("%s: %w", c, err)
			}
			if i < b.o.sweepWarmup {
				continue
			}
			if c == query.Final {
				res.final = append(res.final, d)
			} else {
				res.plain = append(res.plain, d)
			}
		}
	}
	return res, nil
}

// drain runs st and reads every row it returns.
func (b *bench) drain(ctx context.Context, st query.Statement) error {
	ctx = ch.Context(ctx, ch.WithParameters(ch.Parameters(st.Params)), ch.WithSettings(ch.Settings(st.Settings)))
	rs, err := b.conn.Query(ctx, st.SQL)
	if err != nil {
		return err
	}
	defer rs.Close()
	for rs.Next() {
	}
	return rs.Err()
}

// readCost sums the rows and marks that EXPLAIN ESTIMATE says sts
// select after the primary key and partition pruning: FINAL merges, and
// the plain read filters, every one of them. (The embedded engine reports
// no rows or bytes read per query.)
func (b *bench) readCost(ctx context.Context, sts []query.Statement) (string, error) {
	var rows, marks uint64
	for _, st := range sts {
		qctx := ch.Context(ctx, ch.WithParameters(ch.Parameters(st.Params)), ch.WithSettings(ch.Settings(st.Settings)))
		rs, err := b.conn.Query(qctx, "EXPLAIN ESTIMATE "+st.SQL)
		if err != nil {
			return "", fmt.Errorf("EXPLAIN ESTIMATE: %w", err)
		}
		for rs.Next() {
			var db, table string
			var parts, r, m uint64
			if err := rs.Scan(&db, &table, &parts, &r, &m); err != nil {
				rs.Close()
				return "", fmt.Errorf("EXPLAIN ESTIMATE: %w", err)
			}
			rows += r
			marks += m
		}
		rs.Close()
		if err := rs.Err(); err != nil {
			return "", fmt.Errorf("EXPLAIN ESTIMATE: %w", err)
		}
	}
	return fmt.Sprintf("%d/%d", rows, marks), nil
}

// ordersTableNamed is the orders table under another name, with opts.
func ordersTableNamed(name string, opts schema.Options) (*schema.Table, error) {
	src := record.Source{ID: "bench", Schema: "public", Table: name}
	return schema.NewTable(src, "tenant_id", ordersColumns(), opts)
}
