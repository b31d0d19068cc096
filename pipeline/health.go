package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/walhouse/walhouse/capture"
	"github.com/walhouse/walhouse/internal/redact"
	"github.com/walhouse/walhouse/internal/textcut"
	"github.com/walhouse/walhouse/record"
	"github.com/walhouse/walhouse/sink"
)

// The health endpoints of the long-running commands, on their metrics (or,
// for serve, API) address: GET /healthz answers 200 for as long as the
// process serves HTTP (liveness: restart it when this fails); GET /readyz
// answers 200 when the command is connected and making progress, 503 when
// not, each check saying why in a small JSON body.

// Check is one finding of a readiness probe.
type Check struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail,omitempty"`
}

// healthReport is the body of /healthz and /readyz.
type healthReport struct {
	Status string  `json:"status"` // "ok" or "unavailable"
	Checks []Check `json:"checks,omitempty"`
}

// Readiness returns the checks behind /readyz. It is called for every
// request, so it is quick and safe for concurrent use; ctx bounds what it
// may ask a service.
type Readiness func(ctx context.Context) []Check

// readyTimeout bounds one /readyz: probes time out after a few seconds.
const readyTimeout = 3 * time.Second

// HandleHealth adds GET /healthz and GET /readyz (and their HEAD) to mux.
func HandleHealth(mux *http.ServeMux, ready Readiness) {
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeHealth(w, http.StatusOK, healthReport{Status: "ok"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
		defer cancel()
		rep := healthReport{Status: "ok", Checks: ready(ctx)}
		code := http.StatusOK
		for _, c := range rep.Checks {
			if !c.OK {
				rep.Status, code = "unavailable", http.StatusServiceUnavailable
			}
		}
		writeHealth(w, code, rep)
	})
}

func writeHealth(w http.ResponseWriter, code int, rep healthReport) {
	b, _ := json.Marshal(rep) // strings and booleans only: cannot fail
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write(append(b, '\n'))
}

// WithHealth serves /healthz and /readyz beside next, which gets every
// other request (serve's query API, whose routes need a key).
func WithHealth(next http.Handler, ready Readiness) http.Handler {
	mux := http.NewServeMux()
	HandleHealth(mux, ready)
	mux.Handle("/", next)
	return mux
}

// clickhousePingEvery is how long serve's readiness reuses a ClickHouse
// ping: probes (of every replica, and of anyone who reaches /readyz, which
// needs no key) never cost ClickHouse more than a ping this often.
const clickhousePingEvery = 5 * time.Second

// Pinger is the part of driver.Conn that readiness uses.
type Pinger interface {
	Ping(ctx context.Context) error
}

// ClickHouseReadiness is serve's readiness: ClickHouse answered a ping
// within clickhousePingEvery. /readyz needs no key, so its answer says
// only that ClickHouse does not answer; the error, which may name hosts
// and users, goes to the log, once per ping. Safe for concurrent use.
type ClickHouseReadiness struct {
	conn Pinger
	log  *slog.Logger
	now  func() time.Time

	mu     sync.Mutex
	at     time.Time // of the last ping
	failed bool
}

// NewClickHouseReadiness pings conn at most every clickhousePingEvery and
// logs its failures to log.
func NewClickHouseReadiness(conn Pinger, log *slog.Logger) *ClickHouseReadiness {
	return &ClickHouseReadiness{conn: conn, log: log, now: time.Now}
}

// Checks is serve's readiness.
func (cr *ClickHouseReadiness) Checks(ctx context.Context) []Check {
	cr.mu.Lock()
	defer cr.mu.Unlock()
	if now := cr.now(); cr.at.IsZero() || now.Sub(cr.at) >= clickhousePingEvery {
		// Not ended by the caller: one who hangs up (anyone may ask, with
		// no key) would fail the ping, and every probe after it for
		// clickhousePingEvery.
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), readyTimeout)
		err := cr.conn.Ping(pctx)
		cancel()
		cr.at, cr.failed = now, err != nil
		if err != nil {
			cr.log.Warn("readiness: ClickHouse does not answer a ping", "err", cut(redact.Error(err).Error()))
		}
	}
	if cr.failed {
		return []Check{{Name: "clickhouse", Detail: "ClickHouse does not answer; serve's log has the error"}}
	}
	return []Check{{Name: "clickhouse", OK: true}}
}

// captureStallAfter is how long capture's confirmed position (and its
// received one) may stand still while the slot holds WAL back before
// capture is not ready. Positions move at least every --status-interval
// (5 s) and heartbeat (10 s) when Kafka acknowledges; a long transaction
// moves the received one.
const captureStallAfter = time.Minute

// CaptureReadiness judges capture ready when it streams from its slot and
// its confirmed position moves whenever the slot holds WAL to confirm. It
// remembers the positions it saw last, so it is used through a pointer.
type CaptureReadiness struct {
	slot       string
	stats      func() capture.Stats // (*capture.Capturer).Stats
	now        func() time.Time
	stallAfter time.Duration

	mu       sync.Mutex
	seen     capture.Stats // the positions as of moved
	movedAt  time.Time     // when a position last moved (or the start)
	observed bool
}

// NewCaptureReadiness judges the capture c streaming from slot.
func NewCaptureReadiness(slot string, stats func() capture.Stats) *CaptureReadiness {
	return &CaptureReadiness{slot: slot, stats: stats, now: time.Now, stallAfter: captureStallAfter, movedAt: time.Now()}
}

// Checks is capture's readiness.
func (cr *CaptureReadiness) Checks(context.Context) []Check {
	st, now := cr.stats(), cr.now()
	cr.mu.Lock()
	defer cr.mu.Unlock()
	// Run stores the slot's start position before it reads the stream: a
	// zero confirmed position means it is still connecting, creating the
	// slot or copying a new slot's snapshot.
	if st.Confirmed == 0 {
		return []Check{{Name: "streaming", Detail: fmt.Sprintf("not streaming from slot %s yet: connecting, creating the slot or copying the initial snapshot (%d rows produced so far)", cr.slot, st.Rows)}}
	}
	if !cr.observed || st.Confirmed != cr.seen.Confirmed || st.Received != cr.seen.Received {
		cr.seen, cr.movedAt, cr.observed = st, now, true
	}
	out := []Check{{Name: "streaming", OK: true, Detail: fmt.Sprintf("slot %s, confirmed %s", cr.slot, st.Confirmed)}}
	progress := Check{Name: "progress", OK: true}
	if held := st.ServerWALEnd - st.Confirmed; st.ServerWALEnd > st.Confirmed {
		if still := now.Sub(cr.movedAt); still > cr.stallAfter {
			progress.OK = false
			progress.Detail = fmt.Sprintf("the confirmed position %s has not moved for %s while the slot holds %d bytes of WAL (server WAL end %s); %d bytes wait for Kafka's acknowledgement",
				st.Confirmed, still.Round(time.Second), held, st.ServerWALEnd, st.PendingBytes)
		} else {
			progress.Detail = fmt.Sprintf("the slot holds %d bytes of WAL", held)
		}
	}
	return append(out, progress)
}

// sinkStuckAfter is how long a table's loads may keep failing (retried
// with backoff up to 30 s) before the sink is not ready: longer than a
// ClickHouse restart, shorter than anyone waits for fresh data.
const sinkStuckAfter = 30 * time.Second

// SinkHealth follows what the sink's /readyz reports: the partitions the
// group assigned to this member (fed by the client's assignment callbacks)
// and the tables whose loads keep failing (fed by the loader it wraps,
// watch). Safe for concurrent use; the nil *SinkHealth ignores everything.
type SinkHealth struct {
	now        func() time.Time
	stuckAfter time.Duration

	mu       sync.Mutex
	assigned map[string]map[int32]bool
	failing  map[string]loadFailure // table → since when its loads fail
	stopped  map[string]bool        // tables stopped on a schema change
}

// loadFailure is a table whose loads keep failing.
type loadFailure struct {
	since time.Time
	err   string
}

// NewSinkHealth follows a sink that has no partition and no failing load
// yet; give it to SinkSettings.Health.
func NewSinkHealth() *SinkHealth {
	return &SinkHealth{now: time.Now, stuckAfter: sinkStuckAfter, assigned: map[string]map[int32]bool{}, failing: map[string]loadFailure{}, stopped: map[string]bool{}}
}

// Assign records partitions the group assigned (kgo.OnPartitionsAssigned).
func (h *SinkHealth) Assign(m map[string][]int32) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for t, ps := range m {
		if h.assigned[t] == nil {
			h.assigned[t] = map[int32]bool{}
		}
		for _, p := range ps {
			h.assigned[t][p] = true
		}
	}
}

// Revoke forgets partitions revoked or lost (kgo.OnPartitionsRevoked,
// kgo.OnPartitionsLost).
func (h *SinkHealth) Revoke(m map[string][]int32) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for t, ps := range m {
		for _, p := range ps {
			delete(h.assigned[t], p)
		}
		if len(h.assigned[t]) == 0 {
			delete(h.assigned, t)
		}
	}
}

// loaded notes the outcome of one load (or TRUNCATE) of table.
func (h *SinkHealth) loaded(ctx context.Context, table string, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var te *sink.TableError
	switch {
	case ctx.Err() != nil:
		// Stopping: says nothing about the table.
	case err == nil, errors.Is(err, sink.ErrPermanent), errors.Is(err, record.ErrInvalid):
		// Loaded, or the sink sets the record aside instead of retrying.
		delete(h.failing, table)
	case errors.As(err, &te):
		delete(h.failing, table)
		h.stopped[table] = true
	default:
		f, ok := h.failing[table]
		if !ok {
			f.since = h.now()
		}
		f.err = err.Error()
		h.failing[table] = f
	}
}

// Checks is the sink's readiness.
func (h *SinkHealth) Checks(context.Context) []Check {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.now()
	parts := Check{Name: "partitions", OK: len(h.assigned) > 0}
	if parts.OK {
		n := 0
		for _, ps := range h.assigned {
			n += len(ps)
		}
		parts.Detail = fmt.Sprintf("%d partitions of %d topics assigned", n, len(h.assigned))
	} else {
		parts.Detail = "no partition assigned: the group is joining or rebalancing, no table topic exists yet, or the group has more sinks than partitions"
	}
	loads := Check{Name: "loads", OK: true}
	var stuck []string
	for table, f := range h.failing {
		if d := now.Sub(f.since); d > h.stuckAfter {
			stuck = append(stuck, fmt.Sprintf("%s: loads failing for %s, retrying: %s", table, d.Round(time.Second), cut(f.err)))
		}
	}
	if len(stuck) > 0 {
		slices.Sort(stuck)
		loads.OK, loads.Detail = false, strings.Join(stuck, "; ")
	}
	out := []Check{parts, loads}
	if len(h.stopped) > 0 {
		// A stopped table waits for an operator (the log says what to do);
		// the other tables load, and a restart would stop it again, so it
		// leaves the sink ready. The alert on walhouse_sink_tables_stopped
		// calls for the operator.
		stopped := make([]string, 0, len(h.stopped))
		for t := range h.stopped {
			stopped = append(stopped, t)
		}
		slices.Sort(stopped)
		out = append(out, Check{Name: "stopped tables", OK: true, Detail: "loading stopped on a schema change (see the log): " + strings.Join(stopped, ", ")})
	}
	return out
}

// LedgerCheck is the erasure ledger's part of the sink's readiness: not
// ready while its copy is too old to load with, when the sink loads
// nothing (erasure.Ledger.Fresh).
func LedgerCheck(l interface{ Fresh() error }) Check {
	if err := l.Fresh(); err != nil {
		return Check{Name: "erasure ledger", Detail: cut(redact.Error(err).Error())}
	}
	return Check{Name: "erasure ledger", OK: true}
}

// GapCheck is the sink's readiness on records Kafka deleted before it read
// them: not ready while loading of a partition stopped at such a gap, which
// waits for an operator (sink.Gap.Fix), nor while a table is copied again
// after one (--recopy-on-gap).
func GapCheck(s interface{ Gaps() []sink.Gap }) Check {
	gaps := s.Gaps()
	if len(gaps) == 0 {
		return Check{Name: "records lost", OK: true}
	}
	var stopped, recovering []string
	for _, g := range gaps {
		at := fmt.Sprintf("%s/%d offsets %d to %d", g.Topic, g.Partition, g.From, g.To-1)
		if g.Recopy != "" {
			recovering = append(recovering, at+" (table "+g.Table+")")
		} else {
			stopped = append(stopped, at)
		}
	}
	var detail []string
	if len(stopped) > 0 {
		detail = append(detail, "loading stopped where Kafka deleted records before the sink read them (the log says how to recover): "+strings.Join(stopped, ", "))
	}
	if len(recovering) > 0 {
		// --recopy-on-gap: loading goes on, the tables are not exact yet.
		detail = append(detail, "recovering: Kafka deleted records before the sink read them, and their tables are being copied again (lastSyncAt held): "+strings.Join(recovering, ", "))
	}
	return Check{Name: "records lost", Detail: cut(strings.Join(detail, "; "))}
}

// Watch returns l reporting the outcome of every load to h; a loader that
// applies TRUNCATEs still does.
func (h *SinkHealth) Watch(l sink.Loader) sink.Loader {
	w := watchedLoader{next: l, h: h}
	if t, ok := l.(sink.Truncater); ok {
		return watchedTruncater{watchedLoader: w, truncater: t}
	}
	return w
}

type watchedLoader struct {
	next sink.Loader
	h    *SinkHealth
}

// Load loads b and notes the outcome.
func (w watchedLoader) Load(ctx context.Context, b sink.Batch) error {
	err := w.next.Load(ctx, b)
	w.h.loaded(ctx, b.Source.Schema+"."+b.Source.Table, err)
	return err
}

type watchedTruncater struct {
	watchedLoader
	truncater sink.Truncater
}

// Truncate applies the marker and notes the outcome.
func (w watchedTruncater) Truncate(ctx context.Context, req sink.TruncateRequest) error {
	err := w.truncater.Truncate(ctx, req)
	w.h.loaded(ctx, req.Truncate.Source.Schema+"."+req.Truncate.Source.Table, err)
	return err
}

// WatchPositions returns p reporting its failures to h as the table's
// loads failing: the sink reads a partition's loaded position before its
// first load, so while ClickHouse fails that read is where loading waits.
// A read that works says nothing of the loads, so it clears nothing.
func (h *SinkHealth) WatchPositions(p sink.Positions) sink.Positions {
	return watchedPositions{next: p, h: h}
}

type watchedPositions struct {
	next sink.Positions
	h    *SinkHealth
}

// LoadedPosition reads the position and notes a failure.
func (w watchedPositions) LoadedPosition(ctx context.Context, src record.Source, partition int32) (record.LSN, time.Time, error) {
	lsn, at, err := w.next.LoadedPosition(ctx, src, partition)
	if err != nil {
		w.h.loaded(ctx, src.Schema+"."+src.Table, err)
	}
	return lsn, at, err
}

// cut shortens an error for a health body: the log has it whole.
func cut(s string) string { return textcut.Shorten(s, 300) }
