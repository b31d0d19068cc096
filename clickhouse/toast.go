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
	for i, r := range recs {
		k := rowKey(t, r)
		prev, seen := last[k]
		last[k] = i
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
		vals, err := w.storedValues(ctx, tg, r, missing)
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

// rowKey identifies a row within a table: tenant and key values.
func rowKey(t *schema.Table, r *record.Record) string {
	var b strings.Builder
	b.WriteString(r.TenantID)
	for i, c := range t.Columns {
		if c.Source.Key {
			b.WriteByte(0)
			b.WriteString(r.Values[i].Text)
		}
	}
	return b.String()
}

// storedValues reads the current values of cols for r's row. A row that
// ClickHouse does not have yields NULLs: its earlier versions were never
// captured (the table was added without a snapshot).
func (w *Writer) storedValues(ctx context.Context, tg *target, r *record.Record, cols []int) ([]any, error) {
	t := tg.table
	sel := make([]string, len(cols))
	for j, ci := range cols {
		sel[j] = schema.QuoteIdent(tg.columns[ci].Name)
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
		x, err := tg.columns[i].Type.Convert(r.Values[i].Text)
		if err != nil {
			return nil, fmt.Errorf("read unchanged TOAST values of %s: key column %s: %w", t.QualifiedName(), c.Name, err)
		}
		args = append(args, ch.Named(p, x))
	}
	q := fmt.Sprintf("SELECT %s FROM %s FINAL WHERE %s AND %s = 0 LIMIT 1",
		strings.Join(sel, ", "), t.QualifiedName(), strings.Join(where, " AND "), schema.QuoteIdent(schema.DeletedColumn))
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
