package query

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"github.com/walhouse/walhouse/erasure"
)

// Eraser erases data subjects; *erasure.Eraser implements it.
type Eraser interface {
	Erase(ctx context.Context, req erasure.Request) (erasure.Manifest, error)
}

var _ Eraser = (*erasure.Eraser)(nil)

// erasureBody is the body of POST /v1/erasures.
type erasureBody struct {
	Subject struct {
		Column string          `json:"column"`
		Value  json.RawMessage `json:"value"`
	} `json:"subject"`
	Tables []string `json:"tables,omitempty"`
}

// subjectText returns a JSON string's text, or a JSON number as written
// (a customer id 12345678901234567890 must not pass through a float).
func subjectText(raw json.RawMessage) (string, bool) {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, s != ""
	}
	var n json.Number
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.UseNumber()
	if err := dec.Decode(&n); err == nil {
		return n.String(), true
	}
	return "", false
}

// handleErasure erases a subject of the key's tenant and answers with the
// signed manifest: 200 when every version is gone, 409 when PostgreSQL
// still has the subject's rows (nothing was recorded or removed).
func (s *Server) handleErasure(w http.ResponseWriter, r *http.Request, key Key, _ Limits) {
	if s.cfg.Eraser == nil {
		s.writeError(w, r, &apiError{Status: http.StatusServiceUnavailable, Code: "erasure_not_configured",
			Message: "this server cannot erase: start walhouse serve with --pg and the erasure key (WALHOUSE_ERASURE_KEY or --erasure-key-file)"})
		return
	}
	var body erasureBody
	if err := decodeBody(r, &body); err != nil {
		s.fail(w, r, err)
		return
	}
	value, ok := subjectText(body.Subject.Value)
	if body.Subject.Column == "" || !ok {
		s.fail(w, r, reqErr("subject", "column and value (a string or a number) are required"))
		return
	}
	m, err := s.cfg.Eraser.Erase(r.Context(), erasure.Request{Tenant: key.Tenant, Column: body.Subject.Column, Value: value, Tables: body.Tables, RequestedBy: key.ID})
	var still *erasure.StillInSourceError
	var bad *erasure.RequestError
	var short *erasure.SettleTooShortError
	var live *erasure.LiveRowsError
	var broad *erasure.TooBroadError
	switch {
	case err == nil:
		writeJSON(w, http.StatusOK, m)
	case errors.As(err, &still):
		s.writeError(w, r, &apiError{Status: http.StatusConflict, Code: "still_in_source", Message: still.Error()})
	case errors.As(err, &live):
		// Rows PostgreSQL holds whose change is not loaded yet: retry
		// once the sinks caught up; nothing was recorded.
		s.writeError(w, r, &apiError{Status: http.StatusConflict, Code: "live_rows_not_loaded", Message: live.Error()})
	case errors.As(err, &broad):
		// A common value, not a data subject: the CLI can force it.
		s.writeError(w, r, &apiError{Status: http.StatusBadRequest, Code: "too_broad", Message: broad.Error()})
	case errors.As(err, &short):
		// serve's --erasure-settle is shorter than a sink's ledger bound:
		// the operator's to fix, nothing was recorded.
		s.writeError(w, r, &apiError{Status: http.StatusServiceUnavailable, Code: "settle_too_short", Message: short.Error()})
	case errors.As(err, &bad):
		// Msg names nothing the caller did not; the detail (other tables,
		// their column types) goes to the log only.
		s.log.Info("erasure refused", "request_id", requestID(r.Context()), "err", bad.Error())
		s.writeError(w, r, &apiError{Status: http.StatusBadRequest, Code: "bad_request", Message: bad.Msg})
	case m.Signature != "":
		// Signed but not verified: the manifest says what is left.
		s.log.Error("erasure left versions behind", "request_id", requestID(r.Context()), "erasure_id", m.ID, "err", err)
		writeJSON(w, http.StatusInternalServerError, map[string]any{"error": &apiError{Code: "erasure_incomplete", Message: err.Error(), RequestID: requestID(r.Context())}, "manifest": m})
	default:
		s.fail(w, r, err)
	}
}
