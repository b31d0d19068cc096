package clickhouse

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"

	ch "github.com/ClickHouse/clickhouse-go/v2"

	"github.com/walhouse/walhouse/record"
	"github.com/walhouse/walhouse/schema"
)

// filled holds values recovered for unchanged TOAST columns: record index →
// column index → value in the client's Go type.
type filled map[int]map[int]any

// fillUnchanged recovers the values PostgreSQL did not send for unchanged
// TOASTed columns (pgoutput's 'u' marker). An unchanged value is the row's
// previous value: taken from an earlier record of the same row in this batch
// or, failing that, from the row as ClickHouse has it now (FINAL). Never
// writing NULL or a placeholder over it is the point; REPLICA IDENTITY FULL
// is not needed.
func (w *Writer) fillUnchanged(ctx context.Context, tg *target, recs []*record.Record) (filled, error) {
	if !slices.ContainsFunc(recs, hasUnchanged) {
		return nil, nil // the common case (copies, inserts): no row keys to track
	}
	t := tg.table
	var out filled
	last := map[string]int{} // row key → index of its latest record so far
	live := map[string]int{} // row key → index of its latest insert or update so far
	for i, r := range recs {
		k := rowKey(t, r, r.Values)
		prev, seen := last[k]
		// An update that changed the key takes its unchanged values from
		// the old key's row: its last live version in this batch, else in
		// ClickHouse (capture's delete of the old key comes with the same
		// version, possibly in another partition, so not its tombstone).
		lookup, before := r.Values, uint64(0)
		if r.OldKey != nil && r.Op == record.Update {
			lookup, before = keyValues(t, r), r.Version
			prev, seen = live[rowKey(t, r, lookup)]
		}
		last[k] = i
		if r.Op != record.Delete {
			live[k] = i
		}
		var missing []int
		for ci, v := range r.Values {
			if !v.Unchanged {
				continue
			}
			if seen {
				if pv := recs[prev].Values[ci]; !pv.Unchanged {
					r.Values[ci] = pv
					continue
				}
				if x, ok := out[prev][ci]; ok {
					out.set(i, ci, x)
					continue
				}
			}
			missing = append(missing, ci)
		}
		if len(missing) == 0 {
			continue
		}
		vals, err := w.storedValues(ctx, tg, r, lookup, before, missing)
		if err != nil {
			return nil, err
		}
		if out == nil {
			out = filled{}
		}
		for j, ci := range missing {
			out.set(i, ci, vals[j])
		}
	}
	return out, nil
}

// hasUnchanged reports whether r lacks a TOASTed value PostgreSQL did not
// resend.
func hasUnchanged(r *record.Record) bool {
	return slices.ContainsFunc(r.Values, func(v record.Value) bool { return v.Unchanged })
}

func (f filled) set(rec, col int, v any) {
	if f[rec] == nil {
		f[rec] = map[int]any{}
	}
	f[rec][col] = v
}

// rowKey identifies a row within a table: its tenant and the key values
// among vals (aligned with the table's columns).
func rowKey(t *schema.Table, r *record.Record, vals []record.Value) string {
	var b strings.Builder
	if t.TenantSynthetic {
		b.WriteString(r.TenantID) // a tenant column is among vals
	}
	for i, c := range t.Columns {
		if c.Source.Key || c.Name == t.TenantColumn {
			b.WriteByte(0)
			b.WriteString(vals[i].Text)
		}
	}
	return b.String()
}

// keyValues returns r's values with the key columns' replaced by the old
// key's (r.OldKey), for looking up the row as it was before the update.
func keyValues(t *schema.Table, r *record.Record) []record.Value {
	vals := slices.Clone(r.Values)
	for i, c := range t.Columns {
		if c.Source.Key && i < len(r.OldKey) {
			vals[i] = r.OldKey[i]
		}
	}
	return vals
}

// storedValues reads the current values of cols for the row whose key
// values are among vals: its latest version (FINAL), or, when before is
// not 0, its latest live version below before. A row that ClickHouse does
// not have yields NULLs: its earlier versions were never captured (the
// table was added without a snapshot).
func (w *Writer) storedValues(ctx context.Context, tg *target, r *record.Record, vals []record.Value, before uint64, cols []int) ([]any, error) {
	t := tg.table
	sel := make([]string, len(cols))
	for j, ci := range cols {
		sel[j] = schema.QuoteIdent(tg.columns[ci].Name)
		if tg.columns[ci].Type.IsJSON() {
			// As the text the insert's other values of the column are:
			// the client refuses an object among them.
			sel[j] = "CAST(" + sel[j] + " AS Nullable(String))"
		}
	}
	// Key values are bound as the values inserted for them (converted from
	// PostgreSQL's text the same way), never as that text: bytea, bool or
	// timestamptz text would not match what ClickHouse stored.
	var (
		where []string
		args  []any
	)
	if t.TenantSynthetic {
		where = append(where, fmt.Sprintf("%s = {tenant:String}", schema.QuoteIdent(t.TenantColumn)))
		args = append(args, ch.Named("tenant", r.TenantID))
	}
	for i, c := range t.Columns {
		if !c.Source.Key && c.Name != t.TenantColumn {
			continue
		}
		p := fmt.Sprintf("k%d", i)
		where = append(where, fmt.Sprintf("%s = {%s:%s}", schema.QuoteIdent(tg.columns[i].Name), p, tg.columns[i].Type.DDL))
		x, err := tg.columns[i].Type.Convert(vals[i].Text)
		if err != nil {
			return nil, fmt.Errorf("read unchanged TOAST values of %s: key column %s: %w", t.QualifiedName(), c.Name, err)
		}
		args = append(args, ch.Named(p, x))
	}
	q := fmt.Sprintf("SELECT %s FROM %s FINAL WHERE %s AND %s = 0 LIMIT 1",
		strings.Join(sel, ", "), t.QualifiedName(), strings.Join(where, " AND "), schema.QuoteIdent(schema.DeletedColumn))
	if before != 0 {
		// Every version of one key is a handful of rows: no FINAL, the
		// newest live one below the update's version.
		q = fmt.Sprintf("SELECT %s FROM %s WHERE %s AND %s = 0 AND %s < {before:UInt64} ORDER BY %s DESC LIMIT 1",
			strings.Join(sel, ", "), t.QualifiedName(), strings.Join(where, " AND "), schema.QuoteIdent(schema.DeletedColumn),
			schema.QuoteIdent(schema.VersionColumn), schema.QuoteIdent(schema.VersionColumn))
		args = append(args, ch.Named("before", before))
	}
	rows, err := w.conn.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("read unchanged TOAST values of %s: %w", t.QualifiedName(), err)
	}
	defer rows.Close()
	out := make([]any, len(cols))
	if !rows.Next() {
		w.log.Warn("unchanged TOAST value of a row ClickHouse does not have; stored as NULL", "table", t.QualifiedName(), "event_id", r.EventID)
		return out, rows.Err()
	}
	dest := make([]any, len(cols))
	for j, ct := range rows.ColumnTypes() {
		dest[j] = reflect.New(ct.ScanType()).Interface()
	}
	if err := rows.Scan(dest...); err != nil {
		return nil, fmt.Errorf("read unchanged TOAST values of %s: %w", t.QualifiedName(), err)
	}
	for j := range dest {
		out[j] = reflect.ValueOf(dest[j]).Elem().Interface()
	}
	return out, rows.Err()
}
