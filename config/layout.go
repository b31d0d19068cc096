package config

import (
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// decodeLayouts decodes the layout key: a mapping of "schema.table" to a
// table's layout. It records each table's line in set (as key.table) for
// the problems validate finds later, and returns every problem it meets.
func decodeLayouts(node *yaml.Node, key string, set map[string]int) (map[string]TableLayout, []Problem) {
	if node.Kind == yaml.ScalarNode && node.Tag == "!!null" {
		return nil, nil
	}
	if node.Kind != yaml.MappingNode {
		return nil, []Problem{{Key: key, Line: node.Line, Msg: "want a mapping of schema.table to the table's layout (order_by, partition_by, settings, exclude_columns, columns)"}}
	}
	out := map[string]TableLayout{}
	var ps []Problem
	bad := func(k string, line int, format string, a ...any) {
		ps = append(ps, Problem{Key: k, Line: line, Msg: fmt.Sprintf(format, a...)})
	}
	known := []string{"order_by", "partition_by", "settings", "exclude_columns", "columns"}
	for i := 0; i+1 < len(node.Content); i += 2 {
		tk, tv := node.Content[i], node.Content[i+1]
		tkey := key + "." + tk.Value
		if _, dup := out[tk.Value]; dup {
			bad(tkey, tk.Line, "given twice; keep one")
			continue
		}
		set[tkey] = tk.Line
		var l TableLayout
		out[tk.Value] = l
		if tv.Kind != yaml.MappingNode {
			bad(tkey, tv.Line, "want a mapping with order_by, partition_by, settings, exclude_columns or columns")
			continue
		}
		for j := 0; j+1 < len(tv.Content); j += 2 {
			fk, fv := tv.Content[j], tv.Content[j+1]
			fkey := tkey + "." + fk.Value
			switch fk.Value {
			case "order_by":
				if p, ok := decodeLeaf(fv, reflect.ValueOf(&l.OrderBy).Elem(), fkey); !ok {
					ps = append(ps, p)
				}
			case "exclude_columns":
				if p, ok := decodeLeaf(fv, reflect.ValueOf(&l.ExcludeColumns).Elem(), fkey); !ok {
					ps = append(ps, p)
				}
			case "columns":
				if fv.Kind != yaml.MappingNode {
					bad(fkey, fv.Line, "want a mapping of column to {type: …, on_overflow: …}")
					continue
				}
				l.Columns = map[string]ColumnLayout{}
				for n := 0; n+1 < len(fv.Content); n += 2 {
					ck, cv := fv.Content[n], fv.Content[n+1]
					ckey := fkey + "." + ck.Value
					if cv.Kind != yaml.MappingNode {
						bad(ckey, cv.Line, "want {type: …} with an optional on_overflow")
						continue
					}
					var col ColumnLayout
					for m := 0; m+1 < len(cv.Content); m += 2 {
						k, v := cv.Content[m], cv.Content[m+1]
						switch {
						case v.Kind != yaml.ScalarNode:
							bad(ckey+"."+k.Value, v.Line, "want a single value")
						case k.Value == "type":
							col.Type = v.Value
						case k.Value == "on_overflow":
							col.OnOverflow = v.Value
						default:
							bad(ckey+"."+k.Value, k.Line, "unknown key; known here: type, on_overflow")
						}
					}
					if col.Type == "" {
						bad(ckey, cv.Line, "has no type; want e.g. {type: \"Decimal(38, 4)\"}")
					}
					l.Columns[ck.Value] = col
				}
			case "partition_by":
				if fv.Kind != yaml.ScalarNode {
					bad(fkey, fv.Line, "want an expression such as toYYYYMM(created_at)")
					continue
				}
				l.PartitionBy = fv.Value
			case "settings":
				if fv.Kind != yaml.MappingNode {
					bad(fkey, fv.Line, "want a mapping of MergeTree setting to value")
					continue
				}
				l.Settings = map[string]string{}
				for n := 0; n+1 < len(fv.Content); n += 2 {
					sk, sv := fv.Content[n], fv.Content[n+1]
					if sv.Kind != yaml.ScalarNode || sv.Value == "" {
						bad(fkey+"."+sk.Value, sv.Line, "want a number or a word")
						continue
					}
					l.Settings[sk.Value] = sv.Value
				}
			default:
				msg := "unknown key; known here: " + strings.Join(known, ", ")
				if s := Closest(fk.Value, known); s != "" {
					msg = fmt.Sprintf("unknown key; did you mean %q?", s)
				}
				bad(fkey, fk.Line, "%s", msg)
			}
		}
		out[tk.Value] = l
	}
	return out, ps
}

// tableName is a source table as the layout key names it.
var tableName = regexp.MustCompile(`^[^.\s]+\.[^\s]+$`)

// validateLayouts checks what the file alone can tell of each table's
// layout: the table's name, and that the sorting key starts with the
// tenant column when the file names it. The rest (allowed partition
// functions, settings, columns, the primary key) is checked by the
// --layout flag of capture and sink, which config check also runs, and
// against the table's columns at start.
func (c *Config) validateLayouts() []Problem {
	var ps []Problem
	for _, table := range sortedKeys(c.Layout) {
		l := c.Layout[table]
		key := "layout." + table
		bad := func(format string, a ...any) {
			ps = append(ps, Problem{Key: key, Line: c.set[key], Msg: fmt.Sprintf(format, a...)})
		}
		if !tableName.MatchString(table) {
			bad("%q is not schema.table", table)
		}
		if len(l.OrderBy) == 0 && l.PartitionBy == "" && len(l.Settings) == 0 && len(l.ExcludeColumns) == 0 && len(l.Columns) == 0 {
			bad("is empty; give order_by, partition_by, settings, exclude_columns or columns, or remove the entry")
		}
		tenant, known := c.Source.TenantColumns[table]
		if !known && c.Has("source.tenant_column") {
			tenant, known = c.Source.TenantColumn, true
		}
		if known && len(l.OrderBy) > 0 && l.OrderBy[0] != tenant {
			bad("order_by starts with %q: it must start with the table's tenant column %q", l.OrderBy[0], tenant)
		}
	}
	return ps
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
