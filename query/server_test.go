package query

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/walhouse/walhouse/schema"
)

// failingConn is a ClickHouse that answers every query with err.
type failingConn struct{ err error }

func (f failingConn) Query(ctx context.Context, q string, args ...any) (driver.Rows, error) {
	return nil, f.err
}

func newTestServer(t *testing.T, conn Conn) *httptest.Server {
	t.Helper()
	s, err := NewServer(Config{Conn: conn, Database: "walhouse", Keys: testKeys(t), CursorSecret: []byte("0123456789abcdef")})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	return srv
}

// send sends a request to url with key as its bearer token (none when
// empty) and returns the response; the caller reads and closes its body.
func send(t *testing.T, method, url, key string, body io.Reader) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// sendRead is send that reads the whole body, and closes it.
func sendRead(t *testing.T, method, url, key string, body io.Reader) (*http.Response, []byte) {
	t.Helper()
	resp := send(t, method, url, key, body)
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read the body: %v", method, url, err)
	}
	return resp, data
}

func do(t *testing.T, srv *httptest.Server, method, path, key, body string) (*http.Response, map[string]any) {
	t.Helper()
	resp := send(t, method, srv.URL+path, key, strings.NewReader(body))
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var out map[string]any
	_ = json.Unmarshal(data, &out)
	return resp, out
}

func TestServerErrors(t *testing.T) {
	unavailable := failingConn{err: errConnRefused}
	timeout := failingConn{err: &ch.Exception{Code: chTimeoutExceeded, Message: "Timeout exceeded: SELECT secret FROM x"}}
	broken := failingConn{err: &ch.Exception{Code: 47, Message: "Missing columns: 'x' while processing query: 'SELECT x FROM t'"}}
	tests := []struct {
		name       string
		conn       Conn
		method     string
		path, key  string
		status     int
		code       string
		retryAfter bool
	}{
		{"no key", unavailable, "GET", "/v1/tables", "", 401, "unauthenticated", false},
		{"unknown key", unavailable, "GET", "/v1/tables", "nope", 401, "unauthenticated", false},
		{"missing scope", unavailable, "GET", "/v1/lag", keyAcme, 403, "forbidden", false},
		{"export scope", unavailable, "POST", "/v1/exports", keyNoExp, 403, "forbidden", false},
		{"ClickHouse down", unavailable, "GET", "/v1/tables", keyAcme, 503, "unavailable", true},
		{"ClickHouse down, lag", unavailable, "GET", "/v1/lag", keyAdmin, 503, "unavailable", true},
		{"timeout", timeout, "GET", "/v1/tables", keyAcme, 400, "query_timeout", false},
		{"server error", broken, "GET", "/v1/tables", keyAcme, 500, "internal", false},
		{"no route", unavailable, "GET", "/v2/nothing", keyAcme, 404, "not_found", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := newTestServer(t, tt.conn)
			resp, body := do(t, srv, tt.method, tt.path, tt.key, "")
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d (%v)", resp.StatusCode, tt.status, body)
			}
			e, _ := body["error"].(map[string]any)
			if e == nil || e["code"] != tt.code || e["requestId"] != resp.Header.Get("X-Request-Id") || e["requestId"] == "" {
				t.Errorf("error %v, want code %s and the request id", body, tt.code)
			}
			if msg, _ := e["message"].(string); strings.Contains(msg, "SELECT") || strings.Contains(msg, "Missing columns") {
				t.Errorf("message leaks server detail: %q", msg)
			}
			if got := resp.Header.Get("Retry-After") != ""; got != tt.retryAfter {
				t.Errorf("Retry-After present = %v, want %v", got, tt.retryAfter)
			}
		})
	}
}

var errConnRefused = errors.Join(syscall.ECONNREFUSED)

func TestSlots(t *testing.T) {
	sl := newSlots(3)
	r1, err1 := sl.acquire("a", 2)
	_, err2 := sl.acquire("a", 2)
	_, err3 := sl.acquire("a", 2)
	_, errB := sl.acquire("b", 2)
	_, errC := sl.acquire("c", 2) // a, a, b hold all 3 of the server's
	if err1 != nil || err2 != nil || !errors.Is(err3, errTenantBusy) || errB != nil || !errors.Is(errC, errServerBusy) {
		t.Fatalf("acquire: %v %v %v %v %v", err1, err2, err3, errB, errC)
	}
	r1()
	r1() // a second release changes nothing
	if _, err := sl.acquire("c", 2); err != nil {
		t.Fatalf("a released slot is not reusable: %v", err)
	}
	if _, err := sl.acquire("a", 2); !errors.Is(err, errServerBusy) {
		t.Fatalf("a released twice freed two slots: %v", err)
	}
}

func TestCursors(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	c := NewCursors([]byte("secret-secret-secret"), time.Hour)
	c.now = func() time.Time { return now }
	req := Request{Columns: []string{"id"}, Limit: 10}
	cur := c.Mint("acme", "orders", req, 30)
	if off, err := c.Verify(cur, "acme", "orders", req); err != nil || off != 30 {
		t.Fatalf("verify: %d %v", off, err)
	}
	other := NewCursors([]byte("another-secret-key"), time.Hour)
	tests := []struct {
		name, cursor, tenant, table string
		req                         Request
		c                           *Cursors
	}{
		{"other tenant", cur, "globex", "orders", req, c},
		{"other table", cur, "acme", "customers", req, c},
		{"other request", cur, "acme", "orders", Request{Columns: []string{"id", "x"}, Limit: 10}, c},
		{"other key", cur, "acme", "orders", req, other},
		{"garbage", "abc", "acme", "orders", req, c},
		{"tampered", "e30." + strings.SplitN(cur, ".", 2)[1], "acme", "orders", req, c},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := tt.c.Verify(tt.cursor, tt.tenant, tt.table, tt.req); !errors.Is(err, ErrInvalidCursor) {
				t.Fatalf("err = %v, want ErrInvalidCursor", err)
			}
		})
	}
	// The cursor itself is not part of the shape.
	withCursor := req
	withCursor.Cursor = cur
	if _, err := c.Verify(cur, "acme", "orders", withCursor); err != nil {
		t.Fatalf("cursor in the request changed its shape: %v", err)
	}
	now = now.Add(2 * time.Hour)
	if _, err := c.Verify(cur, "acme", "orders", req); !errors.Is(err, ErrInvalidCursor) {
		t.Fatal("an expired cursor was accepted")
	}
}

func TestParseKeys(t *testing.T) {
	h := HashKey("k")
	tests := []struct {
		name, file string
		ok         bool
	}{
		{"valid", `[{"id":"a","hash":"` + h + `","tenant":"acme","scopes":["read","export"]},{"id":"ops","hash":"` + HashKey("o") + `","scopes":["admin"]}]`, true},
		{"no tenant", `[{"id":"a","hash":"` + h + `","scopes":["read"]}]`, false},
		{"bad hash", `[{"id":"a","hash":"xyz","tenant":"t","scopes":["read"]}]`, false},
		{"bad scope", `[{"id":"a","hash":"` + h + `","tenant":"t","scopes":["write"]}]`, false},
		{"duplicate id", `[{"id":"a","hash":"` + h + `","tenant":"t","scopes":["read"]},{"id":"a","hash":"` + HashKey("x") + `","tenant":"t","scopes":["read"]}]`, false},
		{"unknown field", `[{"id":"a","hash":"` + h + `","tenant":"t","scopes":["read"],"secret":"k"}]`, false},
		{"not an array", `{}`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k, err := ParseKeys([]byte(tt.file))
			if (err == nil) != tt.ok {
				t.Fatalf("err = %v, want ok=%v", err, tt.ok)
			}
			if tt.ok {
				if key, ok := k.Lookup("k"); !ok || key.Tenant != "acme" {
					t.Errorf("lookup: %+v %v", key, ok)
				}
				if _, ok := k.Lookup(h); ok {
					t.Error("the hash itself authenticated")
				}
			}
		})
	}
}

func TestParseColType(t *testing.T) {
	tests := []struct {
		typ      string
		kind     valueKind
		param    string
		nullable bool
	}{
		{"String", kindString, "String", false},
		{"LowCardinality(Nullable(String))", kindString, "String", true},
		{"Nullable(Int32)", kindInt, "Int32", true},
		{"UInt64", kindInt, "UInt64", false},
		{"Nullable(Decimal(12, 2))", kindDecimal, "Decimal(12, 2)", true},
		{"Decimal64(4)", kindDecimal, "Decimal(18, 4)", false},
		{"DateTime64(6, 'UTC')", kindDateTime, dateTimeParam, false},
		{"DateTime", kindDateTime, dateTimeParam, false},
		{"Date32", kindDate, "Date32", false},
		{"Nullable(UUID)", kindUUID, "UUID", true},
		{"Bool", kindBool, "Bool", false},
		{"Enum8('a' = 1)", kindString, "String", false},
		{"Array(Nullable(String))", kindOther, "", false},
		{"Map(String, String)", kindOther, "", false},
		{"Nullable(String) ) OR 1", kindOther, "", false},
	}
	for _, tt := range tests {
		got := parseColType(tt.typ)
		if got.Kind != tt.kind || got.Param != tt.param || got.Nullable != tt.nullable {
			t.Errorf("%s: kind %v param %q nullable %v, want %v %q %v", tt.typ, got.Kind, got.Param, got.Nullable, tt.kind, tt.param, tt.nullable)
		}
	}
}

func TestBindValue(t *testing.T) {
	tests := []struct {
		typ  string
		in   any
		want string
		ok   bool
	}{
		{"Int8", json.Number("127"), "127", true},
		{"Int8", json.Number("128"), "", false},
		{"UInt8", json.Number("-1"), "", false},
		{"Int64", "9223372036854775807", "9223372036854775807", true},
		{"Int64", json.Number("1.5"), "", false},
		{"Float64", json.Number("1e3"), "1000", true},
		{"Decimal(5, 2)", json.Number("123.45"), "123.45", true},
		{"Decimal(5, 2)", json.Number("1234.5"), "", false},
		{"Decimal(5, 2)", json.Number("1e2"), "", false},
		{"String", "a\\b\tc\n", `a\\b\tc\n`, true},
		{"String", json.Number("1"), "", false},
		{"Bool", true, "true", true},
		{"Bool", "true", "", false},
		{"UUID", "7F1B6E3A-0000-4000-8000-000000000001", "7f1b6e3a-0000-4000-8000-000000000001", true},
		{"Date32", "2024-02-29", "2024-02-29", true},
		{"Date32", "2024-02-30", "", false},
		{"DateTime64(6, 'UTC')", "2024-05-01T12:00:00.123456+02:00", "2024-05-01 10:00:00.123456", true},
		{"DateTime64(6, 'UTC')", "2024-05-01", "2024-05-01 00:00:00.000000", true},
		{"DateTime64(6, 'UTC')", "yesterday", "", false},
		{"Array(String)", "x", "", false},
	}
	for _, tt := range tests {
		got, err := parseColType(tt.typ).bindValue(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("%s %v: %q, %v; want %q ok=%v", tt.typ, tt.in, got, err, tt.want, tt.ok)
		}
	}
}

func TestSplitSortingKey(t *testing.T) {
	tests := map[string][]string{
		"tenant_id, id":                    {"tenant_id", "id"},
		"`odd, name`, id":                  {"odd, name", "id"},
		"tenant_id, `we\\`ird`, toDate(x)": {"tenant_id", "we`ird", "toDate(x)"},
		"":                                 nil,
	}
	for in, want := range tests {
		got := schema.SplitSortingKey(in)
		if strings.Join(got, "|") != strings.Join(want, "|") {
			t.Errorf("%q: %q, want %q", in, got, want)
		}
	}
}

func TestOpenAPIMatchesRoutes(t *testing.T) {
	var doc struct {
		Paths map[string]map[string]any `json:"paths"`
	}
	if err := json.Unmarshal(openAPIJSON, &doc); err != nil {
		t.Fatal(err)
	}
	routes := map[string]string{
		"/v1/tables": "get", "/v1/tables/{table}/query": "post", "/v1/exports": "post",
		"/v1/exports/{id}/manifest": "get", "/v1/erasures": "post", "/v1/erasures/{id}": "get", "/v1/lag": "get", "/v1/lag/history": "get", "/metrics": "get", "/status": "get", "/openapi.json": "get",
		"/examples/orders": "get",
	}
	if len(doc.Paths) != len(routes) {
		t.Errorf("openapi.json has %d paths, the server %d", len(doc.Paths), len(routes))
	}
	for p, m := range routes {
		if _, ok := doc.Paths[p][m]; !ok {
			t.Errorf("openapi.json lacks %s %s", m, p)
		}
	}
	srv := newTestServer(t, failingConn{err: syscall.ECONNREFUSED})
	for _, p := range []string{"/openapi.json", "/status", "/examples/orders", "/examples/"} {
		if resp, _ := do(t, srv, "GET", p, "", ""); resp.StatusCode != 200 {
			t.Errorf("GET %s: %d", p, resp.StatusCode)
		}
	}
}

func TestLSN(t *testing.T) {
	for _, s := range []string{"0/0", "16/B374D848", "FFFFFFFF/FFFFFFFF"} {
		l, err := ParseLSN(s)
		if err != nil || l.String() != s {
			t.Errorf("%s: %v %v", s, l, err)
		}
	}
	for _, s := range []string{"", "1", "x/1", "1/100000000"} {
		if _, err := ParseLSN(s); err == nil {
			t.Errorf("%q parsed", s)
		}
	}
}

// A body over the limit is refused as too large, not as broken JSON.
func TestBodyTooLarge(t *testing.T) {
	srv := newTestServer(t, failingConn{err: errConnRefused})
	for _, body := range []string{strings.Repeat(" ", maxBody+1) + "{}", `{"subject":"` + strings.Repeat("x", maxBody) + `"}`} {
		resp, out := do(t, srv, "POST", "/v1/exports", keyAcme, body)
		e, _ := out["error"].(map[string]any)
		if resp.StatusCode != http.StatusRequestEntityTooLarge || e == nil || e["code"] != "body_too_large" {
			t.Errorf("body of %d bytes: status %d, %v; want 413 body_too_large", len(body), resp.StatusCode, out)
		}
	}
	if resp, _ := do(t, srv, "POST", "/v1/exports", keyAcme, strings.Repeat(" ", maxBody-10)+"{}"); resp.StatusCode == http.StatusRequestEntityTooLarge {
		t.Errorf("a body within the limit was refused as too large")
	}
}

func TestClip(t *testing.T) {
	for _, tc := range []struct {
		s    string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"exactly10!", 10, "exactly10!"},
		{"abcdefghijkl", 5, "abcde… (7 more bytes)"},
		{"ééééé", 3, "é… (8 more bytes)"}, // never splits a rune
	} {
		if got := clip(tc.s, tc.n); got != tc.want {
			t.Errorf("clip(%q, %d) = %q, want %q", tc.s, tc.n, got, tc.want)
		}
	}
}

// An error that quotes a huge input answers with a bounded message.
func TestErrorMessageIsBounded(t *testing.T) {
	srv := newTestServer(t, failingConn{err: errConnRefused})
	body := `{"subject":{"column":"customer_id","value":"c"},"format":"` + strings.Repeat("z", 200_000) + `"}`
	resp, out := do(t, srv, "POST", "/v1/exports", keyAcme, body)
	e, _ := out["error"].(map[string]any)
	msg, _ := e["message"].(string)
	if resp.StatusCode != http.StatusBadRequest || msg == "" || len(msg) > 1100 {
		t.Errorf("status %d, message of %d bytes; want 400 with at most about %d", resp.StatusCode, len(msg), maxMessage)
	}
}

// TestExampleDashboardCSP: the example page may connect to serve and to
// the write API of its ?write= parameter only; a parameter that could add
// to the policy is left out.
func TestExampleDashboardCSP(t *testing.T) {
	srv := newTestServer(t, failingConn{err: syscall.ECONNREFUSED})
	for _, c := range []struct{ query, connect string }{
		{"", "connect-src 'self';"},
		{"?write=http://localhost:8090/", "connect-src 'self' http://localhost:8090;"},
		{"?write=https://orders.example.com/api", "connect-src 'self' https://orders.example.com;"},
		{"?write=http://[::1]:8090", "connect-src 'self' http://[::1]:8090;"},
		{"?write=" + url.QueryEscape("http://a.example; script-src *"), "connect-src 'self';"},
		{"?write=" + url.QueryEscape("javascript:alert(1)"), "connect-src 'self';"},
		{"?write=" + url.QueryEscape("http://u:p@a.example"), "connect-src 'self';"},
	} {
		for _, path := range []string{"/examples/orders", "/examples/"} {
			resp := send(t, "GET", srv.URL+path+c.query, "", nil)
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			csp := resp.Header.Get("Content-Security-Policy")
			if resp.StatusCode != 200 || !strings.Contains(csp, c.connect) || !strings.Contains(csp, "default-src 'none'") || !strings.Contains(string(body), "Data as of") {
				t.Errorf("%s%s: %d, CSP %q; want %q", path, c.query, resp.StatusCode, csp, c.connect)
			}
		}
	}
}
