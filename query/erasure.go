package query

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/walhouse/walhouse/erasure"
)

// Eraser erases data subjects; *erasure.Eraser implements it.
type Eraser interface {
	// Begin checks req (refusing as erasure.Eraser.Plan does) and records
	// its start; run carries out the rest.
	Begin(ctx context.Context, req erasure.Request) (id string, run func(context.Context) (erasure.Manifest, error), err error)
	// Status returns where erasure id of tenant stands
	// (erasure.ErrNoErasure for none).
	Status(ctx context.Context, tenant, id string) (erasure.Status, error)
}

var _ Eraser = (*erasure.Eraser)(nil)

// maxErasuresRunning bounds the erasures one server runs at once, all
// tenants together; a tenant runs one at a time.
const maxErasuresRunning = 4

// erasureRuns are the erasures the server runs detached: one per tenant
// at a time, at most maxErasuresRunning in all. Each takes at least the
// settle time, so a tenant starts at most one every --erasure-settle. The
// zero value is ready.
type erasureRuns struct {
	mu      sync.Mutex
	running map[string]context.CancelFunc // by tenant: cancels its run
	wg      sync.WaitGroup
	// stopping: WaitErasures began; no run starts any more (one started
	// now would outlive the connections and its wait).
	stopping bool
}

// acquire takes tenant's turn for a run that cancel cuts short, or
// answers why not: the tenant already runs one or the server runs its
// maximum (429), or the server stops (503).
func (e *erasureRuns) acquire(tenant string, cancel context.CancelFunc) (release func(), refused *apiError) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stopping {
		return nil, &apiError{Status: http.StatusServiceUnavailable, Code: "stopping", Message: "the server is stopping: start the erasure again on another replica or once it is back; nothing was recorded"}
	}
	if e.running[tenant] != nil || len(e.running) >= maxErasuresRunning {
		return nil, &apiError{Status: http.StatusTooManyRequests, Code: "erasure_running",
			Message: "an erasure of this tenant is running (or the server runs as many as it may): retry when it has ended (GET /v1/erasures/{id})"}
	}
	if e.running == nil {
		e.running = map[string]context.CancelFunc{}
	}
	e.running[tenant] = cancel
	e.wg.Add(1)
	return func() {
		e.mu.Lock()
		defer e.mu.Unlock()
		delete(e.running, tenant)
		e.wg.Done()
	}, nil
}

// WaitErasures waits, when the server stops, for the erasures it runs
// detached to end, until ctx ends; it then cuts short those still
// running, which record their failure (GET /v1/erasures/{id} says to
// erase again; the ledger entry, if recorded, already keeps the subject
// out of new loads), and waits for that. Call it after the HTTP server's
// Shutdown and before the ClickHouse connection is closed.
func (s *Server) WaitErasures(ctx context.Context) {
	// A request still being served (Shutdown's wait ended first) starts
	// no run now: WaitGroup.Add racing the Wait below would be misuse.
	s.erasing.mu.Lock()
	s.erasing.stopping = true
	s.erasing.mu.Unlock()
	done := make(chan struct{})
	go func() {
		s.erasing.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return
	case <-ctx.Done():
	}
	s.erasing.mu.Lock()
	n := len(s.erasing.running)
	for _, cancel := range s.erasing.running {
		cancel()
	}
	s.erasing.mu.Unlock()
	s.log.Warn("the server stops: erasures still running were cut short and record their failure; erase again", "erasures", n)
	<-done
}

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

// handleErasure checks the erasure of a subject of the key's tenant,
// records its start, and answers 202 with its id while it runs detached
// (GET /v1/erasures/{id} says how it ends): a client that disconnects or
// times out cannot cut it short. Refusals come at once: 409 when
// PostgreSQL still has the subject's rows, 400 for a request it cannot
// carry out (nothing recorded in either case).
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
	// Detached: its own deadline, not the request's (a disconnect, the
	// write timeout), so the ledger entry it records always gets its
	// removal, manifest and audit line.
	runCtx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), erasure.DefaultRunTimeout)
	release, refused := s.erasing.acquire(key.Tenant, cancel)
	if refused != nil {
		cancel()
		if refused.Status == http.StatusTooManyRequests {
			w.Header().Set("Retry-After", strconv.Itoa(int(erasure.DefaultSettle.Seconds())))
		}
		s.writeError(w, r, refused)
		return
	}
	id, run, err := s.cfg.Eraser.Begin(r.Context(), erasure.Request{Tenant: key.Tenant, Column: body.Subject.Column, Value: value, Tables: body.Tables, RequestedBy: key.ID})
	if err != nil {
		release()
		cancel()
		s.erasureRefused(w, r, err)
		return
	}
	go func() {
		defer release()
		defer cancel()
		if _, err := run(runCtx); err != nil {
			s.log.Error("erasure failed", "request_id", requestID(runCtx), "erasure_id", id, "err", err)
		}
	}()
	w.Header().Set("Location", "/v1/erasures/"+id)
	writeJSON(w, http.StatusAccepted, map[string]string{"id": id, "state": erasure.StateStarted, "status": "/v1/erasures/" + id})
}

// erasureRefused answers an erasure refused before its start.
func (s *Server) erasureRefused(w http.ResponseWriter, r *http.Request, err error) {
	var still *erasure.StillInSourceError
	var bad *erasure.RequestError
	var short *erasure.SettleTooShortError
	var live *erasure.LiveRowsError
	var broad *erasure.TooBroadError
	var rate *erasure.RateError
	switch {
	case errors.As(err, &still):
		s.writeError(w, r, &apiError{Status: http.StatusConflict, Code: "still_in_source", Message: still.Error()})
	case errors.As(err, &live):
		// Rows PostgreSQL holds whose change is not loaded yet: retry
		// once the sinks caught up; nothing was recorded.
		s.writeError(w, r, &apiError{Status: http.StatusConflict, Code: "live_rows_not_loaded", Message: live.Error()})
	case errors.As(err, &broad):
		// A common value, not a data subject: the CLI can force it.
		s.writeError(w, r, &apiError{Status: http.StatusBadRequest, Code: "too_broad", Message: broad.Error()})
	case errors.As(err, &rate):
		w.Header().Set("Retry-After", "60")
		s.writeError(w, r, &apiError{Status: http.StatusTooManyRequests, Code: "erasure_rate", Message: rate.Error()})
	case errors.Is(err, erasure.ErrCluster):
		s.writeError(w, r, &apiError{Status: http.StatusServiceUnavailable, Code: "erasure_unsupported", Message: err.Error()})
	case errors.As(err, &short):
		// serve's --erasure-settle is shorter than a sink's ledger bound:
		// the operator's to fix, nothing was recorded.
		s.writeError(w, r, &apiError{Status: http.StatusServiceUnavailable, Code: "settle_too_short", Message: short.Error()})
	case errors.As(err, &bad):
		// Msg names nothing the caller did not; the detail (other tables,
		// their column types) goes to the log only.
		s.log.Info("erasure refused", "request_id", requestID(r.Context()), "err", bad.Error())
		s.writeError(w, r, &apiError{Status: http.StatusBadRequest, Code: "bad_request", Message: bad.Msg})
	default:
		s.fail(w, r, err)
	}
}

// handleErasureStatus answers GET /v1/erasures/{id}: the state of an
// erasure of the key's tenant, with its signed manifest once finished.
// Any replica answers: the state is in ClickHouse.
func (s *Server) handleErasureStatus(w http.ResponseWriter, r *http.Request) {
	key, _ := callerKey(r.Context())
	if s.cfg.Eraser == nil {
		s.writeError(w, r, &apiError{Status: http.StatusServiceUnavailable, Code: "erasure_not_configured",
			Message: "this server cannot erase: start walhouse serve with --pg and the erasure key (WALHOUSE_ERASURE_KEY or --erasure-key-file)"})
		return
	}
	st, err := s.cfg.Eraser.Status(r.Context(), key.Tenant, r.PathValue("id"))
	if errors.Is(err, erasure.ErrNoErasure) {
		s.writeError(w, r, &apiError{Status: http.StatusNotFound, Code: "not_found", Message: "no erasure with this id for your tenant"})
		return
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if st.State == erasure.StateFailed {
		// The error may carry ClickHouse's messages: logged, not sent.
		s.log.Info("erasure status: failed", "request_id", requestID(r.Context()), "erasure_id", st.ID, "err", st.Error)
		st.Error = "the erasure failed part-way (the server's log says why); its ledger entry keeps the subject out of new loads: erase again, it is idempotent"
	}
	writeJSON(w, http.StatusOK, st)
}
