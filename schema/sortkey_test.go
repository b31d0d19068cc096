package schema

import (
	"slices"
	"testing"
)

// TestSplitSortingKeyEscapes reads sorting keys as ClickHouse 26 writes
// them in system.tables: names with a newline, a tab, a backslash or a
// back quote are escaped, control characters without an escape are raw.
func TestSplitSortingKeyEscapes(t *testing.T) {
	tests := []struct {
		key  string
		want []string
	}{
		{"tenant_id, id", []string{"tenant_id", "id"}},
		{"`odd, name`, id", []string{"odd, name", "id"}},
		{"tenant_id, `we\\`ird`, toDate(x)", []string{"tenant_id", "we`ird", "toDate(x)"}},
		{"`c\\td`, `a\\nb`, `e\\\\f`, `g\\`h`, x", []string{"c\td", "a\nb", `e\f`, "g`h", "x"}},
		{"`bel\az`, `\x1bq`, `r\\r`, `nul\\0`, `hex\\x41`, `bad\\xZZ`", []string{"bel\az", "\x1bq", "r\r", "nul\x00", "hexA", "badxZZ"}},
		{"", nil},
	}
	for _, tt := range tests {
		if got := SplitSortingKey(tt.key); !slices.Equal(got, tt.want) {
			t.Errorf("SplitSortingKey(%q) = %q, want %q", tt.key, got, tt.want)
		}
	}
}
