package query

import (
	_ "embed"
	"net/http"
)

//go:embed static/status.html
var statusHTML []byte

//go:embed static/openapi.json
var openAPIJSON []byte

// handleStatus serves the status page: it asks for an admin key, polls
// /v1/lag every 2 s and draws each table's freshness. No external assets.
func handleStatus(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Security-Policy", "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src data:")
	_, _ = w.Write(statusHTML)
}

// handleOpenAPI serves the OpenAPI 3 description of the API.
func handleOpenAPI(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(openAPIJSON)
}
