package erasure

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/walhouse/walhouse/harness/testenv"
)

// ledgerConn answers the ledger's read with an empty ledger, or with err.
type ledgerConn struct {
	nopConn
	mu    sync.Mutex
	err   error
	reads int
}

func (c *ledgerConn) Query(context.Context, string, ...any) (driver.Rows, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reads++
	if c.err != nil {
		return nil, c.err
	}
	return emptyRows{}, nil
}

func (c *ledgerConn) fail(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.err = err
}

// emptyRows is a result without rows.
type emptyRows struct{ driver.Rows }

func (emptyRows) Next() bool   { return false }
func (emptyRows) Err() error   { return nil }
func (emptyRows) Close() error { return nil }

// A copy of the ledger is fresh for MaxAge from the start of the read it
// comes from; past it Fresh fails, naming the last read's error, until a
// read works again. Every read is a new generation.
func TestLedgerFreshness(t *testing.T) {
	conn := &ledgerConn{}
	l, err := NewLedger(LedgerConfig{Conn: conn, Database: "db", Refresh: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1000, 0)
	l.now = func() time.Time { return now }
	if err := l.Fresh(); !errors.Is(err, ErrLedgerStale) || l.Generation() != 0 {
		t.Errorf("before the first read: Fresh %v, generation %d; want ErrLedgerStale and 0", err, l.Generation())
	}
	if err := l.read(context.Background()); err != nil {
		t.Fatal(err)
	}
	if l.MaxAge() != 2*time.Second || l.Generation() != 1 {
		t.Errorf("max age %v, generation %d; want 2s (twice the refresh) and 1", l.MaxAge(), l.Generation())
	}
	now = now.Add(2 * time.Second)
	if err := l.Fresh(); err != nil || l.Age() != 2*time.Second {
		t.Errorf("at the bound: Fresh %v, age %v; want nil and 2s", err, l.Age())
	}
	now = now.Add(time.Millisecond)
	readErr := errors.New("connection refused")
	l.lastErr.Store(&readErr)
	err = l.Fresh()
	if !errors.Is(err, ErrLedgerStale) || !strings.Contains(err.Error(), "connection refused") || !strings.Contains(err.Error(), "--erasure-max-age") {
		t.Errorf("past the bound: Fresh = %v; want ErrLedgerStale naming the last error and the flag", err)
	}
	if err := l.read(context.Background()); err != nil || l.Fresh() != nil || l.Generation() != 2 || l.Age() != 0 {
		t.Errorf("read again: %v, Fresh %v, generation %d, age %v; want fresh, generation 2, age 0", err, l.Fresh(), l.Generation(), l.Age())
	}
	for _, cfg := range []LedgerConfig{
		{Conn: conn, Database: "db", Refresh: time.Second, MaxAge: time.Second},
		{Conn: conn, Database: "db", Refresh: time.Second, MaxAge: time.Millisecond},
	} {
		if _, err := NewLedger(cfg); err == nil {
			t.Errorf("refresh %v, max age %v: accepted", cfg.Refresh, cfg.MaxAge)
		}
	}
}

// Run retries a failed read sooner than the refresh interval and keeps the
// last copy, which turns stale past MaxAge; a read that works again makes
// it fresh.
func TestLedgerRunRetriesFailedReads(t *testing.T) {
	conn := &ledgerConn{}
	l, err := NewLedger(LedgerConfig{Conn: conn, Database: "db", Refresh: 20 * time.Millisecond, MaxAge: 60 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.read(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Run = %v, want context.Canceled", err)
		}
	}()
	conn.fail(errors.New("ClickHouse unreachable"))
	waitFor(t, "the copy turns stale", func() bool { return errors.Is(l.Fresh(), ErrLedgerStale) })
	if err := l.Fresh(); !strings.Contains(err.Error(), "ClickHouse unreachable") {
		t.Errorf("Fresh = %v, want the read's error named", err)
	}
	conn.fail(nil)
	waitFor(t, "the copy is fresh again", func() bool { return l.Fresh() == nil })
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	err := testenv.Eventually(context.Background(), 10*time.Second, func(context.Context) error {
		if !cond() {
			return errors.New("not yet")
		}
		return nil
	})
	if err != nil {
		t.Fatalf("waited 10s for %s", what)
	}
}

// clockConn is a ledger table on a fake clock: each read takes the next
// of reads (its time, its error) and records when it began and whether
// the copy was stale when it finished (before the new copy replaced it).
// The last read cancels Run. With fakeClock.sleep as the Ledger's sleep,
// Run's schedule is exact and costs no real time.
type clockConn struct {
	nopConn
	clock  *fakeClock
	ledger *Ledger
	reads  []clockRead
	cancel context.CancelFunc

	began []time.Duration // since the clock's start
	stale []bool
}

type clockRead struct {
	took time.Duration
	err  error
}

func (c *clockConn) Query(ctx context.Context, _ string, _ ...any) (driver.Rows, error) {
	if len(c.reads) == 0 {
		c.cancel()
		return nil, ctx.Err()
	}
	r := c.reads[0]
	c.reads = c.reads[1:]
	c.began = append(c.began, c.clock.since())
	c.clock.advance(r.took)
	c.stale = append(c.stale, c.ledger.Fresh() != nil)
	if r.err != nil {
		return nil, r.err
	}
	return emptyRows{}, nil
}

type fakeClock struct {
	mu         sync.Mutex
	start, now time.Time
}

func newFakeClock() *fakeClock {
	t := time.Unix(1000, 0)
	return &fakeClock{start: t, now: t}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) since() time.Duration { return c.Now().Sub(c.start) }

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func (c *fakeClock) sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.advance(d)
	return nil
}

// logged collects the messages of a logger.
type logged struct {
	mu   sync.Mutex
	msgs []string
}

func (l *logged) Enabled(context.Context, slog.Level) bool { return true }
func (l *logged) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.msgs = append(l.msgs, r.Message)
	return nil
}
func (l *logged) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logged) WithGroup(string) slog.Handler      { return l }

func (l *logged) count(substr string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, m := range l.msgs {
		if strings.Contains(m, substr) {
			n++
		}
	}
	return n
}

// Run reads the ledger every refresh interval counted from each read's
// start, so a read that takes a while does not push the copy past its
// bound; a read that worked but left the copy stale (it waited behind
// other queries) is followed by another at once; a failed read is
// retried a second later. "loading resumes" is logged once the copy is
// fresh, not before.
func TestLedgerRunSchedule(t *testing.T) {
	const s = time.Second
	failed := errors.New("ClickHouse unreachable")
	for _, tc := range []struct {
		name  string
		reads []clockRead // after Load's, which begins at 0 and takes 0
		began []time.Duration
		stale []bool // at the end of each read
		// resumes: how many times "loading resumes" is logged
		resumes int
	}{
		{
			name:  "reads shorter than the interval keep its cadence",
			reads: []clockRead{{took: 3 * s}, {took: 3 * s}, {took: 3 * s}},
			began: []time.Duration{5 * s, 10 * s, 15 * s},
			stale: []bool{false, false, false},
		},
		{
			name:    "a read queued past the max age is followed by another at once",
			reads:   []clockRead{{took: 12 * s}, {took: s}, {took: s}},
			began:   []time.Duration{5 * s, 17 * s, 22 * s},
			stale:   []bool{true, true, false},
			resumes: 1,
		},
		{
			// The copy before it turns stale at 10s, while the read runs.
			name:    "a read longer than the interval is followed by the next at once",
			reads:   []clockRead{{took: 7 * s}, {took: s}},
			began:   []time.Duration{5 * s, 12 * s},
			stale:   []bool{true, false},
			resumes: 1,
		},
		{
			name:    "a failed read is retried a second later",
			reads:   []clockRead{{err: failed}, {err: failed}, {took: s}, {took: s}},
			began:   []time.Duration{5 * s, 6 * s, 8 * s, 13 * s},
			stale:   []bool{false, false, false, false},
			resumes: 0,
		},
		{
			name:    "reads failing past the max age stall loading until one works",
			reads:   []clockRead{{err: failed}, {err: failed}, {err: failed}, {err: failed}, {took: s}, {took: s}},
			began:   []time.Duration{5 * s, 6 * s, 8 * s, 12 * s, 17 * s, 22 * s},
			stale:   []bool{false, false, false, true, true, false},
			resumes: 1,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := newFakeClock()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			conn := &clockConn{clock: clock, reads: append([]clockRead{{}}, tc.reads...), cancel: cancel}
			log := &logged{}
			l, err := NewLedger(LedgerConfig{Conn: conn, Database: "db", Refresh: 5 * s, Logger: slog.New(log)}) // max age 10s
			if err != nil {
				t.Fatal(err)
			}
			conn.ledger = l
			l.now, l.sleep = clock.Now, clock.sleep
			if err := l.read(ctx); err != nil { // Load without its tables
				t.Fatal(err)
			}
			if err := l.Run(ctx); !errors.Is(err, context.Canceled) {
				t.Fatalf("Run = %v, want context.Canceled once the reads are done", err)
			}
			if got, want := fmt.Sprint(conn.began[1:]), fmt.Sprint(tc.began); got != want {
				t.Errorf("reads began at %s, want %s", got, want)
			}
			if got, want := fmt.Sprint(conn.stale[1:]), fmt.Sprint(tc.stale); got != want {
				t.Errorf("stale at the end of each read: %s, want %s", got, want)
			}
			if n := log.count("loading resumes"); n != tc.resumes {
				t.Errorf(`"loading resumes" logged %d times, want %d (%q)`, n, tc.resumes, log.msgs)
			}
		})
	}
}

// WaitFresh returns at once while the copy is fresh; otherwise it waits,
// through reads that leave the copy stale, until a read makes it fresh,
// or until its context ends.
func TestLedgerWaitFresh(t *testing.T) {
	clock := newFakeClock()
	conn := &clockConn{clock: clock}
	l, err := NewLedger(LedgerConfig{Conn: conn, Database: "db", Refresh: time.Second}) // max age 2s
	if err != nil {
		t.Fatal(err)
	}
	conn.ledger = l
	l.now = clock.Now
	ctx := context.Background()
	read := func(took time.Duration) {
		t.Helper()
		conn.reads = append(conn.reads, clockRead{took: took})
		if err := l.read(ctx); err != nil {
			t.Fatal(err)
		}
	}
	read(0)
	if err := l.WaitFresh(ctx); err != nil {
		t.Fatalf("WaitFresh on a fresh copy = %v", err)
	}

	clock.advance(3 * time.Second)
	waited := make(chan error, 1)
	go func() { waited <- l.WaitFresh(ctx) }()
	notYet := func(after string) {
		t.Helper()
		select {
		case err := <-waited:
			t.Fatalf("WaitFresh returned %v %s", err, after)
		case <-time.After(50 * time.Millisecond):
		}
	}
	notYet("on a stale copy")
	read(3 * time.Second) // a read that waited past the bound: still stale
	notYet("after a read that left the copy stale")
	read(0)
	select {
	case err := <-waited:
		if err != nil {
			t.Errorf("WaitFresh = %v after a read made the copy fresh", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("WaitFresh still waits 10s after a read made the copy fresh")
	}

	clock.advance(3 * time.Second)
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := l.WaitFresh(cctx); !errors.Is(err, context.Canceled) {
		t.Errorf("WaitFresh with an ended context = %v, want context.Canceled", err)
	}
}
