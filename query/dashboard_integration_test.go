package query

import (
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/walhouse/walhouse/schema"
)

// sourced is the column comment the sink writes on a column of the source
// table (schema.IsSourceColumn).
const sourced = " COMMENT 'walhouse:attnum=1,lsn=0/0'"

// createShopTable creates a walhouse-shaped table whose tenant column is a
// source column (open: every tenant may read it) or one walhouse added (a
// fixed tenant's table, --default-tenant).
func (f *chFixture) createShopTable(t *testing.T, name string, open bool) {
	t.Helper()
	comment := ""
	if open {
		comment = sourced
	}
	f.exec(t, fmt.Sprintf(`CREATE TABLE %s.%s (tenant_id String%s, id Int64%s, customer_id Nullable(String)%s,
		status Nullable(String)%s, amount Nullable(Decimal(12, 2))%s, created_at Nullable(DateTime64(6, 'UTC'))%s,
		_version UInt64, _is_deleted UInt8, _commit_ts DateTime64(6, 'UTC'), _synced_at DateTime64(6, 'UTC') DEFAULT now64(6))
		ENGINE = ReplacingMergeTree(_version, _is_deleted) ORDER BY (tenant_id, id)`,
		schema.QuoteIdent(f.db), schema.QuoteIdent(name), comment, comment, comment, comment, comment, comment))
}

// dataOf runs a read that must succeed and returns its rows.
func dataOf(t *testing.T, f *chFixture, key, table, req string) []map[string]any {
	t.Helper()
	out, code := f.query(t, key, table, req)
	if code != 200 {
		t.Fatalf("%s: status %d, %+v", req, code, out.Error)
	}
	return out.Data
}

func assertRows(t *testing.T, what string, got []map[string]any, want ...map[string]any) {
	t.Helper()
	if want == nil {
		want = []map[string]any{}
	}
	if got == nil {
		got = []map[string]any{}
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s:\n got %v\nwant %v", what, got, want)
	}
}

// TestIntegrationQueryDashboard: buckets in a zone, relative ranges,
// or/not groups, HAVING, uniqExact and quantile, each answered exactly by
// the real ClickHouse through the server walhouse serve runs.
func TestIntegrationQueryDashboard(t *testing.T) {
	f := newCHFixture(t)
	f.createShopTable(t, "shop", true)
	db := schema.QuoteIdent(f.db)
	f.exec(t, `INSERT INTO `+db+`.shop (tenant_id, id, customer_id, status, amount, created_at, _version, _is_deleted, _commit_ts) VALUES
		('acme', 1, 'c1', 'paid', 10.00, '2024-04-30 21:30:00', 1, 0, now64(6)),
		('acme', 2, 'c1', 'paid', 20.00, '2024-04-30 22:30:00', 1, 0, now64(6)),
		('acme', 3, 'c2', 'open', 30.00, '2024-05-01 10:00:00', 1, 0, now64(6)),
		('acme', 4, 'c3', NULL,   40.00, '2024-05-02 23:00:00', 1, 0, now64(6)),
		('acme', 5, 'c3', 'paid', 50.00, '2024-06-15 12:00:00', 1, 0, now64(6)),
		('acme', 6, 'c4', 'gone', 60.00, '2024-06-15 12:00:00', 1, 1, now64(6)),
		('globex', 1, 'g1', 'paid', 99.00, '2024-04-30 22:30:00', 1, 0, now64(6))`)
	f.exec(t, `INSERT INTO `+db+`.shop (tenant_id, id, customer_id, status, amount, created_at, _version, _is_deleted, _commit_ts) VALUES
		('acme', 10, 'r1', 'paid', 1.00, now64(6) - INTERVAL 1 HOUR, 1, 0, now64(6)),
		('acme', 11, 'r2', 'paid', 1.00, now64(6) - INTERVAL 3 DAY, 1, 0, now64(6)),
		('acme', 12, 'r3', 'paid', 1.00, now64(6) - INTERVAL 10 DAY, 1, 0, now64(6)),
		('globex', 10, 'g2', 'paid', 1.00, now64(6) - INTERVAL 1 HOUR, 1, 0, now64(6))`)
	fixed := `"filters":[{"column":"id","op":"<","value":10}]`

	// Orders per day in Paris: 21:30 UTC on 30 April is still 30 April
	// there, 22:30 UTC is 1 May; each bucket is the instant its day starts.
	got := dataOf(t, f, keyAcme, "shop", `{"buckets":[{"column":"created_at","unit":"day","timeZone":"Europe/Paris","as":"day"}],
		"groupBy":["day"],"aggregates":[{"fn":"count","as":"orders"}],`+fixed+`}`)
	assertRows(t, "orders per Paris day", got,
		map[string]any{"day": "2024-04-29T22:00:00Z", "orders": float64(1)},
		map[string]any{"day": "2024-04-30T22:00:00Z", "orders": float64(2)},
		map[string]any{"day": "2024-05-02T22:00:00Z", "orders": float64(1)},
		map[string]any{"day": "2024-06-14T22:00:00Z", "orders": float64(1)})
	got = dataOf(t, f, keyAcme, "shop", `{"buckets":[{"column":"created_at","unit":"day","as":"day"}],
		"groupBy":["day"],"aggregates":[{"fn":"count","as":"orders"}],`+fixed+`}`)
	assertRows(t, "orders per UTC day", got,
		map[string]any{"day": "2024-04-30T00:00:00Z", "orders": float64(2)},
		map[string]any{"day": "2024-05-01T00:00:00Z", "orders": float64(1)},
		map[string]any{"day": "2024-05-02T00:00:00Z", "orders": float64(1)},
		map[string]any{"day": "2024-06-15T00:00:00Z", "orders": float64(1)})
	got = dataOf(t, f, keyAcme, "shop", `{"buckets":[{"column":"created_at","unit":"month","timeZone":"Europe/Paris","as":"month"},
		{"column":"created_at","unit":"week","as":"week"}],
		"groupBy":["month","week"],"aggregates":[{"fn":"sum","column":"amount","as":"total"}],`+fixed+`}`)
	assertRows(t, "per Paris month and UTC week (Monday)", got,
		map[string]any{"month": "2024-03-31T22:00:00Z", "week": "2024-04-29T00:00:00Z", "total": "10"},
		map[string]any{"month": "2024-04-30T22:00:00Z", "week": "2024-04-29T00:00:00Z", "total": "90"},
		map[string]any{"month": "2024-05-31T22:00:00Z", "week": "2024-06-10T00:00:00Z", "total": "50"})
	got = dataOf(t, f, keyAcme, "shop", `{"buckets":[{"column":"created_at","unit":"hour","every":6,"as":"h"}],
		"columns":["id","h"],"filters":[{"column":"id","op":"in","value":[1,3]}]}`)
	assertRows(t, "a bucket among columns", got,
		map[string]any{"id": float64(1), "h": "2024-04-30T18:00:00Z"},
		map[string]any{"id": float64(3), "h": "2024-05-01T06:00:00Z"})

	// Relative ranges, against ClickHouse's clock.
	got = dataOf(t, f, keyAcme, "shop", `{"columns":["id"],"timeRange":{"column":"created_at","last":"7d"}}`)
	assertRows(t, "last 7d", got, map[string]any{"id": float64(10)}, map[string]any{"id": float64(11)})
	got = dataOf(t, f, keyAcme, "shop", `{"columns":["id"],"timeRange":{"column":"created_at","last":"24h"}}`)
	assertRows(t, "last 24h", got, map[string]any{"id": float64(10)})

	// Or and not: status paid or (status NULL and not amount < 35).
	got = dataOf(t, f, keyAcme, "shop", `{"columns":["id"],`+fixed[:len(fixed)-1]+`,
		{"or":[{"and":[{"column":"status","op":"=","value":"paid"},{"not":{"column":"id","op":"in","value":[2,5]}}]},
		       {"and":[{"column":"status","op":"is_null"},{"not":{"column":"amount","op":"<","value":"35"}}]}]}]}`)
	assertRows(t, "or/and/not", got, map[string]any{"id": float64(1)}, map[string]any{"id": float64(4)})
	// An or group cannot reach another tenant's rows.
	got = dataOf(t, f, keyAcme, "shop", `{"columns":["tenant_id","id"],"filters":[{"or":[{"column":"tenant_id","op":"=","value":"globex"},{"column":"id","op":"=","value":1}]}]}`)
	assertRows(t, "or across tenants", got, map[string]any{"tenant_id": "acme", "id": float64(1)})

	// HAVING, uniqExact, quantile.
	got = dataOf(t, f, keyAcme, "shop", `{"groupBy":["status"],`+fixed+`,
		"aggregates":[{"fn":"count","as":"n"},{"fn":"uniqExact","column":"customer_id","as":"customers"},{"fn":"quantile","column":"amount","q":0.5,"as":"median"}],
		"having":[{"or":[{"column":"n","op":">=","value":2},{"column":"median","op":">","value":"35"}]}],"orderBy":[{"column":"n","desc":true}]}`)
	assertRows(t, "having", got,
		map[string]any{"status": "paid", "n": float64(3), "customers": float64(2), "median": "20"},
		map[string]any{"status": nil, "n": float64(1), "customers": float64(1), "median": "40"})
}

// TestIntegrationQueryEmptyTable: a table whose tenant column comes from
// the source reads as empty for a tenant with no row there, the same
// answer whether another tenant has rows or nobody has; a table mapped to
// one fixed tenant stays unknown to every other tenant.
func TestIntegrationQueryEmptyTable(t *testing.T) {
	f := newCHFixture(t)
	db := schema.QuoteIdent(f.db)
	f.createShopTable(t, "invoices", true)     // globex has rows, acme none
	f.createShopTable(t, "refunds", true)      // nobody has rows
	f.createShopTable(t, "house_notes", false) // globex's alone
	f.exec(t, `INSERT INTO `+db+`.invoices (tenant_id, id, status, _version, _is_deleted, _commit_ts) VALUES ('globex', 1, 'paid', 1, 0, now64(6))`)
	f.exec(t, `INSERT INTO `+db+`.house_notes (tenant_id, id, status, _version, _is_deleted, _commit_ts) VALUES ('globex', 1, 'x', 1, 0, now64(6))`)

	req := `{"groupBy":["status"],"aggregates":[{"fn":"count","as":"n"}]}`
	var answers []queryResp
	for _, table := range []string{"invoices", "refunds"} {
		out, code := f.query(t, keyAcme, table, req)
		if code != 200 || out.Data == nil || len(out.Data) != 0 {
			t.Fatalf("%s read by a tenant with no rows: status %d, %v %+v; want 200 and no rows", table, code, out.Data, out.Error)
		}
		answers = append(answers, out)
	}
	if !reflect.DeepEqual(answers[0], answers[1]) {
		t.Errorf("the answer tells whether another tenant has rows:\n%+v\n%+v", answers[0], answers[1])
	}
	if got := dataOf(t, f, keyGlobex, "invoices", req); len(got) != 1 {
		t.Errorf("globex's own rows: %v", got)
	}
	out, code := f.query(t, keyAcme, "house_notes", req)
	if code != 400 || out.Error == nil || out.Error.Code != "unknown_table" {
		t.Errorf("another tenant's fixed table: %d %+v, want 400 unknown_table", code, out.Error)
	}
	if got := dataOf(t, f, keyGlobex, "house_notes", req); len(got) != 1 {
		t.Errorf("globex's own fixed table: %v", got)
	}

	var tables struct{ Tables []tableInfo }
	f.call(t, "GET", "/v1/tables", keyAcme, nil, &tables)
	var names []string
	for _, ti := range tables.Tables {
		names = append(names, ti.Name)
	}
	// orders and crm__odd names are the fixture's fixed-tenant tables,
	// with no row of acme.
	if want := []string{"invoices", "refunds"}; !reflect.DeepEqual(names, want) {
		t.Errorf("acme lists %v, want %v", names, want)
	}
}

// TestIntegrationQueryNewTenantLive: a browser dashboard of a new tenant,
// served from an allowed origin, works without a restart of the server: its
// key is added to the keys file and read again, its first read answers
// empty, and its first row then appears; the key revoked, it is refused.
func TestIntegrationQueryNewTenantLive(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys.json")
	acme := Key{ID: "acme", Hash: HashKey(keyAcme), Tenant: "acme", Scopes: []Scope{ScopeRead}}
	writeKeys(t, path, acme)
	kf, err := OpenKeyFile(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	const origin = "https://dash.example.com"
	f := newCHFixtureWith(t, func(c *Config) {
		c.Keys = kf
		c.CORS = CORS{AllowedOrigins: []string{origin}}
	})
	f.createShopTable(t, "shop", true)
	db := schema.QuoteIdent(f.db)
	f.exec(t, `INSERT INTO `+db+`.shop (tenant_id, id, status, _version, _is_deleted, _commit_ts) VALUES ('acme', 1, 'paid', 1, 0, now64(6))`)

	const initech = "wh_test_initech"
	read := func() (*http.Response, queryResp) {
		req, _ := http.NewRequest("POST", f.srv.URL+"/v1/tables/shop/query", strings.NewReader(`{"columns":["tenant_id","id"]}`))
		req.Header.Set("Authorization", "Bearer "+initech)
		req.Header.Set("Origin", origin)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out queryResp
		_ = json.NewDecoder(resp.Body).Decode(&out)
		return resp, out
	}
	if resp, _ := read(); resp.StatusCode != 401 {
		t.Fatalf("a key not in the file yet: %d, want 401", resp.StatusCode)
	}

	// The browser's preflight, then the new tenant's key goes live.
	pre, _ := http.NewRequest("OPTIONS", f.srv.URL+"/v1/tables/shop/query", nil)
	pre.Header.Set("Origin", origin)
	pre.Header.Set("Access-Control-Request-Method", "POST")
	pre.Header.Set("Access-Control-Request-Headers", "authorization, content-type")
	presp, err := http.DefaultClient.Do(pre)
	if err != nil {
		t.Fatal(err)
	}
	presp.Body.Close()
	if presp.StatusCode != 204 || presp.Header.Get("Access-Control-Allow-Origin") != origin {
		t.Fatalf("preflight: %d, Allow-Origin %q", presp.StatusCode, presp.Header.Get("Access-Control-Allow-Origin"))
	}
	writeKeys(t, path, acme, Key{ID: "initech", Hash: HashKey(initech), Tenant: "initech", Scopes: []Scope{ScopeRead}})
	if _, err := kf.Reload(); err != nil {
		t.Fatal(err)
	}
	resp, out := read()
	if resp.StatusCode != 200 || out.Data == nil || len(out.Data) != 0 || resp.Header.Get("Access-Control-Allow-Origin") != origin {
		t.Fatalf("the new tenant's first read: %d %v %+v (Allow-Origin %q), want 200 and no rows", resp.StatusCode, out.Data, out.Error, resp.Header.Get("Access-Control-Allow-Origin"))
	}
	f.exec(t, `INSERT INTO `+db+`.shop (tenant_id, id, status, _version, _is_deleted, _commit_ts) VALUES ('initech', 7, 'open', 1, 0, now64(6))`)
	_, out = read()
	assertRows(t, "the new tenant's first row", out.Data, map[string]any{"tenant_id": "initech", "id": float64(7)})

	writeKeys(t, path, acme)
	if _, err := kf.Reload(); err != nil {
		t.Fatal(err)
	}
	if resp, _ := read(); resp.StatusCode != 401 {
		t.Fatalf("a revoked key: %d, want 401", resp.StatusCode)
	}
}

// TestIntegrationQueryJWT: a bearer JWT reads its claim's tenant's rows and
// no other's, beside the API keys.
func TestIntegrationQueryJWT(t *testing.T) {
	iss := newTestIssuer(t)
	f := newCHFixtureWith(t, func(c *Config) { c.JWT = iss.auth(t) })
	f.createShopTable(t, "shop", true)
	f.exec(t, `INSERT INTO `+schema.QuoteIdent(f.db)+`.shop (tenant_id, id, status, _version, _is_deleted, _commit_ts) VALUES
		('acme', 1, 'paid', 1, 0, now64(6)), ('globex', 2, 'paid', 1, 0, now64(6))`)
	token := iss.sign(t, jwt.MapClaims{"sub": "u1", "org": "globex", "iss": "https://id.example.com", "aud": "walhouse", "exp": time.Now().Add(time.Hour).Unix()})
	got := dataOf(t, f, token, "shop", `{"columns":["tenant_id","id"],"filters":[{"column":"tenant_id","op":"in","value":["acme","globex"]}]}`)
	assertRows(t, "a JWT of globex", got, map[string]any{"tenant_id": "globex", "id": float64(2)})
	got = dataOf(t, f, keyAcme, "shop", `{"columns":["tenant_id","id"]}`)
	assertRows(t, "acme's API key beside", got, map[string]any{"tenant_id": "acme", "id": float64(1)})
}
