package erasure

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/walhouse/walhouse/internal/testenv"
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
