package query

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"
)

// DefaultWatchInterval is how often a table's load watermark is read while
// token reads wait for it (Config.WatchInterval).
const DefaultWatchInterval = 25 * time.Millisecond

// watchers reads each waited-for table's load watermark, once per interval
// for all its waiters together: waiting costs no ClickHouse query per
// waiter. A table's watcher runs while it has waiters and stops with the
// last. Safe for concurrent use.
type watchers struct {
	read     func(ctx context.Context, table string) (SyncState, error)
	interval time.Duration
	log      *slog.Logger

	mu      sync.Mutex
	tables  map[string]*watcher
	waiting int // waiters of all tables, at most maxWaiters
}

// maxWaiters bounds the token reads waiting at once, all tenants
// together: they hold no concurrency slot, so this bounds their memory.
const maxWaiters = 4096

// errTooManyWaiters refuses a wait beyond maxWaiters.
var errTooManyWaiters = &apiError{Status: http.StatusTooManyRequests, Code: "server_busy", RetryAfter: 1,
	Message: fmt.Sprintf("the server already has %d reads waiting for consistency tokens, its limit; retry shortly", maxWaiters)}

// watcher is one table's: the watermark last read and a channel closed
// when a newer one is read.
type watcher struct {
	waiters int
	lsn     LSN       // the table's LSN as last read; 0: unknown
	state   SyncState // the read that gave lsn
	changed chan struct{}
}

func newWatchers(read func(ctx context.Context, table string) (SyncState, error), interval time.Duration, log *slog.Logger) *watchers {
	return &watchers{read: read, interval: interval, log: log, tables: map[string]*watcher{}}
}

// loaded reports whether a running watcher of table already saw it loaded
// through lsn, with the read that saw it (false when none runs: the caller
// waits, which starts one).
func (ws *watchers) loaded(table string, lsn LSN) (SyncState, bool) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	w, ok := ws.tables[table]
	if !ok || w.lsn < lsn {
		return SyncState{}, false
	}
	return w.state, true
}

// await blocks until table is loaded through lsn, and returns the read of
// its sync state that saw it, or until ctx ends (ctx.Err());
// errTooManyWaiters when maxWaiters wait already.
func (ws *watchers) await(ctx context.Context, table string, lsn LSN) (SyncState, error) {
	ws.mu.Lock()
	if ws.waiting >= maxWaiters {
		ws.mu.Unlock()
		return SyncState{}, errTooManyWaiters
	}
	ws.waiting++
	w, ok := ws.tables[table]
	if !ok {
		w = &watcher{changed: make(chan struct{})}
		ws.tables[table] = w
		// It ends within an interval of its last waiter leaving.
		go ws.run(table, w)
	}
	w.waiters++
	ws.mu.Unlock()
	defer func() {
		ws.mu.Lock()
		w.waiters--
		ws.waiting--
		ws.mu.Unlock()
	}()
	for {
		ws.mu.Lock()
		got, st, changed := w.lsn, w.state, w.changed
		ws.mu.Unlock()
		if got >= lsn {
			return st, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return SyncState{}, ctx.Err()
		}
	}
}

// run reads table's watermark every interval while w has waiters, and
// wakes them after each read. It removes w when the last waiter left.
func (ws *watchers) run(table string, w *watcher) {
	t := time.NewTimer(0)
	defer t.Stop()
	for range t.C {
		ws.mu.Lock()
		if w.waiters == 0 {
			delete(ws.tables, table)
			ws.mu.Unlock()
			return
		}
		ws.mu.Unlock()
		// A read outlives no waiter by more than one interval: the
		// waiters' own deadlines bound the answer, this the query.
		ctx, cancel := context.WithTimeout(context.Background(), max(time.Second, 20*ws.interval))
		st, err := ws.read(ctx, table)
		cancel()
		if err != nil {
			// The waiters time out and answer from their own read, which
			// fails the same way if ClickHouse is still away.
			ws.log.Debug("read a table's load watermark for token reads", "table", table, "err", err)
		}
		ws.mu.Lock()
		if err == nil && st.LSN != nil && *st.LSN > w.lsn {
			w.lsn, w.state = *st.LSN, st
			close(w.changed)
			w.changed = make(chan struct{})
		}
		ws.mu.Unlock()
		t.Reset(ws.interval)
	}
}

// slotHold is the caller's concurrency slots (inSlot), which a token read
// gives up while it waits so that waiters cannot exhaust them.
type slotHold struct {
	s       *Server
	tenant  string
	lim     Limits
	release func() // nil while suspended
}

type slotHoldCtx struct{}

func slotHoldOf(ctx context.Context) *slotHold {
	h, _ := ctx.Value(slotHoldCtx{}).(*slotHold)
	return h
}

// suspend gives the slots up.
func (h *slotHold) suspend() {
	if h.release != nil {
		h.release()
		h.release = nil
	}
}

// resume takes the slots again. A read that waited its turn is not
// refused because others took its slots meanwhile: it waits for a release,
// up to resumeWait (then 429, as inSlot answers).
func (h *slotHold) resume(ctx context.Context) error {
	if h.release != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, resumeWait)
	defer cancel()
	for {
		freed := h.s.slots.freedChan()
		rel, err := h.s.acquire(h.tenant, h.lim)
		if err == nil {
			h.release = rel
			return nil
		}
		select {
		case <-freed:
		case <-ctx.Done():
			return err
		}
	}
}

// resumeWait bounds how long a token read waits to take its slots back.
const resumeWait = 2 * time.Second

// freedChan returns a channel closed at the next release of a slot.
func (sl *slots) freedChan() <-chan struct{} {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	if sl.freed == nil {
		sl.freed = make(chan struct{})
	}
	return sl.freed
}

// done releases the slots if held.
func (h *slotHold) done() { h.suspend() }

// forget drops what c cached of tenant's tables and the table list, so
// that a token read that waited for a table the tenant had no row in (its
// first write) sees it now rather than after the cache's ttl.
func (c *Catalog) forget(tenant string) {
	c.tenantsMu.Lock()
	delete(c.tenants, tenant)
	c.tenantsMu.Unlock()
	c.mu.Lock()
	c.fetched = time.Time{}
	c.mu.Unlock()
}
