package query

import (
	"testing"

	"github.com/walhouse/walhouse/record"
	"github.com/walhouse/walhouse/schema"
)

// TestEveryMappedTypeIsFilterable goes through schema's type table: every
// ClickHouse type walhouse creates for a PostgreSQL type must be
// classified here, so its columns can be filtered and not just selected.
func TestEveryMappedTypeIsFilterable(t *testing.T) {
	for _, name := range schema.PGTypes() {
		for _, nullable := range []bool{false, true} {
			ddl := schema.Map(record.Column{Type: name, TypMod: -1}, nullable).DDL
			got := parseColType(ddl)
			if got.Kind == kindOther || got.Param == "" || got.Nullable != nullable {
				t.Errorf("PostgreSQL %s is stored as %s, which parseColType classifies as %v (param %q, nullable %v)", name, ddl, got.Kind, got.Param, got.Nullable)
			}
		}
	}
}
