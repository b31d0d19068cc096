package clickhouse

import (
	"maps"
	"slices"

	"github.com/walhouse/walhouse/schema"
)

// jsonColumns lists, as "schema.table.column" in order, the columns the
// layouts override as JSON, which only some servers can hold
// (minJSONVersion).
func jsonColumns(layouts map[string]schema.Layout) []string {
	var uses []string
	for _, table := range slices.Sorted(maps.Keys(layouts)) {
		l := layouts[table]
		for _, col := range slices.Sorted(maps.Keys(l.Columns)) {
			if l.Columns[col].Type == "JSON" {
				uses = append(uses, table+"."+col)
			}
		}
	}
	return uses
}
