package query

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// blockingConn is a ClickHouse whose queries wait until release is
// closed, then fail; entered receives one value per query that started.
type blockingConn struct {
	entered chan struct{}
	release chan struct{}
}

func (b *blockingConn) Query(ctx context.Context, q string, args ...any) (driver.Rows, error) {
	b.entered <- struct{}{}
	select {
	case <-b.release:
	case <-ctx.Done():
	}
	return nil, errConnRefused
}

// TestGlobalCapBeforeParsing: with the server's one slot held by a
// tenant, another tenant's request is refused with 429 and Retry-After
// before its body (a 1 MB filter value) is parsed: it gets server_busy,
// not the bad_request that parsing the body would give.
func TestGlobalCapBeforeParsing(t *testing.T) {
	conn := &blockingConn{entered: make(chan struct{}, 16), release: make(chan struct{})}
	s, err := NewServer(Config{Conn: conn, Database: "walhouse", Keys: testKeys(t), CursorSecret: []byte(testCursorSecret), MaxInFlight: 1})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s)
	defer srv.Close()
	held := make(chan int, 1)
	go func() {
		resp, _ := do(t, srv, "GET", "/v1/tables", keyAcme, "")
		held <- resp.StatusCode
	}()
	<-conn.entered // acme's listing runs in the server's only slot

	big := `{"filters":[{"column":"status","op":"=","value":"` + strings.Repeat("x", 1<<20-200) + `"}],"unknownField":1}`
	for _, tc := range []struct{ method, path, body string }{
		{"POST", "/v1/tables/orders/query", big},
		{"POST", "/v1/exports", big},
		{"GET", "/v1/tables", ""},
	} {
		resp, body := do(t, srv, tc.method, tc.path, keyGlobex, tc.body)
		e, _ := body["error"].(map[string]any)
		if resp.StatusCode != http.StatusTooManyRequests || e["code"] != "server_busy" || resp.Header.Get("Retry-After") == "" {
			t.Errorf("%s %s while the server is full: %d %v (Retry-After %q), want 429 server_busy with Retry-After", tc.method, tc.path, resp.StatusCode, e, resp.Header.Get("Retry-After"))
		}
	}
	close(conn.release)
	if code := <-held; code != http.StatusServiceUnavailable {
		t.Errorf("the held request ended with %d, want 503 from its failing ClickHouse", code)
	}
	// The slot is free again: the big body is now parsed, and refused.
	resp, body := do(t, srv, "POST", "/v1/tables/orders/query", keyGlobex, big)
	if e, _ := body["error"].(map[string]any); resp.StatusCode != http.StatusBadRequest || e["code"] != "bad_request" {
		t.Errorf("after the slot was released: %d %v, want 400 bad_request", resp.StatusCode, e)
	}
}

// TestSafeHeaders: every response, JSON, error, export or page, says
// nosniff and no-store.
func TestSafeHeaders(t *testing.T) {
	srv := newTestServer(t, failingConn{err: errConnRefused})
	for _, tc := range []struct{ method, path, key string }{
		{"GET", "/v1/tables", keyAcme},
		{"GET", "/v1/tables", ""},
		{"POST", "/v1/tables/orders/query", keyAcme},
		{"POST", "/v1/exports", keyAcme},
		{"GET", "/v1/exports/exp_x/manifest", keyAcme},
		{"GET", "/v1/lag", keyAdmin},
		{"GET", "/v1/lag/history", keyAdmin},
		{"GET", "/metrics", keyAdmin},
		{"GET", "/openapi.json", ""},
		{"GET", "/status", ""},
		{"GET", "/nowhere", ""},
	} {
		resp, _ := do(t, srv, tc.method, tc.path, tc.key, "{}")
		if got := resp.Header.Get("X-Content-Type-Options"); got != "nosniff" {
			t.Errorf("%s %s (%d): X-Content-Type-Options %q, want nosniff", tc.method, tc.path, resp.StatusCode, got)
		}
		if got := resp.Header.Get("Cache-Control"); got != "no-store" {
			t.Errorf("%s %s (%d): Cache-Control %q, want no-store", tc.method, tc.path, resp.StatusCode, got)
		}
	}
}

// TestHTTPServerBounds: the server HTTPServer returns refuses oversized
// headers (431) and cuts a client that sends its body too slowly, by
// default and as configured.
func TestHTTPServerBounds(t *testing.T) {
	start := func(t *testing.T, h HTTPLimits) *httptest.Server {
		s, err := NewServer(Config{Conn: failingConn{err: errConnRefused}, Database: "walhouse", Keys: testKeys(t), CursorSecret: []byte(testCursorSecret), HTTP: h})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewUnstartedServer(nil)
		srv.Config = s.HTTPServer()
		srv.Start()
		t.Cleanup(srv.Close)
		return srv
	}
	t.Run("defaults", func(t *testing.T) {
		srv := start(t, HTTPLimits{})
		c := srv.Config
		if c.ReadHeaderTimeout != 10*time.Second || c.ReadTimeout != 30*time.Second || c.WriteTimeout != time.Minute || c.IdleTimeout != 2*time.Minute || c.MaxHeaderBytes != 64<<10 {
			t.Errorf("defaults: %+v", c)
		}
		req, _ := http.NewRequest("GET", srv.URL+"/v1/tables", nil)
		req.Header.Set("Authorization", "Bearer "+keyAcme)
		req.Header.Set("X-Padding", strings.Repeat("p", 100<<10))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
			t.Errorf("100 KiB of headers: status %d, want 431", resp.StatusCode)
		}
	})
	t.Run("slow body", func(t *testing.T) {
		srv := start(t, HTTPLimits{ReadTimeout: 300 * time.Millisecond})
		c, err := net.Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		// Promise 100 bytes of body, send 2, then stall.
		fmt.Fprintf(c, "POST /v1/tables/orders/query HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: 100\r\n\r\n{\"", keyAcme)
		_ = c.SetReadDeadline(time.Now().Add(20 * time.Second)) // far beyond the server's 300 ms
		// The server gives up on the body: it answers or closes the
		// connection, either way long before the client's deadline.
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
			t.Fatalf("the server still waits for a body stalled for 20 s: %v", err)
		}
		if err == nil {
			resp.Body.Close()
		}
	})
}

func TestCSVSafe(t *testing.T) {
	for in, want := range map[string]string{
		"":                       "",
		"plain":                  "plain",
		"=1+2":                   "'=1+2",
		"+SUM(A1)":               "'+SUM(A1)",
		"-2+3+cmd|' /C calc'!A0": "'-2+3+cmd|' /C calc'!A0",
		"@SUM(1)":                "'@SUM(1)",
		"\tx":                    "'\tx",
		"\rx":                    "'\rx",
		"-12.50":                 "-12.50",
		"+3e4":                   "+3e4",
		"-.5":                    "-.5",
		"-":                      "'-",
		"a=b":                    "a=b",
		"'=already":              "'=already",
	} {
		if got := csvSafe(in); got != want {
			t.Errorf("csvSafe(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestAuditKey: a server's own audit key wins; without one it is derived
// from the cursor secret (the same for serve, export and --audit-hash);
// with neither there is none.
func TestAuditKey(t *testing.T) {
	own, secret := []byte("own-audit-key-0123456"), []byte(testCursorSecret)
	if got := AuditKey(own, secret); string(got) != string(own) {
		t.Errorf("with a key of its own: %x", got)
	}
	derived := AuditKey(nil, secret)
	if len(derived) != 32 || string(derived) == string(secret) || string(AuditKey(nil, secret)) != string(derived) {
		t.Errorf("derived from the cursor secret: %x, want 32 bytes, stable, not the secret", derived)
	}
	if got := AuditKey(nil, nil); got != nil {
		t.Errorf("with neither: %x, want none", got)
	}
}

func TestAuditHash(t *testing.T) {
	k := AuditKey(nil, []byte(testCursorSecret))
	h := AuditHash(k, "cus_1")
	if len(h) != 64 || strings.Contains(h, "cus_1") {
		t.Fatalf("AuditHash = %q", h)
	}
	if AuditHash(k, "cus_1") != h || AuditHash(k, "cus_2") == h || AuditHash([]byte("another-key-0123456"), "cus_1") == h {
		t.Error("AuditHash is not a keyed function of the value")
	}
}
