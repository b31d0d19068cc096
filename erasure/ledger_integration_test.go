package erasure

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/walhouse/walhouse/harness/testenv"
	"github.com/walhouse/walhouse/record"
)

// The embedded engine runs one query at a time, so a read of the ledger
// queues behind a long query and its copy lands already too old to load
// with: the ledger reads again at once, and a sink waiting for it
// (WaitFresh) resumes within a moment of the long query's end, not a
// refresh interval later. (A server with parallel queries never makes the
// copy stale here; the wait then ends at once.)
func TestIntegrationLedgerResumesPromptlyAfterALongQuery(t *testing.T) {
	f := erasureDatabase(t, 2*time.Minute)
	ctx, conn, db := f.ctx, f.ch, f.db

	const refresh = 2 * time.Second // max age 4s
	l, err := NewLedger(LedgerConfig{Conn: conn, Database: db, Refresh: refresh})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Load(ctx); err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- l.Run(rctx) }()
	defer func() {
		stop()
		if err := <-ran; !errors.Is(err, context.Canceled) {
			t.Errorf("Run = %v, want context.Canceled", err)
		}
	}()

	// 8 s in blocks of 2 s (the engine caps a block's sleep at 3 s): the
	// read queued behind it began at most a refresh after it, so its copy
	// is at least 6 s old when it lands.
	ended := make(chan time.Time, 1)
	go func() {
		err := conn.Exec(ctx, "SELECT sleepEachRow(0.5) FROM numbers(16) FORMAT Null SETTINGS max_block_size = 4")
		if err != nil {
			t.Errorf("the long query: %v", err)
		}
		ended <- time.Now()
	}()
	stale := testenv.Eventually(ctx, 8*time.Second, func(context.Context) error {
		if l.Fresh() == nil {
			return errors.New("the copy is still fresh")
		}
		return nil
	}) == nil
	if err := l.WaitFresh(ctx); err != nil {
		t.Fatal(err)
	}
	fresh := time.Now()
	queryEnd := <-ended
	if !stale {
		t.Logf("the ledger stayed fresh behind the long query (a server that runs queries in parallel)")
		return
	}
	if late := fresh.Sub(queryEnd); late > time.Second {
		t.Errorf("loading resumed %v after the long query ended, want within a second (the ledger is read again at once, not a refresh interval of %v later)", late.Round(time.Millisecond), refresh)
	}
}

// A ledger row made under another erasure key (or any key, for a sink
// given none) is left out and counted, never fatal: a row written into the
// ledger must not stop every sink. The entries under the sink's own key
// still work.
func TestIntegrationLedgerUnknownKeyIsNotFatal(t *testing.T) {
	f := erasureDatabase(t, time.Minute)
	ctx, conn, db := f.ctx, f.ch, f.db
	ours, _ := NewKeys([]byte("the sinks' erasure key, 32 bytes"))
	theirs, _ := NewKeys([]byte("another erasure key, also 32 bytes"))
	for _, k := range []Keys{ours, theirs} {
		f.ledgerEntry(k, "42", "now64(6)")
	}
	rec := &record.Record{TenantID: "acme", Source: record.Source{Schema: "public", Table: "orders"}, CommitLSN: 50,
		Columns: []record.Column{{Name: "id", Key: true}, {Name: "customer_id"}}, Values: []record.Value{{Text: "1"}, {Text: "42"}}}
	for _, tc := range []struct {
		name         string
		keys         *Keys
		entries, bad int
		erased       bool
	}{
		{"our key", &ours, 1, 1, true},
		{"no key", nil, 0, 2, false},
	} {
		l, err := NewLedger(LedgerConfig{Conn: conn, Database: db, Keys: tc.keys})
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Load(ctx); err != nil {
			t.Errorf("%s: Load = %v, want the sink to start", tc.name, err)
			continue
		}
		if l.Entries() != tc.entries || l.Unusable() != tc.bad || l.Erased(rec) != tc.erased {
			t.Errorf("%s: entries %d unusable %d erased %v, want %d %d %v", tc.name, l.Entries(), l.Unusable(), l.Erased(rec), tc.entries, tc.bad, tc.erased)
		}
		// Run reads again and keeps going.
		rctx, stop := context.WithTimeout(ctx, 50*time.Millisecond)
		if err := l.Run(rctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s: Run = %v, want it to run until its context ends", tc.name, err)
		}
		stop()
	}
}

// Between whole reads (every fullReadEvery) the ledger reads only the
// entries recorded since the newest it saw, less ledgerOverlap: a new
// erasure is seen at the next read, and the sinks do not re-read the
// whole ledger every refresh. An entry stamped long before the newest
// (here written by hand) waits for the next whole read.
func TestIntegrationLedgerReadsIncrementally(t *testing.T) {
	f := erasureDatabase(t, time.Minute)
	ctx, conn, db := f.ctx, f.ch, f.db
	keys, _ := NewKeys([]byte("the sinks' erasure key, 32 bytes"))
	insert := func(value, recordedAt string) { f.ledgerEntry(keys, value, recordedAt) }
	insert("1", "now64(6)")
	l, err := NewLedger(LedgerConfig{Conn: conn, Database: db, Keys: &keys})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Load(ctx); err != nil {
		t.Fatal(err)
	}
	insert("2", "now64(6)")
	insert("3", "now64(6) - INTERVAL 1 HOUR") // older than the overlap
	if err := l.read(ctx); err != nil {
		t.Fatal(err)
	}
	if n := l.Entries(); n != 2 {
		t.Errorf("after an incremental read: %d entries, want 2 (the new one, not the one stamped an hour ago)", n)
	}
	later := l.now().Add(fullReadEvery + time.Second)
	l.now = func() time.Time { return later }
	if err := l.read(ctx); err != nil {
		t.Fatal(err)
	}
	if n := l.Entries(); n != 3 {
		t.Errorf("after a whole read: %d entries, want 3", n)
	}
}

// A ledger row stamped in the future (a ClickHouse clock stepped back, a
// row written by hand) does not blind the incremental reads until the next
// whole read: an erasure recorded after it is seen at the next read, as
// its settle time counts on.
func TestIntegrationLedgerFutureStampDoesNotHideNewEntries(t *testing.T) {
	f := erasureDatabase(t, time.Minute)
	ctx, conn, db := f.ctx, f.ch, f.db
	keys, _ := NewKeys([]byte("the sinks' erasure key, 32 bytes"))
	insert := func(value, recordedAt string) { f.ledgerEntry(keys, value, recordedAt) }
	insert("1", "now64(6) + INTERVAL 1 DAY")
	l, err := NewLedger(LedgerConfig{Conn: conn, Database: db, Keys: &keys})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Load(ctx); err != nil {
		t.Fatal(err)
	}
	insert("2", "now64(6)") // an erasure recorded now
	if err := l.read(ctx); err != nil {
		t.Fatal(err)
	}
	rec := &record.Record{TenantID: "acme", Source: record.Source{Schema: "public", Table: "orders"}, CommitLSN: 50,
		Columns: []record.Column{{Name: "id", Key: true}, {Name: "customer_id"}}, Values: []record.Value{{Text: "1"}, {Text: "2"}}}
	if n := l.Entries(); n != 2 || !l.Erased(rec) {
		t.Errorf("after the next read: %d entries, the new subject erased: %v; want 2, true (an entry stamped a day ahead must not hide it)", n, l.Erased(rec))
	}
}
