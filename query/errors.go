package query

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	ch "github.com/ClickHouse/clickhouse-go/v2"

	"github.com/walhouse/walhouse/internal/textcut"
)

// apiError is an error response: {"error": {"code", "message", "requestId"}}.
type apiError struct {
	Status     int    `json:"-"`
	Code       string `json:"code"`
	Message    string `json:"message"`
	RequestID  string `json:"requestId,omitempty"`
	RetryAfter int    `json:"-"` // seconds; sets Retry-After when > 0
}

func (e *apiError) Error() string { return e.Code + ": " + e.Message }

// ClickHouse error codes the API tells apart.
const (
	chUnknownDatabase          = 81
	chUnknownTable             = 60
	chTimeoutExceeded          = 159
	chTooManyRows              = 396
	chTooManySimultaneous      = 202
	chMemoryLimitExceeded      = 241
	chTooManyParts             = 252
	chQueryWasCancelled        = 394
	chNetworkError             = 210
	chSocketTimeout            = 209
	chAllConnectionTriesFailed = 279
)

// classify turns an error from building or running a request into the
// response the caller gets. Details the caller must not see (SQL, server
// messages) are left to the server log.
func (s *Server) classify(err error) *apiError {
	var ae *apiError
	var re *RequestError
	var ex *ch.Exception
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.As(err, &re):
		return &apiError{Status: http.StatusBadRequest, Code: "bad_request", Message: re.Error()}
	case errors.Is(err, ErrUnknownTable):
		return &apiError{Status: http.StatusBadRequest, Code: "unknown_table", Message: err.Error() + "; GET /v1/tables lists the tables"}
	case errors.Is(err, ErrInvalidCursor):
		return &apiError{Status: http.StatusBadRequest, Code: "invalid_cursor", Message: err.Error()}
	case errors.Is(err, ErrTenantType):
		return &apiError{Status: http.StatusBadRequest, Code: "tenant_not_applicable", Message: err.Error()}
	case errors.As(err, &ex):
		switch ex.Code {
		case chTimeoutExceeded:
			return &apiError{Status: http.StatusBadRequest, Code: "query_timeout", Message: fmt.Sprintf("the query ran longer than its limit of %s; narrow the filters or the time range", s.cfg.Limits.MaxExecutionTime)}
		case chTooManyRows:
			return &apiError{Status: http.StatusBadRequest, Code: "over_limit", Message: "the result is larger than the row or byte limit of a page; ask for fewer columns or page with a smaller limit"}
		case chMemoryLimitExceeded:
			// Retrying the same query meets the same per-query limit
			// (max_memory_usage): the caller must ask for less.
			return &apiError{Status: http.StatusBadRequest, Code: "over_limit", Message: "the query needs more memory than its limit; narrow the filters or the time range, or group by fewer columns"}
		case chTooManySimultaneous, chTooManyParts, chNetworkError, chSocketTimeout, chAllConnectionTriesFailed:
			return &apiError{Status: http.StatusServiceUnavailable, Code: "unavailable", Message: "ClickHouse is overloaded; retry later", RetryAfter: 5}
		}
		return &apiError{Status: http.StatusInternalServerError, Code: "internal", Message: "the query failed inside ClickHouse; report the requestId to an operator"}
	case errors.Is(err, context.DeadlineExceeded):
		return &apiError{Status: http.StatusServiceUnavailable, Code: "unavailable", Message: "ClickHouse did not answer in time; retry later", RetryAfter: 5}
	default:
		// Connection refused, reset, an HTTP front that is down: the
		// request itself is fine, the store is not reachable.
		return &apiError{Status: http.StatusServiceUnavailable, Code: "unavailable", Message: "ClickHouse is unavailable; retry later", RetryAfter: 5}
	}
}

// fail logs err with the request id and writes the response classify
// chooses.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	ae := s.classify(err)
	if r.Context().Err() != nil {
		return // the caller went away; nobody reads the answer
	}
	level := s.log.Info
	if ae.Status >= 500 {
		level = s.log.Error
	}
	level("request failed", "request_id", requestID(r.Context()), "route", r.Pattern, "status", ae.Status, "code", ae.Code, "err", clip(err.Error(), maxMessage))
	s.writeError(w, r, ae)
}

// maxMessage bounds an error message in a response or a log line: messages
// quote the caller's input, which may be as large as the body limit.
const maxMessage = 1024

// clip shortens s to at most n bytes, on a rune boundary, marking the cut.
func clip(s string, n int) string {
	head := textcut.Head(s, n)
	if len(head) == len(s) {
		return s
	}
	return head + "… (" + strconv.Itoa(len(s)-len(head)) + " more bytes)"
}

// writeError writes an error response.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, ae *apiError) {
	out := *ae
	out.RequestID = requestID(r.Context())
	out.Message = clip(out.Message, maxMessage)
	if out.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(out.RetryAfter))
	}
	writeJSON(w, out.Status, map[string]any{"error": out})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	_ = enc.Encode(v) // a failed write means the caller went away
}

type requestIDCtx struct{}

func requestID(ctx context.Context) string {
	id, _ := ctx.Value(requestIDCtx{}).(string)
	return id
}

func newRequestID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func contextWithRequestID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, requestIDCtx{}, id)
}
