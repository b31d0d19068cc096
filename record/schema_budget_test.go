package record

import (
	"errors"
	"fmt"
	"testing"
)

// wideSchema returns a registry entry's schema of n columns, the first
// the key.
func wideSchema(n int) Schema {
	cols := make([]Column, n)
	for i := range cols {
		cols[i] = Column{Name: fmt.Sprintf("c%d", i), Type: "text", TypMod: -1, Key: i == 0, Attnum: int16(i%30000 + 1)}
	}
	return Schema{Columns: cols}
}

// TestDecodeSchemaHoldsToTheColumnBudget: a registry entry is read from
// Kafka like any record, and every record naming its id is decoded into
// one value per column of it: an entry of more than MaxColumns columns
// (no PostgreSQL table has them) is refused with ErrOverBudget, not
// trusted to size every later record's decoding.
func TestDecodeSchemaHoldsToTheColumnBudget(t *testing.T) {
	for _, tc := range []struct {
		n  int
		ok bool
	}{{1, true}, {MaxColumns, true}, {MaxColumns + 1, false}, {40000, false}} {
		s, err := DecodeSchema(wideSchema(tc.n).AppendJSON(nil))
		switch {
		case tc.ok && (err != nil || len(s.Columns) != tc.n):
			t.Errorf("%d columns: %v, want the schema", tc.n, err)
		case !tc.ok && !errors.Is(err, ErrOverBudget):
			t.Errorf("%d columns: %v, want ErrOverBudget", tc.n, err)
		}
	}
}
