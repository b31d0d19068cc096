package query

import (
	_ "embed"
	"net/http"
	"net/url"
	"regexp"
)

//go:embed static/status.html
var statusHTML []byte

//go:embed static/orders.html
var ordersHTML []byte

//go:embed static/openapi.json
var openAPIJSON []byte

// handleStatus serves the status page: it takes an admin key from its form
// or from the URL fragment (#key=…, which browsers never send), draws the
// lag history (GET /v1/lag/history), then polls /v1/lag every 2 s and
// charts the pipeline's stages and each table's freshness. No external
// assets.
func handleStatus(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	// Belt and braces for the key in the fragment: no Referer leaves the
	// page, and nothing of it is cached.
	w.Header().Set("Referrer-Policy", "no-referrer")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Security-Policy", "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src data:")
	_, _ = w.Write(statusHTML)
}

// handleOpenAPI serves the OpenAPI 3 description of the API.
func handleOpenAPI(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(openAPIJSON)
}

// originHost is what a write API's host may be in the example's CSP: a
// name or address and a port, nothing that could end the directive.
var originHost = regexp.MustCompile(`^[A-Za-z0-9.\-]+(:[0-9]+)?$|^\[[0-9A-Fa-f:.]+\](:[0-9]+)?$`)

// writeOrigin returns the origin of the example's ?write= URL, or "" when
// there is none or it is not a plain http(s) URL.
func writeOrigin(r *http.Request) string {
	u, err := url.Parse(r.URL.Query().Get("write"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.User != nil || !originHost.MatchString(u.Host) {
		return ""
	}
	return u.Scheme + "://" + u.Host
}

// handleExampleOrders serves the example dashboard (docs/query-dashboards.md):
// a tenant's orders per day and status, and a form that writes an order
// through a Layer 1 write API and reads it back with its consistency
// token. Its CSP lets it connect to serve and to the write API of its
// ?write= parameter only: the page sends the API key to serve alone.
func handleExampleOrders(w http.ResponseWriter, r *http.Request) {
	connect := "'self'"
	if o := writeOrigin(r); o != "" {
		connect += " " + o
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Referrer-Policy", "no-referrer")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Security-Policy", "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src "+connect+"; img-src data:; form-action 'none'; base-uri 'none'; frame-ancestors 'none'")
	_, _ = w.Write(ordersHTML)
}
