package erasure

import (
	"errors"
	"testing"
	"time"
)

// A sink's ledger records its max age in ClickHouse, and an erasure whose
// settle time does not exceed the largest max age recorded recently
// refuses before it records anything; one with a longer settle time, or
// in a database no sink reads, goes ahead.
func TestIntegrationErasureRefusesASettleTimeBelowASinksMaxAge(t *testing.T) {
	f := erasureDatabase(t, time.Minute)
	ctx, conn, db := f.ctx, f.ch, f.db

	eraser := func(settle time.Duration) *Eraser { return &Eraser{conn: conn, database: db, settle: settle} }
	if err := eraser(time.Millisecond).checkReaders(ctx); err != nil {
		t.Errorf("no sink reads the ledger: %v, want nil", err)
	}
	for _, cfg := range []LedgerConfig{
		{Refresh: 5 * time.Second, Reader: "fast@host/1"},                           // max age 10s
		{Refresh: 10 * time.Second, Reader: "slow@host/2"},                          // max age 20s
		{Refresh: time.Second, MaxAge: 15 * time.Second, Reader: "explicit@host/3"}, // max age 15s
	} {
		cfg.Conn, cfg.Database = conn, db
		l, err := NewLedger(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Load(ctx); err != nil {
			t.Fatal(err)
		}
	}
	var short *SettleTooShortError
	for _, settle := range []time.Duration{DefaultSettle, 20 * time.Second} {
		err := eraser(settle).checkReaders(ctx)
		if !errors.As(err, &short) || short.Reader != "slow@host/2" || short.MaxAge != 20*time.Second {
			t.Errorf("settle %v: %v, want *SettleTooShortError naming slow@host/2 and its max age of 20s", settle, err)
		}
	}
	if err := eraser(25 * time.Second).checkReaders(ctx); err != nil {
		t.Errorf("settle 25s: %v, want nil (above every max age)", err)
	}
}
