package idempotency

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// HeaderName is the request header that carries the key (IETF httpapi
// draft "The Idempotency-Key HTTP Header Field").
const HeaderName = "Idempotency-Key"

// ReplayedHeader is set to "true" on a response replayed from an earlier
// attempt; it is walhouse's, not the draft's.
const ReplayedHeader = "Idempotency-Replayed"

// ProblemType is the problem type of the middleware's problem+json
// responses (RFC 9457) unless WithProblemType sets another.
const ProblemType = "https://github.com/walhouse/walhouse/blob/main/docs/layer1.md#http-middleware"

// MiddlewareOption configures Middleware.
type MiddlewareOption func(*middleware)

// RequireKey answers 400 to a request without an Idempotency-Key header.
// Without it, such a request runs unkeyed (a plain transaction).
func RequireKey() MiddlewareOption { return func(m *middleware) { m.required = true } }

// WithMaxBody bounds the request body that is read to fingerprint it
// (default 1 MiB); a larger one is answered 413.
func WithMaxBody(n int64) MiddlewareOption { return func(m *middleware) { m.maxBody = n } }

// WithInFlightWait sets how long a request waits for an attempt with its
// key that is running before it is answered 409 (default 10ms).
func WithInFlightWait(d time.Duration) MiddlewareOption {
	return func(m *middleware) { m.inFlightWait = d }
}

// WithKeptHeaders names the response headers stored with the key and
// replayed on a retry, in addition to Content-Type, Location,
// Content-Location, ETag and Last-Modified.
func WithKeptHeaders(names ...string) MiddlewareOption {
	return func(m *middleware) {
		for _, n := range names {
			m.kept = append(m.kept, http.CanonicalHeaderKey(n))
		}
	}
}

// WithPrincipal names the request's principal within its tenant (the
// authenticated user or API client, from the request's authentication), so
// that its keys are its own: a stored response is replayed only to the
// principal whose request made it, and another principal sending the same
// key gets 422 (Request.Principal). An empty principal means none. Use it
// whenever the application has principals: without it, any caller of the
// tenant who learns a key may replay its response.
func WithPrincipal(principal func(*http.Request) string) MiddlewareOption {
	return func(m *middleware) { m.principal = principal }
}

// WithProblemType sets the "type" of the problem+json responses.
func WithProblemType(uri string) MiddlewareOption { return func(m *middleware) { m.problemType = uri } }

// WithMiddlewareLogger logs store failures to l (default slog.Default()).
func WithMiddlewareLogger(l *slog.Logger) MiddlewareOption { return func(m *middleware) { m.log = l } }

type middleware struct {
	store        Store
	tenant       func(*http.Request) (string, error)
	principal    func(*http.Request) string
	required     bool
	maxBody      int64
	inFlightWait time.Duration
	kept         []string
	problemType  string
	log          *slog.Logger
	next         http.Handler
}

// Middleware makes a handler's writes idempotent per the Idempotency-Key
// header. Each request runs in a transaction of store (for *Keys: with the
// tenant set for row-level security), which the handler takes from its
// request's context (TxFromContext) for every write. The response is held
// back until the transaction committed; a response below 500 commits the
// effect, the key and the response (status, kept headers, body) together;
// a 5xx, a panic or a failed commit rolls everything back, so a retry runs
// again. A retry with the same key and request gets the stored response
// again, with Idempotency-Replayed: true; the handler does not run.
//
// tenant names the request's tenant (from its authentication); an error or
// an empty tenant is answered 401. Following the draft, errors are
// problem+json: 400 for a malformed key (or a missing one under RequireKey),
// 409 while another attempt with the key is in flight, 422 for the key
// reused with another request (method, path and query, Content-Type and
// the body, JSON canonicalised) or by another principal (WithPrincipal), 413 for a body over WithMaxBody, 503 when the store
// fails (retry with the same key).
func Middleware(store Store, tenant func(*http.Request) (string, error), opts ...MiddlewareOption) func(http.Handler) http.Handler {
	m := middleware{store: store, tenant: tenant, maxBody: 1 << 20, inFlightWait: 10 * time.Millisecond,
		kept: []string{"Content-Type", "Location", "Content-Location", "Etag", "Last-Modified"}, problemType: ProblemType, log: slog.Default()}
	for _, o := range opts {
		o(&m)
	}
	return func(next http.Handler) http.Handler {
		mm := m
		mm.next = next
		return &mm
	}
}

type ctxKey int

const (
	txKey ctxKey = iota
	keyKey
)

// TxFromContext returns the transaction Middleware opened for the
// request, nil outside it or on a store without transactions.
func TxFromContext(ctx context.Context) pgx.Tx {
	tx, _ := ctx.Value(txKey).(pgx.Tx)
	return tx
}

// KeyFromContext returns the request's idempotency key, if it has one.
func KeyFromContext(ctx context.Context) (Key, bool) {
	k, ok := ctx.Value(keyKey).(Key)
	return k, ok
}

// storedResponse is a response as kept with its key.
type storedResponse struct {
	Status int         `json:"status"`
	Header http.Header `json:"header,omitempty"`
	Body   []byte      `json:"body,omitempty"`
}

func (m *middleware) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	tenant, err := m.tenant(r)
	if err != nil || tenant == "" {
		m.problem(w, http.StatusUnauthorized, "No tenant", "The request names no tenant that idempotency keys could be scoped to.")
		return
	}
	var key Key
	if vals := r.Header.Values(HeaderName); len(vals) > 0 {
		if key, err = ParseHeader(vals); err != nil {
			m.problem(w, http.StatusBadRequest, "Idempotency-Key is malformed", err.Error()+`. Send one key, a UUID as a Structured Field string: Idempotency-Key: "<uuid>".`)
			return
		}
	} else if m.required {
		m.problem(w, http.StatusBadRequest, "Idempotency-Key is missing", "This operation is idempotent and requires an Idempotency-Key header: a new UUID (version 7 recommended) per operation, the same on every retry of it.")
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, m.maxBody+1))
	if err != nil {
		m.problem(w, http.StatusBadRequest, "Unreadable request body", err.Error())
		return
	}
	if int64(len(body)) > m.maxBody {
		m.problem(w, http.StatusRequestEntityTooLarge, "Request body too large", fmt.Sprintf("The body is over %d bytes.", m.maxBody))
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	req := Request{Tenant: tenant, Key: key, Fingerprint: requestFingerprint(r, body), InFlightWait: m.inFlightWait}
	if m.principal != nil {
		req.Principal = m.principal(r)
	}
	a, err := m.store.Begin(r.Context(), req)
	var mismatch *MismatchError
	switch {
	case errors.Is(err, ErrInFlight):
		m.problem(w, http.StatusConflict, "A request is outstanding for this Idempotency-Key", "A request with the same Idempotency-Key is being processed. Retry later with the same key to get its response.")
		return
	case errors.As(err, &mismatch):
		m.problem(w, http.StatusUnprocessableEntity, "Idempotency-Key is already used", "This Idempotency-Key was used for a different request (method, target, content type or body) or by another principal. Use a new key for a new request.")
		return
	case err != nil:
		m.log.Error("idempotency: begin an attempt", "err", err, "key", key)
		m.problem(w, http.StatusServiceUnavailable, "Idempotency store unavailable", "The request was not processed. Retry with the same Idempotency-Key.")
		return
	}
	if res, ok := a.Replayed(); ok {
		m.setToken(r.Context(), w.Header(), a)
		m.replay(w, res)
		return
	}
	m.serve(w, r, a, key)
}

// serve runs the handler for a fresh attempt and commits or rolls back.
func (m *middleware) serve(w http.ResponseWriter, r *http.Request, a Attempt, key Key) {
	ctx := context.WithValue(r.Context(), txKey, a.Tx())
	if !key.IsZero() {
		ctx = context.WithValue(ctx, keyKey, key)
	}
	rec := &recorder{header: http.Header{}}
	done := false
	defer func() {
		if !done {
			// A panic: nothing of the attempt stays; net/http logs it.
			_ = a.Rollback(context.WithoutCancel(ctx))
		}
	}()
	m.next.ServeHTTP(rec, r.WithContext(ctx))
	done = true
	if rec.status == 0 {
		rec.status = http.StatusOK
	}
	if rec.status >= 500 {
		_ = a.Rollback(context.WithoutCancel(ctx))
		rec.writeTo(w)
		return
	}
	stored := storedResponse{Status: rec.status, Header: http.Header{}, Body: rec.body.Bytes()}
	for _, h := range m.kept {
		if v := rec.header.Values(h); len(v) > 0 {
			stored.Header[h] = v
		}
	}
	raw, err := json.Marshal(stored)
	if err == nil {
		// The handler finished: commit even if the client went away, so a
		// retry replays the work instead of doing it again.
		err = a.Commit(context.WithoutCancel(r.Context()), raw)
	} else {
		_ = a.Rollback(context.WithoutCancel(ctx))
	}
	if err != nil {
		m.log.Error("idempotency: commit an attempt", "err", err, "key", key)
		m.problem(w, http.StatusServiceUnavailable, "Could not commit", "The outcome is unknown. Retry with the same Idempotency-Key: the response is replayed if the request took effect, and it runs if it did not.")
		return
	}
	m.setToken(r.Context(), rec.header, a)
	rec.writeTo(w)
}

// setToken sets TokenHeader to the committed (or replayed) attempt's
// consistency token, when the store gives one. A token that cannot be read
// leaves the header out, logged: the write stands, and a reader without a
// token falls back to meta.lastSyncAt.
func (m *middleware) setToken(ctx context.Context, h http.Header, a Attempt) {
	ta, ok := a.(TokenAttempt)
	if !ok {
		return
	}
	tok, err := ta.Token(context.WithoutCancel(ctx))
	if err != nil || tok.IsZero() {
		m.log.Warn("idempotency: no consistency token for a committed write", "err", err)
		return
	}
	h.Set(TokenHeader, tok.String())
}

// replay writes a stored response again.
func (m *middleware) replay(w http.ResponseWriter, raw []byte) {
	var s storedResponse
	if len(raw) == 0 {
		// Committed by an unkeyed writer of the same key: nothing to show.
		s.Status = http.StatusNoContent
	} else if err := json.Unmarshal(raw, &s); err != nil || s.Status < 100 || s.Status > 999 {
		m.log.Error("idempotency: the stored response of a key is unreadable", "err", err)
		m.problem(w, http.StatusInternalServerError, "Stored response unreadable", "The request took effect, but its stored response cannot be replayed.")
		return
	}
	for k, v := range s.Header {
		w.Header()[k] = v
	}
	w.Header().Set(ReplayedHeader, "true")
	w.WriteHeader(s.Status)
	_, _ = w.Write(s.Body)
}

// problem writes an RFC 9457 problem+json response.
func (m *middleware) problem(w http.ResponseWriter, status int, title, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"type": m.problemType, "title": title, "status": status, "detail": detail})
}

// requestFingerprint hashes what makes two requests the same: method,
// target (path and query), Content-Type (the same bytes as JSON and as a
// form are two requests) and body, JSON bodies canonicalised (RFC 8785) so
// that member order and spacing do not count.
func requestFingerprint(r *http.Request, body []byte) Fingerprint {
	ct := strings.TrimSpace(r.Header.Get("Content-Type"))
	mt, params, err := mime.ParseMediaType(ct)
	if err == nil {
		// One spelling per media type: case and spacing do not count.
		ct = mime.FormatMediaType(mt, params)
	}
	// The target cannot hold a newline (it is escaped), so the three
	// parts cannot run into each other.
	op := r.Method + " " + r.URL.RequestURI() + "\n" + ct
	if mt == "application/json" || strings.HasSuffix(mt, "+json") {
		if fp, err := FingerprintJSON(op, body); err == nil {
			return fp
		}
	}
	return FingerprintBytes(op, body)
}

// recorder holds a handler's response until the attempt is committed.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (rec *recorder) Header() http.Header { return rec.header }

func (rec *recorder) WriteHeader(status int) {
	if rec.status == 0 {
		rec.status = status
	}
}

func (rec *recorder) Write(p []byte) (int, error) {
	if rec.status == 0 {
		rec.status = http.StatusOK
	}
	return rec.body.Write(p)
}

func (rec *recorder) writeTo(w http.ResponseWriter) {
	for k, v := range rec.header {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.status)
	_, _ = w.Write(rec.body.Bytes())
}
