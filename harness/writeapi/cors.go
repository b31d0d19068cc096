package writeapi

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
)

// The headers a page of an allowed origin may send and read: the write's
// tenant and key, and the consistency token it reads with afterwards.
const (
	corsAllowMethods  = "POST, PATCH, DELETE"
	corsAllowHeaders  = "Content-Type, Idempotency-Key, " + TenantHeader
	corsExposeHeaders = "Walhouse-Consistency-Token, Idempotency-Replayed"
)

// AllowOrigins wraps h so that browser pages of origins (scheme://host[:port]
// each, as a browser sends in Origin; never "*") may call it: the example
// dashboard served by `walhouse serve` writes here from serve's origin.
// A preflight from an allowed origin gets 204; one from any other origin
// gets 403, and a plain request from one is served without CORS headers,
// so the browser keeps its answer from the page. No credentials are
// allowed. It returns an error for an origin that is not a bare origin.
func AllowOrigins(origins []string, h http.Handler) (http.Handler, error) {
	for _, o := range origins {
		u, err := url.Parse(o)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Path != "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
			return nil, fmt.Errorf("writeapi: CORS origin %q: want scheme://host[:port] with no path, e.g. http://localhost:8080", o)
		}
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		origin := r.Header.Get("Origin")
		if origin == "" {
			h.ServeHTTP(w, r)
			return
		}
		w.Header().Add("Vary", "Origin")
		preflight := r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != ""
		if !slices.Contains(origins, origin) {
			if preflight {
				http.Error(w, "this origin may not call the API", http.StatusForbidden)
				return
			}
			h.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Access-Control-Allow-Origin", origin)
		if preflight {
			w.Header().Set("Access-Control-Allow-Methods", corsAllowMethods)
			w.Header().Set("Access-Control-Allow-Headers", corsAllowHeaders)
			w.Header().Set("Access-Control-Max-Age", "600")
			w.WriteHeader(http.StatusNoContent)
			return
		}
		w.Header().Set("Access-Control-Expose-Headers", corsExposeHeaders)
		h.ServeHTTP(w, r)
	}), nil
}
