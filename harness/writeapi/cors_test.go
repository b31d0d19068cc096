package writeapi

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestAllowOrigins: a preflight from the allowed origin gets the methods
// and headers a page writes with, its answers expose the consistency
// token; another origin's preflight is refused and its requests carry no
// CORS header; "*" and paths are refused as origins.
func TestAllowOrigins(t *testing.T) {
	served := 0
	h, err := AllowOrigins([]string{"http://dash.example:8080"}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served++
		w.Header().Set("Walhouse-Consistency-Token", "wh1.1.2.0/1")
		w.WriteHeader(http.StatusCreated)
	}))
	if err != nil {
		t.Fatal(err)
	}
	do := func(method, origin string, preflight bool) *httptest.ResponseRecorder {
		r := httptest.NewRequest(method, "/orders", nil)
		if origin != "" {
			r.Header.Set("Origin", origin)
		}
		if preflight {
			r.Header.Set("Access-Control-Request-Method", "POST")
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	w := do("OPTIONS", "http://dash.example:8080", true)
	if w.Code != 204 || w.Header().Get("Access-Control-Allow-Origin") != "http://dash.example:8080" ||
		w.Header().Get("Access-Control-Allow-Headers") != "Content-Type, Idempotency-Key, X-Tenant" || served != 0 {
		t.Errorf("allowed preflight: %d %v, served %d", w.Code, w.Header(), served)
	}
	w = do("POST", "http://dash.example:8080", false)
	if w.Code != 201 || w.Header().Get("Access-Control-Expose-Headers") != "Walhouse-Consistency-Token, Idempotency-Replayed" || served != 1 {
		t.Errorf("allowed POST: %d %v", w.Code, w.Header())
	}
	w = do("OPTIONS", "http://evil.example", true)
	if w.Code != 403 || w.Header().Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("other origin's preflight: %d %v", w.Code, w.Header())
	}
	w = do("POST", "http://evil.example", false)
	if w.Header().Get("Access-Control-Allow-Origin") != "" || w.Header().Get("Access-Control-Expose-Headers") != "" {
		t.Errorf("other origin's POST carries CORS headers: %v", w.Header())
	}
	w = do("POST", "", false)
	if w.Code != 201 || w.Header().Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("no origin: %d %v", w.Code, w.Header())
	}
	for _, bad := range []string{"*", "http://x/path", "ftp://x", "x"} {
		if _, err := AllowOrigins([]string{bad}, h); err == nil {
			t.Errorf("origin %q accepted", bad)
		}
	}
}
