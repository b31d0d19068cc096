package query

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestCORS(t *testing.T) {
	s, err := NewServer(Config{Conn: failingConn{err: errConnRefused}, Database: "walhouse", Keys: testKeys(t), CursorSecret: []byte(testCursorSecret),
		CORS: CORS{AllowedOrigins: []string{"https://dash.example.com"}, AllowHeaders: []string{"X-Walhouse-Token"}}})
	if err != nil {
		t.Fatal(err)
	}
	const good, bad = "https://dash.example.com", "https://evil.example.com"
	tests := []struct {
		name, method, origin, reqMethod string
		key                             string
		status                          int
		allowOrigin                     string
		wantHeaders                     map[string]string
	}{
		{name: "preflight allowed", method: "OPTIONS", origin: good, reqMethod: "POST", status: 204, allowOrigin: good,
			wantHeaders: map[string]string{"Access-Control-Allow-Methods": "GET, POST, OPTIONS", "Access-Control-Allow-Headers": "Authorization, Content-Type, Idempotency-Key, X-Walhouse-Token", "Access-Control-Max-Age": "600"}},
		{name: "preflight other origin", method: "OPTIONS", origin: bad, reqMethod: "POST", status: 403},
		{name: "preflight origin prefix", method: "OPTIONS", origin: good + ".evil.com", reqMethod: "POST", status: 403},
		{name: "call allowed", method: "GET", origin: good, key: keyAdmin, status: 200, allowOrigin: good,
			wantHeaders: map[string]string{"Access-Control-Expose-Headers": "X-Request-Id, Retry-After, X-Walhouse-Consistency"}},
		{name: "call allowed still needs a key", method: "GET", origin: good, status: 401, allowOrigin: good},
		{name: "call other origin", method: "GET", origin: bad, key: keyAdmin, status: 200},
		{name: "no origin", method: "GET", key: keyAdmin, status: 200},
		{name: "options without preflight", method: "OPTIONS", origin: good, status: 404, allowOrigin: good},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest(tt.method, "/metrics", nil)
			if tt.origin != "" {
				r.Header.Set("Origin", tt.origin)
			}
			if tt.reqMethod != "" {
				r.Header.Set("Access-Control-Request-Method", tt.reqMethod)
				r.Header.Set("Access-Control-Request-Headers", "authorization, content-type")
			}
			if tt.key != "" {
				r.Header.Set("Authorization", "Bearer "+tt.key)
			}
			w := httptest.NewRecorder()
			s.ServeHTTP(w, r)
			if w.Code != tt.status {
				t.Errorf("status %d, want %d: %s", w.Code, tt.status, w.Body)
			}
			if got := w.Header().Get("Access-Control-Allow-Origin"); got != tt.allowOrigin {
				t.Errorf("Access-Control-Allow-Origin %q, want %q", got, tt.allowOrigin)
			}
			for k, v := range tt.wantHeaders {
				if got := w.Header().Get(k); got != v {
					t.Errorf("%s %q, want %q", k, got, v)
				}
			}
			if tt.origin != "" && !strings.Contains(strings.Join(w.Header().Values("Vary"), ","), "Origin") {
				t.Errorf("no Vary: Origin on an answer that depends on it")
			}
		})
	}
}

func TestCORSDisabledByDefault(t *testing.T) {
	srv := newTestServer(t, failingConn{err: errConnRefused})
	req, _ := http.NewRequest("OPTIONS", srv.URL+"/v1/tables", nil)
	req.Header.Set("Origin", "https://dash.example.com")
	req.Header.Set("Access-Control-Request-Method", "GET")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.Header.Get("Access-Control-Allow-Origin") != "" || resp.StatusCode < 400 {
		t.Errorf("without CORS configured, a preflight got %d, Allow-Origin %q", resp.StatusCode, resp.Header.Get("Access-Control-Allow-Origin"))
	}
}

func TestCORSWildcardAndValidation(t *testing.T) {
	h := withCORS(CORS{AllowedOrigins: []string{"*"}}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	r := httptest.NewRequest("OPTIONS", "/v1/tables", nil)
	r.Header.Set("Origin", "http://localhost:3000")
	r.Header.Set("Access-Control-Request-Method", "GET")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != 204 || w.Header().Get("Access-Control-Allow-Origin") != "http://localhost:3000" {
		t.Errorf("wildcard preflight: %d %q", w.Code, w.Header().Get("Access-Control-Allow-Origin"))
	}
	for _, o := range []string{"dash.example.com", "https://dash.example.com/", "https://dash.example.com/path", "ftp://x", "https://u:p@x", ""} {
		if len((CORS{AllowedOrigins: []string{o}}).validate()) == 0 {
			t.Errorf("origin %q accepted", o)
		}
	}
	for _, o := range []string{"*", "https://dash.example.com", "http://localhost:3000"} {
		if p := (CORS{AllowedOrigins: []string{o}}).validate(); len(p) != 0 {
			t.Errorf("origin %q refused: %v", o, p)
		}
	}
}
