package query

import (
	_ "embed"
	"net/http"
)

//go:embed static/status.html
var statusHTML []byte

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
