package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/walhouse/walhouse/record"
	"github.com/walhouse/walhouse/schema"
)

// apiLayout is one shape of the dashboard's table that the main run
// measures through the query API, loaded with the same rows as every
// other: the layout dimension of the benchmark (-compare).
type apiLayout struct {
	name  string // as -compare names it
	table string // the ClickHouse table (and source table) name
	about string // printed with the figures
	// layout is the table's layout (schema.Layout, the configuration
	// file's layout key); zero: walhouse's default shape.
	layout schema.Layout
	// tenantPartitions is schema.Options.TenantPartitions.
	tenantPartitions int
	// mergeClosed merges every partition but the current month's into one
	// part after the load (OPTIMIZE … PARTITION … FINAL), as background
	// merges or min_age_to_force_merge_seconds leave a month nobody writes
	// to any more; the current month stays unmerged. Not the worst case:
	// printed as such.
	mergeClosed bool
}

// monthly is the layout docs/shaping-tables.md gives for a per-tenant
// time series: the dashboard's time range is a prefix scan within the
// tenant, and each month is a partition of its own.
var monthly = schema.Layout{OrderBy: []string{"tenant_id", "created_at", "id"}, PartitionBy: "toYYYYMM(created_at)"}

// apiLayouts are the layouts -compare can pick, the default first.
var apiLayouts = []apiLayout{
	{name: "default", table: tableName, about: "the sink's default: ORDER BY (tenant_id, id), no partitions"},
	{name: "monthly", table: tableName + "_monthly", about: "ORDER BY (tenant_id, created_at, id), PARTITION BY toYYYYMM(created_at); every part unmerged", layout: monthly},
	{name: "monthly-closed-merged", table: tableName + "_monthly_closed", about: "monthly, past months merged to one part each, the current month unmerged (not the worst case: what merges leave)", layout: monthly, mergeClosed: true},
	{name: "tenant8", table: tableName + "_tenant8", about: "ORDER BY (tenant_id, id), PARTITION BY cityHash64(tenant_id) % 8; every part unmerged", tenantPartitions: 8},
}

// compared returns the layouts -compare names, in its order.
func (o options) compared() ([]apiLayout, error) {
	var out []apiLayout
	for _, w := range strings.Split(o.compare, ",") {
		w = strings.TrimSpace(w)
		found := false
		for _, l := range apiLayouts {
			if l.name == w {
				out, found = append(out, l), true
				break
			}
		}
		if !found {
			names := make([]string, len(apiLayouts))
			for i, l := range apiLayouts {
				names[i] = l.name
			}
			return nil, fmt.Errorf("-compare: no layout %q; choose from %s", w, strings.Join(names, ", "))
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("-compare is empty; give at least one of default, monthly, …")
	}
	return out, nil
}

// schemaTable is l's table as the sink would derive it.
func (l apiLayout) schemaTable(database string) (*schema.Table, error) {
	src := record.Source{ID: "bench", Schema: "public", Table: l.table}
	opts := schema.Options{Database: database, TenantPartitions: l.tenantPartitions}
	if len(l.layout.OrderBy) > 0 || l.layout.PartitionBy != "" {
		opts.Layouts = map[string]schema.Layout{"public." + l.table: l.layout}
	}
	return schema.NewTable(src, "tenant_id", ordersColumns(), opts)
}

// mergeClosedPartitions merges every partition of t but the one of
// b.now's month into one part; the current month's parts stay as loaded.
func (b *bench) mergeClosedPartitions(ctx context.Context, t *schema.Table) error {
	rs, err := b.conn.Query(chParams(ctx, map[string]string{"db": b.database, "table": t.Name, "current": b.now.Format("200601")}),
		"SELECT DISTINCT partition_id FROM system.parts WHERE database = {db:String} AND table = {table:String} AND active AND partition_id != {current:String} ORDER BY partition_id")
	if err != nil {
		return fmt.Errorf("list the partitions of %s: %w", t.QualifiedName(), err)
	}
	var ids []string
	for rs.Next() {
		var id string
		if err := rs.Scan(&id); err != nil {
			rs.Close()
			return fmt.Errorf("list the partitions of %s: %w", t.QualifiedName(), err)
		}
		ids = append(ids, id)
	}
	rs.Close()
	if err := rs.Err(); err != nil {
		return fmt.Errorf("list the partitions of %s: %w", t.QualifiedName(), err)
	}
	// OPTIMIZE needs merges allowed: the current month is detached
	// meanwhile, so that no background merge touches its parts.
	current := schema.QuoteString(b.now.Format("200601"))
	if err := b.conn.Exec(ctx, "ALTER TABLE "+t.QualifiedName()+" DETACH PARTITION ID "+current); err != nil {
		return fmt.Errorf("detach the current month of %s: %w", t.QualifiedName(), err)
	}
	if err := b.conn.Exec(ctx, "SYSTEM START MERGES "+t.QualifiedName()); err != nil {
		return fmt.Errorf("start merges of %s: %w", t.QualifiedName(), err)
	}
	for _, id := range ids {
		if err := b.conn.Exec(ctx, fmt.Sprintf("OPTIMIZE TABLE %s PARTITION ID %s FINAL", t.QualifiedName(), schema.QuoteString(id))); err != nil {
			return fmt.Errorf("merge partition %s of %s: %w", id, t.QualifiedName(), err)
		}
	}
	if err := b.conn.Exec(ctx, "SYSTEM STOP MERGES "+t.QualifiedName()); err != nil {
		return fmt.Errorf("stop merges of %s: %w", t.QualifiedName(), err)
	}
	if err := b.conn.Exec(ctx, "ALTER TABLE "+t.QualifiedName()+" ATTACH PARTITION ID "+current); err != nil {
		return fmt.Errorf("attach the current month of %s: %w", t.QualifiedName(), err)
	}
	return nil
}

// partsOf counts t's active parts and the partitions they are in.
func (b *bench) partsOf(ctx context.Context, t *schema.Table) (total, partitions uint64, err error) {
	q := "SELECT count(), uniqExact(partition_id) FROM system.parts WHERE database = {db:String} AND table = {table:String} AND active"
	err = b.conn.QueryRow(chParams(ctx, map[string]string{"db": b.database, "table": t.Name}), q).Scan(&total, &partitions)
	if err != nil {
		return 0, 0, fmt.Errorf("count the parts of %s: %w", t.QualifiedName(), err)
	}
	return total, partitions, nil
}

// loadedIn formats a load's duration.
func loadedIn(d time.Duration) string { return d.Round(100 * time.Millisecond).String() }
