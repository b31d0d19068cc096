package query

import (
	"fmt"
	"testing"

	"github.com/walhouse/walhouse/schema"
)

// TestIntegrationSortingKeyEscapedNames: a table whose key columns' names
// hold a tab and a newline (PostgreSQL allows them) is listed and read,
// page by page: ClickHouse writes such names escaped in sorting_key, and
// the catalog finds them by their real names in system.columns.
func TestIntegrationSortingKeyEscapedNames(t *testing.T) {
	f := newCHFixture(t)
	db := schema.QuoteIdent(f.db)
	tenant, id := "tenant\tid", "line\nbreak"
	f.exec(t, fmt.Sprintf("CREATE TABLE %s.%s (%s String, note Nullable(String), %s Int64, _version UInt64, _is_deleted UInt8, _commit_ts DateTime64(6, 'UTC'), _synced_at DateTime64(6, 'UTC') DEFAULT now64(6)) ENGINE = ReplacingMergeTree(_version, _is_deleted) ORDER BY (%s, %s)",
		db, schema.QuoteIdent("odd_keys"), schema.QuoteIdent(tenant), schema.QuoteIdent(id), schema.QuoteIdent(tenant), schema.QuoteIdent(id)))
	f.exec(t, fmt.Sprintf("INSERT INTO %s.odd_keys (%s, note, %s, _version, _is_deleted, _commit_ts) SELECT if(number %% 2 = 0, 'acme', 'globex'), 'n', number, 1, 0, now64(6) FROM numbers(10)",
		db, schema.QuoteIdent(tenant), schema.QuoteIdent(id)))

	var got []any
	cursor := ""
	for page := 0; page < 10; page++ {
		req := map[string]any{"limit": 2}
		if cursor != "" {
			req["cursor"] = cursor
		}
		out, code := f.query(t, keyAcme, "odd_keys", req)
		if code != 200 {
			t.Fatalf("page %d: status %d, %+v; want the table readable", page, code, out.Error)
		}
		for _, r := range out.Data {
			if r[tenant] != "acme" {
				t.Fatalf("a row of another tenant: %v", r)
			}
			got = append(got, r[id])
		}
		next, _ := out.Meta["nextCursor"].(string)
		if next == "" {
			break
		}
		cursor = next
	}
	if fmt.Sprint(got) != "[0 2 4 6 8]" {
		t.Errorf("read ids %v, want [0 2 4 6 8] in key order", got)
	}
}
