package query

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// CORS lets browser pages of other origins call the API (a dashboard
// served elsewhere). The zero value allows no other origin: browsers then
// refuse cross-origin reads, as before.
type CORS struct {
	// AllowedOrigins are the origins (scheme://host[:port], as a browser
	// sends in Origin) whose pages may call the API; "*" allows every
	// origin. Keys still authenticate every call: CORS only decides which
	// pages a browser lets read the answers.
	AllowedOrigins []string
	// AllowHeaders are request headers allowed beside Authorization,
	// Content-Type and Idempotency-Key.
	AllowHeaders []string
	// ExposeHeaders are response headers pages may read beside
	// X-Request-Id, Retry-After and X-Walhouse-Consistency.
	ExposeHeaders []string
	// MaxAge is how long a browser may reuse a preflight's answer
	// (default 10 min).
	MaxAge time.Duration
}

// The headers every CORS configuration allows and exposes.
var (
	corsAllowHeaders  = []string{"Authorization", "Content-Type", "Idempotency-Key"}
	corsExposeHeaders = []string{"X-Request-Id", "Retry-After", "X-Walhouse-Consistency"}
	corsMethods       = "GET, POST, OPTIONS"
)

// validate reports every origin that is not "*" nor a bare origin.
func (c CORS) validate() []error {
	var problems []error
	for _, o := range c.AllowedOrigins {
		if o == "*" {
			continue
		}
		u, err := url.Parse(o)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Path != "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
			problems = append(problems, fmt.Errorf("query: CORS origin %q: want \"*\" or scheme://host[:port] with no path, e.g. https://dash.example.com (--cors-origin)", o))
		}
	}
	if c.MaxAge < 0 {
		problems = append(problems, fmt.Errorf("query: CORS MaxAge %v is negative", c.MaxAge))
	}
	return problems
}

// withCORS answers preflight requests and marks the answers to allowed
// origins. A preflight from another origin gets 403 and no CORS header
// (the browser then refuses the call); a plain request from one is served
// without CORS headers, so the browser keeps its answer from the page.
func withCORS(c CORS, h http.Handler) http.Handler {
	if len(c.AllowedOrigins) == 0 {
		return h
	}
	anyOrigin := slices.Contains(c.AllowedOrigins, "*")
	allowHeaders := strings.Join(append(slices.Clone(corsAllowHeaders), c.AllowHeaders...), ", ")
	exposeHeaders := strings.Join(append(slices.Clone(corsExposeHeaders), c.ExposeHeaders...), ", ")
	maxAge := c.MaxAge
	if maxAge == 0 {
		maxAge = 10 * time.Minute
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		origin := r.Header.Get("Origin")
		if origin == "" {
			h.ServeHTTP(w, r)
			return
		}
		allowed := anyOrigin || slices.Contains(c.AllowedOrigins, origin)
		w.Header().Add("Vary", "Origin")
		preflight := r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != ""
		if !allowed {
			if preflight {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusForbidden)
				_, _ = fmt.Fprintf(w, `{"error":{"code":"cors_origin","message":"this origin may not call the API; an operator allows it with --cors-origin"}}`+"\n")
				return
			}
			h.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Access-Control-Allow-Origin", origin)
		if preflight {
			w.Header().Add("Vary", "Access-Control-Request-Method")
			w.Header().Add("Vary", "Access-Control-Request-Headers")
			w.Header().Set("Access-Control-Allow-Methods", corsMethods)
			w.Header().Set("Access-Control-Allow-Headers", allowHeaders)
			w.Header().Set("Access-Control-Max-Age", strconv.Itoa(int(maxAge/time.Second)))
			w.WriteHeader(http.StatusNoContent)
			return
		}
		w.Header().Set("Access-Control-Expose-Headers", exposeHeaders)
		h.ServeHTTP(w, r)
	})
}
