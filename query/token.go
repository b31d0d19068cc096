package query

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/walhouse/walhouse/idempotency"
)

// Read-your-writes: a read that carries consistency tokens (from the
// Idempotency-Key middleware's TokenHeader, or idempotency.TokenSQL after
// any COMMIT) waits until the table's load watermark (SyncState.LSN, the
// minimum over its partitions, the one lastSyncAt is read with) has passed
// the newest token's position, then reads. docs/consistency.md has the
// proof and the API.

// TokenHeader is the request header that carries consistency tokens: one
// per header line or comma-separated, all waited for.
const TokenHeader = idempotency.TokenHeader

// Defaults of Config.DefaultTokenWait and Config.MaxTokenWait.
const (
	DefaultTokenWait = 5 * time.Second
	DefaultMaxWait   = 30 * time.Second
)

// maxTokens bounds the tokens of one request.
const maxTokens = 64

// OnStale says what a token read answers when its wait ends before the
// table is loaded through the token.
type OnStale string

const (
	// StaleAnswer (the default) answers with the data there is and
	// meta.fresh false, meta.lsn and meta.lastSyncAt saying how far it is.
	StaleAnswer OnStale = "answer"
	// StaleFail answers 425 Too Early, code not_loaded_yet, without data.
	StaleFail OnStale = "fail"
)

// TokenRead is what a request asks of its wait: the tokens (body and
// header together), how long to wait and what to answer if that is not
// long enough.
type TokenRead struct {
	// Tokens are consistency tokens: the read waits for all of them.
	Tokens []string `json:"consistencyTokens,omitempty"`
	// Wait bounds the wait, as a Go duration ("2s", "500ms"); default
	// Config.DefaultTokenWait, at most Config.MaxTokenWait.
	Wait string `json:"wait,omitempty"`
	// OnStale is "answer" (default) or "fail".
	OnStale OnStale `json:"onStale,omitempty"`
}

// tokenWait is a parsed TokenRead: the position to wait for and until when.
type tokenWait struct {
	lsn     LSN // the newest token's; 0: no token
	wait    time.Duration
	onStale OnStale
}

// active reports whether the request carries a token.
func (tw tokenWait) active() bool { return tw.lsn > 0 }

// TimingHeader is the W3C Server-Timing response header of a read with
// consistency tokens: `token-wait;dur=<ms>`, how long it waited for the
// table's load watermark before reading, so that a client can tell the
// pipeline's share of its latency from the query's.
const TimingHeader = "Server-Timing"

// timingMetric is the name of the TimingHeader metric.
const timingMetric = "token-wait;dur="

// timing returns the TimingHeader value of a wait of d.
func timing(d time.Duration) string {
	return timingMetric + strconv.FormatFloat(float64(d.Microseconds())/1000, 'f', 1, 64)
}

// TokenWaitOf reads the wait of a TimingHeader value (among other
// metrics, as Server-Timing allows); ok is false when it has none.
func TokenWaitOf(header string) (wait time.Duration, ok bool) {
	_, ms, found := strings.Cut(header, timingMetric)
	if !found {
		return 0, false
	}
	ms, _, _ = strings.Cut(ms, ",")
	f, err := strconv.ParseFloat(strings.TrimSpace(ms), 64)
	if err != nil || f < 0 {
		return 0, false
	}
	return time.Duration(f * float64(time.Millisecond)), true
}

// parseTokenRead checks tr and the request's TokenHeader against the
// server's source database and bounds. A malformed token or wait is a
// RequestError; a token of another database is refused with code
// foreign_token, never waited for (it would never load).
func (s *Server) parseTokenRead(r *http.Request, tr TokenRead) (tokenWait, error) {
	texts := append([]string(nil), tr.Tokens...)
	for _, v := range r.Header.Values(TokenHeader) {
		for t := range strings.SplitSeq(v, ",") {
			if t = strings.TrimSpace(t); t != "" {
				texts = append(texts, t)
			}
		}
	}
	tw := tokenWait{onStale: tr.OnStale}
	switch tw.onStale {
	case "":
		tw.onStale = StaleAnswer
	case StaleAnswer, StaleFail:
	default:
		return tw, &RequestError{Field: "onStale", Reason: fmt.Sprintf("%q is not answer or fail", tr.OnStale)}
	}
	if len(texts) == 0 {
		if tr.Wait != "" || tr.OnStale != "" {
			return tw, &RequestError{Field: "wait", Reason: "wait and onStale need a consistency token (consistencyTokens or the " + TokenHeader + " header)"}
		}
		return tw, nil
	}
	if len(texts) > maxTokens {
		return tw, &RequestError{Field: "consistencyTokens", Reason: fmt.Sprintf("%d tokens, more than %d", len(texts), maxTokens)}
	}
	src := s.cfg.TokenSource
	if src.IsZero() {
		return tw, &apiError{Status: http.StatusBadRequest, Code: "tokens_unavailable", Message: "this server does not know the source database, so it cannot tell which consistency tokens are its own; the operator gives walhouse serve --pg (or --token-source)"}
	}
	for _, text := range texts {
		tok, err := idempotency.ParseToken(text)
		if err != nil {
			return tw, &RequestError{Field: "consistencyTokens", Reason: clip(err.Error(), 200)}
		}
		if !tok.SameSource(src) {
			return tw, &apiError{Status: http.StatusBadRequest, Code: "foreign_token", Message: fmt.Sprintf("consistency token %s is of another database than the one this pipeline captures (system identifier %d, database OID %d): it would never be loaded here", tok, src.SystemID, src.Database)}
		}
		tw.lsn = max(tw.lsn, LSN(tok.LSN))
	}
	tw.wait = s.cfg.DefaultTokenWait
	if tr.Wait != "" {
		d, err := time.ParseDuration(tr.Wait)
		if err != nil || d < 0 {
			return tw, &RequestError{Field: "wait", Reason: fmt.Sprintf("%q is not a duration such as 2s or 500ms", tr.Wait)}
		}
		tw.wait = d
	}
	tw.wait = min(tw.wait, s.cfg.MaxTokenWait)
	return tw, nil
}

// errNotLoadedYet answers a token read with onStale fail whose wait ended
// first.
func errNotLoadedYet(tables []string, target LSN, wait time.Duration) error {
	return &apiError{Status: http.StatusTooEarly, Code: "not_loaded_yet", RetryAfter: 1,
		Message: fmt.Sprintf("%s not loaded through the consistency token's position %s within %s; retry, or wait longer", strings.Join(tables, ", "), target, wait)}
}

// awaitTables waits, outside the caller's concurrency slots (slotHold),
// until every table is loaded through tw's position or tw.wait passed, and
// reports whether all are, with the reads of their sync state that saw
// them loaded when they are (a read's meta may take them: read before its
// data, they claim no more than is loaded, and spare it a query). With
// onStale fail, an unfinished wait is errNotLoadedYet.
func (s *Server) awaitTables(ctx context.Context, tables []string, tw tokenWait) (fresh bool, states map[string]SyncState, err error) {
	if !tw.active() {
		return true, nil, nil
	}
	hold := slotHoldOf(ctx)
	suspended := false
	defer func() {
		if suspended {
			if rerr := hold.resume(ctx); rerr != nil && err == nil {
				err = rerr
			}
		}
	}()
	wctx, cancel := context.WithTimeout(ctx, tw.wait)
	defer cancel()
	var pending []string
	states = map[string]SyncState{}
	for _, t := range tables {
		if st, ok := s.watch.loaded(t, tw.lsn); ok {
			states[t] = st
			continue // loaded already: no wait, no slot given up
		}
		if hold != nil && !suspended {
			hold.suspend()
			suspended = true
		}
		st, err := s.watch.await(wctx, t, tw.lsn)
		if err != nil {
			if ctx.Err() != nil || err == errTooManyWaiters {
				return false, nil, cmp.Or(ctx.Err(), err)
			}
			pending = append(pending, t)
			continue
		}
		states[t] = st
	}
	if len(pending) > 0 && tw.onStale == StaleFail {
		return false, nil, errNotLoadedYet(pending, tw.lsn, tw.wait)
	}
	return len(pending) == 0, states, nil
}

// freshOf reports whether st is loaded through tw's position: meta.fresh,
// nil without a token.
func freshOf(st SyncState, tw tokenWait) *bool {
	if !tw.active() {
		return nil
	}
	f := st.LSN != nil && *st.LSN >= tw.lsn
	return &f
}

// tenantTableAfter finds the tenant's table name for a token read. A table
// the tenant has no row in yet is unknown to the catalog, also when the
// token's write is that first row: then the read waits for the name's
// load watermark and asks the catalog again, past its cache. A name that
// is no table waits in vain and is unknown_table after the wait.
func (s *Server) tenantTableAfter(ctx context.Context, tenant string, lim Limits, name string, tw tokenWait) (*Table, error) {
	t, err := s.catalog.TenantTable(ctx, tenant, lim, name)
	if !tw.active() || !errors.Is(err, ErrUnknownTable) {
		return t, err
	}
	if _, _, werr := s.awaitTables(ctx, []string{name}, tw); werr != nil {
		return nil, werr
	}
	s.catalog.forget(tenant)
	return s.catalog.TenantTable(ctx, tenant, lim, name)
}
