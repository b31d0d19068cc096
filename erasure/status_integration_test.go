package erasure

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/walhouse/walhouse/schema"
)

// An erasure's start is on record before its ledger entry, and its end —
// the signed manifest, or why it failed — after: Status answers for the
// tenant's erasures only. Begin starts at most StartsPerMinute erasures
// of a tenant in a minute.
func TestIntegrationEraseStatus(t *testing.T) {
	f := newFixture(t, 2*time.Minute)
	ctx, pg, conn, db := f.ctx, f.pg, f.ch, f.db
	f.createDatabase()
	tbl := f.table("orders", "tenant_id text, id bigint, customer_id bigint, PRIMARY KEY (tenant_id, id)", keyedColumns("customer_id", "int8"))
	f.insert(tbl, "('acme', 1, 42, 10, 0, now64()), ('acme', 2, 43, 11, 0, now64())")
	keys, _ := NewKeys([]byte("erasure key of the test, 32 bytes"))
	er, err := NewEraser(Config{PG: pg, Conn: conn, Database: db, Keys: keys, Settle: time.Millisecond, StartsPerMinute: 2})
	if err != nil {
		t.Fatal(err)
	}
	ledgerRows := func() uint64 {
		var n uint64
		if err := conn.QueryRow(ctx, fmt.Sprintf("SELECT count() FROM %s.%s", schema.QuoteIdent(db), schema.QuoteIdent(LedgerTable))).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	id, run, err := er.Begin(ctx, Request{Tenant: "acme", Column: "customer_id", Value: "42", RequestedBy: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := er.Status(ctx, "acme", id); err != nil || st.State != StateStarted || ledgerRows() != 0 {
		t.Errorf("begun: status %+v (%v), %d ledger rows; want started, nothing recorded yet", st, err, ledgerRows())
	}
	if _, err := er.Status(ctx, "globex", id); !errors.Is(err, ErrNoErasure) {
		t.Errorf("another tenant's status: %v, want ErrNoErasure", err)
	}
	m, err := run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	st, err := er.Status(ctx, "acme", id)
	if err != nil || st.State != StateFinished || st.Manifest.Signature != m.Signature || !st.Manifest.Verified {
		t.Errorf("run: status %+v (%v), want finished with the signed manifest", st, err)
	}
	if _, err := VerifyManifest(mustJSON(t, st.Manifest), keys.PublicKey()); err != nil {
		t.Errorf("the stored manifest does not verify: %v", err)
	}

	// A run cut short (its deadline passed) records its failure.
	id, run, err = er.Begin(ctx, Request{Tenant: "acme", Column: "customer_id", Value: "43", RequestedBy: "test"})
	if err != nil {
		t.Fatal(err)
	}
	cut, stop := context.WithCancel(ctx)
	stop()
	if _, err := run(cut); err == nil {
		t.Fatal("a run with its context ended succeeded")
	}
	if st, err := er.Status(ctx, "acme", id); err != nil || st.State != StateFailed || st.Error == "" {
		t.Errorf("a failed run: status %+v (%v), want failed with its error", st, err)
	}

	// Two started within the minute, the most acme may: a third waits;
	// another tenant does not.
	if _, _, err := er.Begin(ctx, Request{Tenant: "acme", Column: "customer_id", Value: "44"}); !errors.As(err, new(*RateError)) {
		t.Errorf("a third erasure within a minute: %v, want *RateError", err)
	}
	if _, _, err := er.Begin(ctx, Request{Tenant: "globex", Column: "customer_id", Value: "44"}); errors.As(err, new(*RateError)) {
		t.Errorf("another tenant's erasure: %v, want no rate refusal", err)
	}
}

// execCounter is a Conn that counts the statements it executes.
type execCounter struct {
	Conn
	execs []string
}

func (c *execCounter) Exec(ctx context.Context, query string, args ...any) error {
	c.execs = append(c.execs, query)
	return c.Conn.Exec(ctx, query, args...)
}

// Status only reads: a client polling GET /v1/erasures/{id} runs no DDL on
// the tables every serve shares, and an id in a database where nothing was
// ever erased is simply no erasure.
func TestIntegrationEraseStatusOnlyReads(t *testing.T) {
	f := newFixture(t, time.Minute)
	ctx, pg, conn, db := f.ctx, f.pg, f.ch, f.db
	counting := &execCounter{Conn: conn}
	keys, _ := NewKeys([]byte("erasure key of the test, 32 bytes"))
	er, err := NewEraser(Config{PG: pg, Conn: counting, Database: db, Keys: keys})
	if err != nil {
		t.Fatal(err)
	}
	// Nothing erased yet: no database, no tables.
	if _, err := er.Status(ctx, "acme", "era_0123"); !errors.Is(err, ErrNoErasure) {
		t.Errorf("status in a database never erased in: %v, want ErrNoErasure", err)
	}
	if err := ensureTables(ctx, conn, db); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := er.Status(ctx, "acme", "era_0123"); !errors.Is(err, ErrNoErasure) {
			t.Errorf("status of an unknown id: %v, want ErrNoErasure", err)
		}
	}
	if len(counting.execs) != 0 {
		t.Errorf("Status executed %d statements (%q), want none: it only reads", len(counting.execs), counting.execs)
	}
}
