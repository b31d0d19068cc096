package capture

import (
	"strings"
	"testing"
)

func TestExcludedInternalTables(t *testing.T) {
	for _, tc := range []struct {
		name     string
		opts     []Option
		table    string
		excluded bool
		errSub   string
	}{
		{name: "key table left out by default", table: IdempotencyKeyTable, excluded: true},
		{name: "key table when asked", opts: []Option{WithIdempotencyKeys()}, table: IdempotencyKeyTable},
		{name: "key table asked, but excluded by pattern", opts: []Option{WithIdempotencyKeys(), WithExcludeTables("walhouse.*")}, table: IdempotencyKeyTable, excluded: true},
		{name: "message key never", opts: []Option{WithIdempotencyKeys()}, table: messageKeyTable, excluded: true},
		{name: "other walhouse table", table: "walhouse.other"},
		{name: "application table", table: "public.orders"},
		{name: "key table in --tables without asking", opts: []Option{WithTables(IdempotencyKeyTable)}, table: IdempotencyKeyTable, excluded: true, errSub: "--capture-idempotency-keys"},
		{name: "key table in --tables, asked", opts: []Option{WithTables(IdempotencyKeyTable), WithIdempotencyKeys()}, table: IdempotencyKeyTable},
		{name: "message key in --tables", opts: []Option{WithTables(messageKeyTable)}, table: messageKeyTable, excluded: true, errSub: "never captured"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := defaults()
			c.connString, c.envelope = "postgres://db/app", 1
			for _, o := range tc.opts {
				o(&c)
			}
			if got := c.excluded(tc.table); got != tc.excluded {
				t.Errorf("excluded(%s) = %v, want %v", tc.table, got, tc.excluded)
			}
			err := c.validate()
			if tc.errSub == "" && err != nil {
				t.Errorf("validate: %v", err)
			}
			if tc.errSub != "" && (err == nil || !strings.Contains(err.Error(), tc.errSub)) {
				t.Errorf("validate: %v, want an error with %q", err, tc.errSub)
			}
		})
	}
}
