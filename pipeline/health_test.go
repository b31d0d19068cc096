package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/walhouse/walhouse/capture"
	"github.com/walhouse/walhouse/record"
	"github.com/walhouse/walhouse/sink"
)

// TestHealthEndpoints checks the status codes and bodies of /healthz and
// /readyz: liveness answers whatever readiness says.
func TestHealthEndpoints(t *testing.T) {
	for name, tc := range map[string]struct {
		checks     []Check
		wantCode   int
		wantStatus string
	}{
		"ready":       {[]Check{{Name: "a", OK: true}, {Name: "b", OK: true}}, http.StatusOK, "ok"},
		"one not":     {[]Check{{Name: "a", OK: true}, {Name: "b", Detail: "why"}}, http.StatusServiceUnavailable, "unavailable"},
		"no findings": {nil, http.StatusOK, "ok"},
	} {
		t.Run(name, func(t *testing.T) {
			mux := http.NewServeMux()
			HandleHealth(mux, func(context.Context) []Check { return tc.checks })
			rec := httptest.NewRecorder()
			mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
			if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"status":"ok"`) {
				t.Errorf("/healthz: %d %s", rec.Code, rec.Body)
			}
			rec = httptest.NewRecorder()
			mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
			var rep healthReport
			if err := json.Unmarshal(rec.Body.Bytes(), &rep); err != nil {
				t.Fatalf("/readyz body %s: %v", rec.Body, err)
			}
			if rec.Code != tc.wantCode || rep.Status != tc.wantStatus || len(rep.Checks) != len(tc.checks) {
				t.Errorf("/readyz: %d %s, want %d %s", rec.Code, rec.Body, tc.wantCode, tc.wantStatus)
			}
			if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q", ct)
			}
		})
	}
}

// TestCaptureReadiness walks capture through connecting, streaming, a
// stall while the slot holds WAL, and progress again.
func TestCaptureReadiness(t *testing.T) {
	start := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	var st capture.Stats
	now := start
	cr := NewCaptureReadiness("walhouse", func() capture.Stats { return st })
	cr.now, cr.movedAt = func() time.Time { return now }, start
	for _, step := range []struct {
		name    string
		after   time.Duration // since start
		stats   capture.Stats
		ready   bool
		mention string
	}{
		{"connecting", 0, capture.Stats{}, false, "not streaming"},
		{"copying the snapshot", 5 * time.Minute, capture.Stats{Rows: 1000}, false, "1000 rows"},
		{"streaming", 6 * time.Minute, capture.Stats{Confirmed: 100, Received: 100, ServerWALEnd: 100}, true, ""},
		{"WAL waits, briefly", 6*time.Minute + 30*time.Second, capture.Stats{Confirmed: 100, Received: 100, ServerWALEnd: 500}, true, "400 bytes"},
		{"WAL waits a minute and more", 7*time.Minute + time.Second, capture.Stats{Confirmed: 100, Received: 100, ServerWALEnd: 900}, false, "has not moved for 1m1s"},
		{"a long transaction is read", 7*time.Minute + 10*time.Second, capture.Stats{Confirmed: 100, Received: 800, ServerWALEnd: 900}, true, ""},
		{"and stalls", 8*time.Minute + 20*time.Second, capture.Stats{Confirmed: 100, Received: 800, ServerWALEnd: 900}, false, "800 bytes of WAL"},
		{"confirmed", 8*time.Minute + 25*time.Second, capture.Stats{Confirmed: 900, Received: 900, ServerWALEnd: 900}, true, ""},
		{"idle: nothing to confirm", 30 * time.Minute, capture.Stats{Confirmed: 900, Received: 900, ServerWALEnd: 900}, true, ""},
	} {
		st, now = step.stats, start.Add(step.after)
		checks := cr.Checks(context.Background())
		ready, text := judge(checks)
		if ready != step.ready || !strings.Contains(text, step.mention) {
			t.Errorf("%s: ready %v (%s), want %v mentioning %q", step.name, ready, text, step.ready, step.mention)
		}
	}
}

// TestSinkHealth checks assignment, failing loads and stopped tables.
func TestSinkHealth(t *testing.T) {
	start := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	now := start
	h := NewSinkHealth()
	h.now = func() time.Time { return now }
	var loadErr error
	l := h.Watch(loaderFunc(func(context.Context, sink.Batch) error { return loadErr }))
	if _, ok := l.(sink.Truncater); ok {
		t.Error("a loader without Truncate gained one")
	}
	load := func(table string, err error) {
		loadErr = err
		_ = l.Load(context.Background(), sink.Batch{Source: record.Source{Schema: "public", Table: table}})
	}
	transient := errors.New("dial tcp: connection refused")
	for _, step := range []struct {
		name    string
		after   time.Duration
		do      func()
		ready   bool
		mention string
	}{
		{"joining", 0, func() {}, false, "no partition assigned"},
		{"assigned", time.Second, func() { h.Assign(map[string][]int32{"wh.public.a": {0, 1}, "wh.public.b": {0}}) }, true, "3 partitions of 2 topics"},
		{"a load fails", 2 * time.Second, func() { load("a", transient) }, true, ""},
		{"and keeps failing", 40 * time.Second, func() { load("a", transient) }, false, "public.a: loads failing for 38s, retrying: dial tcp"},
		{"loads again", 41 * time.Second, func() { load("a", nil) }, true, ""},
		{"a permanent error is set aside", 42 * time.Second, func() { load("b", fmt.Errorf("%w: bad value", sink.ErrPermanent)) }, true, ""},
		{"long after", 2 * time.Minute, func() {}, true, ""},
		{"a table stops", 3 * time.Minute, func() {
			load("b", &sink.TableError{Table: "public.b", Err: errors.New("uuid→int"), Fix: "re-copy"})
		}, true, "stopped on a schema change (see the log): public.b"},
		{"partitions revoked", 4 * time.Minute, func() { h.Revoke(map[string][]int32{"wh.public.a": {0, 1}, "wh.public.b": {0}}) }, false, "no partition assigned"},
		{"stopping", 5 * time.Minute, func() {
			h.Assign(map[string][]int32{"wh.public.a": {0}})
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			_ = l.Load(ctx, sink.Batch{Source: record.Source{Schema: "public", Table: "a"}})
			now = now.Add(time.Hour)
		}, true, ""},
	} {
		now = start.Add(step.after)
		step.do()
		ready, text := judge(h.Checks(context.Background()))
		if ready != step.ready || !strings.Contains(text, step.mention) {
			t.Errorf("%s: ready %v (%s), want %v mentioning %q", step.name, ready, text, step.ready, step.mention)
		}
	}
	var nilHealth *SinkHealth // without --metrics-addr
	nilHealth.Assign(map[string][]int32{"t": {0}})
	nilHealth.Revoke(map[string][]int32{"t": {0}})
}

// The sink reads a partition's loaded position before its first load:
// while ClickHouse fails that read, the table's loads count as failing,
// and a read that works clears nothing.
func TestSinkHealthWatchesPositions(t *testing.T) {
	start := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	now := start
	h := NewSinkHealth()
	h.now = func() time.Time { return now }
	h.Assign(map[string][]int32{"wh.public.a": {0}})
	var readErr error
	p := h.WatchPositions(positionsFunc(func() error { return readErr }))
	read := func(err error) {
		readErr = err
		_, _, _ = p.LoadedPosition(context.Background(), record.Source{Schema: "public", Table: "a"}, 0)
	}
	read(errors.New("connection reset by peer"))
	now = start.Add(40 * time.Second)
	read(nil)
	if ready, text := judge(h.Checks(context.Background())); ready || !strings.Contains(text, "public.a: loads failing for 40s") {
		t.Errorf("ready %v (%s), want not ready with public.a's loads failing", ready, text)
	}
}

type positionsFunc func() error

func (f positionsFunc) LoadedPosition(context.Context, record.Source, int32) (record.LSN, time.Time, error) {
	return 0, time.Time{}, f()
}

type loaderFunc func(context.Context, sink.Batch) error

func (f loaderFunc) Load(ctx context.Context, b sink.Batch) error { return f(ctx, b) }

// judge returns whether checks say ready, and all of them as text.
func judge(checks []Check) (bool, string) {
	ready := true
	var b strings.Builder
	for _, c := range checks {
		ready = ready && c.OK
		fmt.Fprintf(&b, "%s ok=%v %s; ", c.Name, c.OK, c.Detail)
	}
	return ready, b.String()
}

func TestCut(t *testing.T) {
	long := strings.Repeat("é", 200) // 400 bytes
	got := cut(long)
	if !strings.HasSuffix(got, "…") || len(got) > 300+len("…") || !strings.HasPrefix(long, strings.TrimSuffix(got, "…")) {
		t.Errorf("cut %q", got)
	}
	if cut("short") != "short" {
		t.Error("cut a short text")
	}
}

type freshFunc func() error

func (f freshFunc) Fresh() error { return f() }

// The erasure ledger is a readiness Check: not ready while its copy is too
// old to load with, saying why.
func TestLedgerCheck(t *testing.T) {
	if c := LedgerCheck(freshFunc(func() error { return nil })); !c.OK || c.Name != "erasure ledger" {
		t.Errorf("fresh ledger: %+v, want ok", c)
	}
	stale := errors.New("the erasure ledger could not be read for too long: the last read failed: connection refused")
	if c := LedgerCheck(freshFunc(func() error { return stale })); c.OK || !strings.Contains(c.Detail, "connection refused") {
		t.Errorf("stale ledger: %+v, want not ok with the reason", c)
	}
}

// pings is a ClickHouse that counts pings and fails them with err.
type pings struct {
	n   int
	err error
}

func (p *pings) Ping(ctx context.Context) error {
	p.n++
	if ctx.Err() != nil {
		return ctx.Err() // as the driver does
	}
	return p.err
}

// TestClickhouseReadiness: serve's /readyz pings ClickHouse at most once
// per clickhousePingEvery, however often it is asked, and never shows the
// driver's error (it needs no key; the error may name hosts and users).
func TestClickhouseReadiness(t *testing.T) {
	start := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	now := start
	ch := &pings{err: errors.New("dial tcp 10.1.2.3:9000: user walhouse_admin: connection refused")}
	cr := NewClickHouseReadiness(ch, slog.New(slog.DiscardHandler))
	cr.now = func() time.Time { return now }
	mux := http.NewServeMux()
	HandleHealth(mux, cr.Checks)
	get := func() (int, string) {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
		return rec.Code, rec.Body.String()
	}
	for range 10 {
		code, body := get()
		if code != http.StatusServiceUnavailable || strings.Contains(body, "10.1.2.3") || strings.Contains(body, "walhouse_admin") || strings.Contains(body, "refused") {
			t.Fatalf("/readyz with ClickHouse down: %d %s; want 503 without the error's text", code, body)
		}
	}
	if ch.n != 1 {
		t.Errorf("10 probes pinged ClickHouse %d times, want 1", ch.n)
	}
	ch.err = nil
	now = start.Add(clickhousePingEvery - time.Millisecond)
	if code, _ := get(); code != http.StatusServiceUnavailable || ch.n != 1 {
		t.Errorf("within %s: %d after %d pings, want the cached answer", clickhousePingEvery, code, ch.n)
	}
	now = start.Add(clickhousePingEvery)
	if code, _ := get(); code != http.StatusOK || ch.n != 2 {
		t.Errorf("after %s: %d after %d pings, want a new ping and 200", clickhousePingEvery, code, ch.n)
	}
}

type gapsFunc func() []sink.Gap

func (f gapsFunc) Gaps() []sink.Gap { return f() }

// A partition stopped at records Kafka deleted makes the sink not ready,
// naming the partition and the offsets.
func TestGapCheck(t *testing.T) {
	if c := GapCheck(gapsFunc(func() []sink.Gap { return nil })); !c.OK || c.Name != "records lost" {
		t.Errorf("no gap: %+v, want ok", c)
	}
	gap := sink.Gap{Topic: "wh.public.orders", Partition: 2, From: 10, To: 15}
	if c := GapCheck(gapsFunc(func() []sink.Gap { return []sink.Gap{gap} })); c.OK || !strings.Contains(c.Detail, "wh.public.orders/2 offsets 10 to 14") {
		t.Errorf("a gap: %+v, want not ok naming it", c)
	}
}

// TestClickhouseReadinessIgnoresCallersGone: a caller of /readyz that
// hangs up (anyone may, with no key) does not fail the cached ping, which
// would answer every probe 503 for clickhousePingEvery with ClickHouse up.
func TestClickhouseReadinessIgnoresCallersGone(t *testing.T) {
	ch := &pings{}
	cr := NewClickHouseReadiness(ch, slog.New(slog.DiscardHandler))
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	cr.Checks(gone)
	if c := cr.Checks(context.Background()); len(c) != 1 || !c[0].OK || ch.n != 1 {
		t.Errorf("after a caller that hung up: %+v after %d pings, want ready on the one ping", c, ch.n)
	}
}
