package query

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/walhouse/walhouse/clickhouse"
	"github.com/walhouse/walhouse/harness/testenv"
	"github.com/walhouse/walhouse/schema"
)

// Secrets of the test keys.
const (
	keyAcme   = "wh_test_acme"
	keyGlobex = "wh_test_globex"
	keyAdmin  = "wh_test_admin"
	keyNoExp  = "wh_test_readonly"
)

func testKeys(t testing.TB) *Keys {
	t.Helper()
	list := []Key{
		{ID: "acme", Hash: HashKey(keyAcme), Tenant: "acme", Scopes: []Scope{ScopeRead, ScopeExport}},
		{ID: "globex", Hash: HashKey(keyGlobex), Tenant: "globex", Scopes: []Scope{ScopeRead, ScopeExport}},
		{ID: "ops", Hash: HashKey(keyAdmin), Scopes: []Scope{ScopeAdmin}},
		{ID: "acme-ro", Hash: HashKey(keyNoExp), Tenant: "acme", Scopes: []Scope{ScopeRead}},
	}
	b, _ := json.Marshal(list)
	k, err := ParseKeys(b)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

const testCursorSecret = "0123456789abcdef0123"

// chFixture is a fresh ClickHouse database with walhouse-shaped tables.
type chFixture struct {
	conn driver.Conn
	db   string
	srv  *httptest.Server
	api  *Server
	reg  *prometheus.Registry
}

func newCHFixture(t *testing.T) *chFixture {
	t.Helper()
	return newCHFixtureWith(t, nil)
}

// newCHFixtureWith is newCHFixture with the server's Config changed by
// configure (limits, logger) before the server starts.
func newCHFixtureWith(t *testing.T, configure func(*Config)) *chFixture {
	t.Helper()
	env := testenv.Require(t, "clickhouse")
	ctx := context.Background()
	conn, err := clickhouse.Open(ctx, env.ClickHouse)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	f := &chFixture{conn: conn, db: testenv.Name("query")}
	f.exec(t, "CREATE DATABASE "+schema.QuoteIdent(f.db))
	t.Cleanup(func() { _ = conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+schema.QuoteIdent(f.db)) })
	f.exec(t, fmt.Sprintf(`CREATE TABLE %s.orders (
		tenant_id String, id Int64, customer_id Nullable(String), status Nullable(String),
		amount Nullable(Decimal(12, 2)), created_at Nullable(DateTime64(6, 'UTC')), due Nullable(Date32),
		_version UInt64, _is_deleted UInt8, _commit_ts DateTime64(6, 'UTC'), _synced_at DateTime64(6, 'UTC') DEFAULT now64(6))
		ENGINE = ReplacingMergeTree(_version, _is_deleted) ORDER BY (tenant_id, id)`, schema.QuoteIdent(f.db)))
	// A table whose names need quoting: a column with SQL metacharacters,
	// backticks and unicode, as PostgreSQL allows.
	f.exec(t, fmt.Sprintf("CREATE TABLE %s.%s (tenant_id String, id Int64, `id; DROP TABLE orders` Nullable(String), `we``ird` Nullable(String), `prénom` Nullable(String), _version UInt64, _is_deleted UInt8, _commit_ts DateTime64(6, 'UTC'), _synced_at DateTime64(6, 'UTC') DEFAULT now64(6)) ENGINE = ReplacingMergeTree(_version, _is_deleted) ORDER BY (tenant_id, id)",
		schema.QuoteIdent(f.db), schema.QuoteIdent("crm__odd names")))
	f.exec(t, schema.SyncTableDDL(f.db))
	f.reg = prometheus.NewRegistry()
	cfg := Config{Conn: conn, Database: f.db, Keys: testKeys(t), CursorSecret: []byte(testCursorSecret),
		Limits: Limits{MaxRows: 1000, MaxConcurrent: 2}, Registry: f.reg, CatalogTTL: time.Millisecond,
		HistoryInterval: 200 * time.Millisecond} // tests that sample the history start f.api.Run
	if configure != nil {
		configure(&cfg)
	}
	s, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	f.api = s
	f.srv = httptest.NewUnstartedServer(nil)
	f.srv.Config = s.HTTPServer() // the timeouts and header limit walhouse serve uses
	f.srv.Start()
	t.Cleanup(f.srv.Close)
	return f
}

func (f *chFixture) exec(t *testing.T, sql string) {
	t.Helper()
	if err := f.conn.Exec(context.Background(), sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// call sends a request and decodes the JSON answer into out (when not nil).
func (f *chFixture) call(t *testing.T, method, path, key string, body any, out any) *http.Response {
	t.Helper()
	var rd io.Reader
	if body != nil {
		if s, ok := body.(string); ok {
			rd = strings.NewReader(s)
		} else {
			b, _ := json.Marshal(body)
			rd = bytes.NewReader(b)
		}
	}
	resp, data := sendRead(t, method, f.srv.URL+path, key, rd)
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("%s %s: decode %s: %v", method, path, data, err)
		}
	}
	return resp
}

type queryResp struct {
	Data  []map[string]any `json:"data"`
	Meta  map[string]any   `json:"meta"`
	Error *apiError        `json:"error"`
}

func (f *chFixture) query(t *testing.T, key, table string, req any) (queryResp, int) {
	t.Helper()
	var out queryResp
	resp := f.call(t, "POST", "/v1/tables/"+strings.ReplaceAll(table, " ", "%20")+"/query", key, req, &out)
	return out, resp.StatusCode
}

func TestIntegrationQueryTenancyAndValidation(t *testing.T) {
	f := newCHFixture(t)
	f.exec(t, fmt.Sprintf(`INSERT INTO %s.orders (tenant_id, id, customer_id, status, amount, created_at, _version, _is_deleted, _commit_ts)
		SELECT if(number %% 2 = 0, 'acme', 'globex'), number, 'cus_' || toString(number %% 7), if(number %% 3 = 0, 'paid', 'open'),
		       toDecimal64(number, 2), toDateTime64('2024-05-01 00:00:00', 6, 'UTC') + number, 1, 0, now64(6)
		FROM numbers(300)`, schema.QuoteIdent(f.db)))

	// Only acme's rows, whatever the filters say.
	out, code := f.query(t, keyAcme, "orders", `{"columns":["tenant_id","id"],"filters":[{"column":"tenant_id","op":"in","value":["acme","globex"]}],"limit":1000}`)
	if code != 200 || len(out.Data) != 150 {
		t.Fatalf("status %d, %d rows, want 200 and 150: %+v", code, len(out.Data), out.Error)
	}
	for _, r := range out.Data {
		if r["tenant_id"] != "acme" {
			t.Fatalf("row of another tenant: %v", r)
		}
	}
	out, _ = f.query(t, keyAcme, "orders", `{"filters":[{"column":"tenant_id","op":"=","value":"globex"}]}`)
	if len(out.Data) != 0 {
		t.Fatalf("a filter on another tenant returned %d rows", len(out.Data))
	}
	// Injection attempts in values stay values.
	out, code = f.query(t, keyAcme, "orders", `{"filters":[{"column":"status","op":"=","value":"x' OR 1=1 OR tenant_id='globex"}]}`)
	if code != 200 || len(out.Data) != 0 {
		t.Fatalf("injection in a value: status %d, %d rows", code, len(out.Data))
	}

	// Typed values, aggregates.
	out, code = f.query(t, keyAcme, "orders", `{"groupBy":["status"],"aggregates":[{"fn":"count","as":"n"},{"fn":"sum","column":"amount","as":"total"}],
		"filters":[{"column":"amount","op":"<","value":"100"}],"timeRange":{"column":"created_at","from":"2024-05-01T00:00:10Z"},"orderBy":[{"column":"status"}]}`)
	if code != 200 || len(out.Data) != 2 {
		t.Fatalf("group by: status %d, %+v %+v", code, out.Data, out.Error)
	}
	// acme has even ids 10..98: 45 rows; paid = multiple of 6 → 12,18,…,96: 15.
	if out.Data[0]["status"] != "open" || out.Data[0]["n"] != float64(30) || out.Data[1]["n"] != float64(15) {
		t.Errorf("group by result %v", out.Data)
	}

	// Bad requests are 400s that name the problem.
	for _, tc := range []struct{ table, body, code string }{
		{"orders", `{"columns":["id; DROP TABLE orders"]}`, "bad_request"},
		{"orders", "{\"columns\":[\"id`\"]}", "bad_request"},
		{"orders", `{"filters":[{"column":"id","op":"=","value":"one"}]}`, "bad_request"},
		{"orders", `{"limit":1001}`, "bad_request"},
		{"orders", `{"sql":"SELECT 1"}`, "bad_request"},
		{"orders; DROP", `{}`, "unknown_table"},
		{"_walhouse_sync", `{}`, "unknown_table"},
		{"nope", `{}`, "unknown_table"},
	} {
		out, status := f.query(t, keyAcme, tc.table, tc.body)
		if status != 400 || out.Error == nil || out.Error.Code != tc.code || out.Error.RequestID == "" {
			t.Errorf("%s %s: status %d, error %+v; want 400 %s", tc.table, tc.body, status, out.Error, tc.code)
		}
		if out.Error != nil && strings.Contains(out.Error.Message, "SELECT") {
			t.Errorf("error leaks SQL: %s", out.Error.Message)
		}
	}

	// Names that need quoting round-trip.
	f.exec(t, fmt.Sprintf("INSERT INTO %s.%s (tenant_id, id, `id; DROP TABLE orders`, `we``ird`, `prénom`, _version, _is_deleted, _commit_ts) VALUES ('acme', 1, 'a', 'b', 'Zoë', 1, 0, now64(6)), ('globex', 1, 'x', 'y', 'z', 1, 0, now64(6))",
		schema.QuoteIdent(f.db), schema.QuoteIdent("crm__odd names")))
	out, code = f.query(t, keyAcme, "crm__odd names", map[string]any{
		"columns": []string{"id; DROP TABLE orders", "we`ird", "prénom"},
		"filters": []map[string]any{{"column": "prénom", "op": "prefix", "value": "Zo"}, {"column": "we`ird", "op": "=", "value": "b"}},
	})
	if code != 200 || len(out.Data) != 1 || out.Data[0]["prénom"] != "Zoë" || out.Data[0]["id; DROP TABLE orders"] != "a" {
		t.Fatalf("odd names: status %d, %v %+v", code, out.Data, out.Error)
	}

	// GET /v1/tables hides _is_deleted and the sync table.
	var tables struct{ Tables []tableInfo }
	if resp := f.call(t, "GET", "/v1/tables", keyAcme, nil, &tables); resp.StatusCode != 200 || len(tables.Tables) != 2 {
		t.Fatalf("tables: %d %+v", resp.StatusCode, tables)
	}
	for _, c := range tables.Tables[1].Columns {
		if c.Name == schema.DeletedColumn {
			t.Error("GET /v1/tables lists _is_deleted")
		}
	}

	// Authentication and scopes.
	if _, code := f.query(t, "", "orders", `{}`); code != 401 {
		t.Errorf("no key: %d", code)
	}
	if _, code := f.query(t, "wh_wrong", "orders", `{}`); code != 401 {
		t.Errorf("unknown key: %d", code)
	}
	if _, code := f.query(t, keyAdmin, "orders", `{}`); code != 403 {
		t.Errorf("admin key reading tenant data: %d", code)
	}

	// A tenant at its concurrency limit (2 here) gets 429; others do not.
	r1, _ := f.api.slots.acquire("acme", 2)
	r2, _ := f.api.slots.acquire("acme", 2)
	var busy queryResp
	resp := f.call(t, "POST", "/v1/tables/orders/query", keyAcme, `{}`, &busy)
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" || busy.Error == nil || busy.Error.Code != "too_many_queries" {
		t.Errorf("over the concurrency limit: %d %+v", resp.StatusCode, busy.Error)
	}
	if _, code := f.query(t, keyGlobex, "orders", `{}`); code != 200 {
		t.Errorf("another tenant was throttled: %d", code)
	}
	r1()
	r2()
	if _, code := f.query(t, keyAcme, "orders", `{}`); code != 200 {
		t.Errorf("after release: %d", code)
	}
}

func TestIntegrationCursor(t *testing.T) {
	f := newCHFixture(t)
	f.exec(t, fmt.Sprintf(`INSERT INTO %s.orders (tenant_id, id, status, _version, _is_deleted, _commit_ts)
		SELECT if(number < 250, 'acme', 'globex'), number, 'open', 1, 0, now64(6) FROM numbers(500)`, schema.QuoteIdent(f.db)))
	// acme has a row in the other table too, so it may read it (see "other table").
	f.exec(t, fmt.Sprintf("INSERT INTO %s.%s (tenant_id, id, _version, _is_deleted, _commit_ts) VALUES ('acme', 1, 1, 0, now64(6))", schema.QuoteIdent(f.db), schema.QuoteIdent("crm__odd names")))
	req := map[string]any{"columns": []string{"id"}, "limit": 100}
	var ids []float64
	var cursor string
	for page := 0; ; page++ {
		if cursor != "" {
			req["cursor"] = cursor
		}
		out, code := f.query(t, keyAcme, "orders", req)
		if code != 200 {
			t.Fatalf("page %d: %d %+v", page, code, out.Error)
		}
		for _, r := range out.Data {
			ids = append(ids, r["id"].(float64))
		}
		next, _ := out.Meta["nextCursor"].(string)
		if next == "" {
			break
		}
		cursor = next
	}
	if len(ids) != 250 || ids[0] != 0 || ids[249] != 249 {
		t.Fatalf("paged %d ids (%v…), want 0…249", len(ids), ids[:min(3, len(ids))])
	}
	// Replay the second page's cursor elsewhere.
	out, _ := f.query(t, keyAcme, "orders", map[string]any{"columns": []string{"id"}, "limit": 100})
	c := out.Meta["nextCursor"].(string)
	for name, tc := range map[string]struct {
		key, table string
		req        map[string]any
	}{
		"other tenant":  {keyGlobex, "orders", map[string]any{"columns": []string{"id"}, "limit": 100, "cursor": c}},
		"other request": {keyAcme, "orders", map[string]any{"columns": []string{"id", "status"}, "limit": 100, "cursor": c}},
		"other limit":   {keyAcme, "orders", map[string]any{"columns": []string{"id"}, "limit": 10, "cursor": c}},
		"other table":   {keyAcme, "crm__odd names", map[string]any{"columns": []string{"id"}, "limit": 100, "cursor": c}},
		"tampered":      {keyAcme, "orders", map[string]any{"columns": []string{"id"}, "limit": 100, "cursor": "x" + c}},
	} {
		out, code := f.query(t, tc.key, tc.table, tc.req)
		if code != 400 || out.Error == nil || out.Error.Code != "invalid_cursor" {
			t.Errorf("%s: status %d %+v, want 400 invalid_cursor", name, code, out.Error)
		}
	}
}

func TestIntegrationFinalVsApproximateAndLastSync(t *testing.T) {
	f := newCHFixture(t)
	db := schema.QuoteIdent(f.db)
	// Two versions of one row in two inserts (two parts), never merged.
	f.exec(t, "SYSTEM STOP MERGES "+db+".orders")
	f.exec(t, fmt.Sprintf(`INSERT INTO %s.orders (tenant_id, id, status, _version, _is_deleted, _commit_ts) VALUES ('acme', 7, 'open', 100, 0, now64(6))`, db))
	f.exec(t, fmt.Sprintf(`INSERT INTO %s.orders (tenant_id, id, status, _version, _is_deleted, _commit_ts) VALUES ('acme', 7, 'paid', 200, 0, now64(6))`, db))
	// A row deleted in a later version.
	f.exec(t, fmt.Sprintf(`INSERT INTO %s.orders (tenant_id, id, status, _version, _is_deleted, _commit_ts) VALUES ('acme', 8, 'open', 100, 0, now64(6))`, db))
	f.exec(t, fmt.Sprintf(`INSERT INTO %s.orders (tenant_id, id, status, _version, _is_deleted, _commit_ts) VALUES ('acme', 8, 'open', 300, 1, now64(6))`, db))

	out, code := f.query(t, keyAcme, "orders", `{"columns":["id","status"]}`)
	if code != 200 || len(out.Data) != 1 || out.Data[0]["status"] != "paid" || out.Meta["consistency"] != "final" {
		t.Fatalf("final: %d %v %v", code, out.Data, out.Meta)
	}
	out, code = f.query(t, keyAcme, "orders", `{"columns":["id","status"],"consistency":"approximate","filters":[{"column":"id","op":"=","value":7}]}`)
	if code != 200 || len(out.Data) != 2 || out.Meta["consistency"] != "approximate" {
		t.Fatalf("approximate: %d %v %v", code, out.Data, out.Meta)
	}

	// No progress recorded yet: lastSyncAt null, and the response says why.
	if out.Meta["lastSyncAt"] != nil || out.Meta["syncNote"] == nil {
		t.Fatalf("meta without sync state: %v", out.Meta)
	}
	// One of the topic's two partitions reported: still unknown.
	f.exec(t, fmt.Sprintf(`INSERT INTO %s._walhouse_sync VALUES
		('orders', 0, '2024-05-01 10:00:00.000000', 4294967296 + 16, '2024-05-01 10:00:01', 2)`, db))
	out, _ = f.query(t, keyAcme, "orders", `{"columns":["id"]}`)
	if out.Meta["lastSyncAt"] != nil || out.Meta["lsn"] != nil {
		t.Fatalf("meta with one of two partitions reported: %v", out.Meta)
	}
	f.exec(t, fmt.Sprintf(`INSERT INTO %s._walhouse_sync VALUES
		('orders', 1, '2024-05-01 09:59:30.500000', 4294967296 + 8, '2024-05-01 10:00:01', 2),
		('orders', 1, '2024-05-01 09:00:00.000000', 5, '2024-05-01 09:00:01', 2),
		('other', 0, '2024-01-01 00:00:00', 1, '2024-01-01 00:00:00', 1)`, db))
	out, _ = f.query(t, keyAcme, "orders", `{"columns":["id"]}`)
	if out.Meta["lastSyncAt"] != "2024-05-01T09:59:30.5Z" || out.Meta["lsn"] != "1/8" || out.Meta["syncNote"] != nil {
		t.Fatalf("meta with sync state: %v", out.Meta)
	}

	// Lag and metrics are for admins.
	var lag LagReport
	if resp := f.call(t, "GET", "/v1/lag", keyAcme, nil, nil); resp.StatusCode != 403 {
		t.Errorf("lag with a tenant key: %d", resp.StatusCode)
	}
	if resp := f.call(t, "GET", "/v1/lag", keyAdmin, nil, &lag); resp.StatusCode != 200 {
		t.Fatalf("lag: %d", resp.StatusCode)
	}
	byName := map[string]LagTable{}
	for _, lt := range lag.Tables {
		byName[lt.Table] = lt
	}
	if o := byName["orders"]; len(o.Partitions) != 2 || o.FreshnessSeconds == nil || o.LSN == nil || *o.LSN != LSN(1<<32+8) {
		t.Errorf("lag of orders: %+v", o)
	}
	if o, ok := byName["crm__odd names"]; !ok || o.LastSyncAt != nil || o.FreshnessSeconds != nil {
		t.Errorf("lag of a table without progress: %+v (present %v)", o, ok)
	}
	_, body := sendRead(t, "GET", f.srv.URL+"/metrics", keyAdmin, nil)
	for _, want := range []string{`walhouse_table_freshness_seconds{table="orders"}`, `walhouse_sync_state_up 1`, `walhouse_http_requests_total{code="200",route="POST /v1/tables/{table}/query"}`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s:\n%s", want, body)
		}
	}
}

func TestIntegrationExport(t *testing.T) {
	f := newCHFixture(t)
	db := schema.QuoteIdent(f.db)
	const n = 20_000
	f.exec(t, fmt.Sprintf(`INSERT INTO %s.orders (tenant_id, id, customer_id, status, amount, created_at, due, _version, _is_deleted, _commit_ts)
		SELECT 'acme', number, 'cus_1', 'paid', toDecimal64(number, 2), toDateTime64('2024-05-01 00:00:00', 6, 'UTC') + number, toDate32('2024-06-01'), 1, 0, now64(6)
		FROM numbers(%d)`, db, n))
	// Other tenants' rows of the same subject id, and a subject that exists only in globex.
	f.exec(t, fmt.Sprintf(`INSERT INTO %s.orders (tenant_id, id, customer_id, status, _version, _is_deleted, _commit_ts)
		SELECT 'globex', number, if(number < 10, 'cus_1', 'cus_globex_only'), 'open', 1, 0, now64(6) FROM numbers(100)`, db))
	// A deleted row of the subject is not exported.
	f.exec(t, fmt.Sprintf(`INSERT INTO %s.orders (tenant_id, id, customer_id, status, _version, _is_deleted, _commit_ts) VALUES ('acme', 0, 'cus_1', 'paid', 2, 1, now64(6))`, db))
	f.exec(t, fmt.Sprintf(`INSERT INTO %s._walhouse_sync VALUES ('orders', 0, '2024-05-01 10:00:00', 42, now64(6), 1)`, db))

	resp := send(t, "POST", f.srv.URL+"/v1/exports", keyAcme, strings.NewReader(`{"subject":{"column":"customer_id","value":"cus_1"},"tables":["orders"],"format":"jsonl"}`))
	h := sha256.New()
	lines := 0
	var first []byte
	buf := make([]byte, 32<<10)
	var tail []byte
	for {
		k, rerr := resp.Body.Read(buf)
		h.Write(buf[:k])
		lines += bytes.Count(buf[:k], []byte("\n"))
		if first == nil && k > 0 {
			tail = append(tail, buf[:k]...)
			if i := bytes.IndexByte(tail, '\n'); i >= 0 {
				first = tail[:i]
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			t.Fatal(rerr)
		}
	}
	resp.Body.Close()
	sum := hex.EncodeToString(h.Sum(nil))
	if resp.StatusCode != 200 || lines != n-1 {
		t.Fatalf("export: status %d, %d lines, want %d", resp.StatusCode, lines, n-1)
	}
	if got := resp.Trailer.Get(trailerSHA256); got != sum || resp.Trailer.Get(trailerStatus) != "complete" || resp.Trailer.Get(trailerRows) != fmt.Sprint(n-1) {
		t.Errorf("trailers %v, body sha256 %s", resp.Trailer, sum)
	}
	var row struct {
		Table string
		Row   map[string]any
	}
	if err := json.Unmarshal(first, &row); err != nil || row.Table != "orders" || row.Row["tenant_id"] != "acme" || row.Row["id"] != float64(1) || row.Row["amount"] != "1" || row.Row["due"] != "2024-06-01" {
		t.Errorf("first line %s (%v)", first, err)
	}
	var m Manifest
	if r := f.call(t, "GET", resp.Header.Get("X-Walhouse-Manifest"), keyAcme, nil, &m); r.StatusCode != 200 {
		t.Fatalf("manifest: %d", r.StatusCode)
	}
	if m.SHA256 != sum || m.Rows != n-1 || !m.Complete || len(m.Tables) != 1 || m.Tables[0].LSN == nil || *m.Tables[0].LSN != 42 || m.RequestedBy != "acme" {
		t.Errorf("manifest %+v, body sha256 %s", m, sum)
	}
	if r := f.call(t, "GET", resp.Header.Get("X-Walhouse-Manifest"), keyGlobex, nil, nil); r.StatusCode != 404 {
		t.Errorf("another tenant read the manifest: %d", r.StatusCode)
	}
	// The kept manifest outlives the subject's erasure: it holds the
	// value only as its keyed hash.
	if m.Subject.Column != "customer_id" || m.Subject.Value == "cus_1" || !strings.HasPrefix(fmt.Sprint(m.Subject.Value), "hmac-sha256:") {
		t.Errorf("the kept manifest's subject %+v, want the value only as its keyed hash", m.Subject)
	}

	// A subject that exists only in another tenant: zero rows.
	resp, body := sendRead(t, "POST", f.srv.URL+"/v1/exports", keyAcme, strings.NewReader(`{"subject":{"column":"customer_id","value":"cus_globex_only"},"format":"csv"}`))
	if resp.StatusCode != 200 || resp.Trailer.Get(trailerRows) != "0" || strings.Count(string(body), "\n") != 1 {
		t.Errorf("cross-tenant subject: status %d, trailers %v, body %q", resp.StatusCode, resp.Trailer, body)
	}

	// Scope and validation.
	if r := f.call(t, "POST", "/v1/exports", keyNoExp, `{"subject":{"column":"customer_id","value":"cus_1"}}`, nil); r.StatusCode != 403 {
		t.Errorf("export without the export scope: %d", r.StatusCode)
	}
	var e queryResp
	if r := f.call(t, "POST", "/v1/exports", keyAcme, `{"subject":{"column":"customer_id; DROP","value":"x"}}`, &e); r.StatusCode != 400 || e.Error == nil {
		t.Errorf("export of an unknown column: %d %+v", r.StatusCode, e.Error)
	}

	// The library call (what `walhouse export` runs) hashes what it writes.
	var out bytes.Buffer
	m2, err := NewExporter(f.conn, f.db, []byte("audit-key-0123456789"), nil).Export(context.Background(), &out, ExportRequest{Tenant: "acme", Subject: Subject{Column: "customer_id", Value: "cus_1"}, Format: CSV, RequestedBy: "test"})
	if err != nil {
		t.Fatal(err)
	}
	s2 := sha256.Sum256(out.Bytes())
	if m2.SHA256 != hex.EncodeToString(s2[:]) || m2.Rows != n-1 || strings.Count(out.String(), "\n") != n {
		t.Errorf("library export: manifest %+v, %d lines", m2, strings.Count(out.String(), "\n"))
	}
}
