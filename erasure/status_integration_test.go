package erasure

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walhouse/walhouse/clickhouse"
	"github.com/walhouse/walhouse/internal/testenv"
	"github.com/walhouse/walhouse/record"
	"github.com/walhouse/walhouse/schema"
)

// An erasure's start is on record before its ledger entry, and its end —
// the signed manifest, or why it failed — after: Status answers for the
// tenant's erasures only. Begin starts at most StartsPerMinute erasures
// of a tenant in a minute.
func TestIntegrationEraseStatus(t *testing.T) {
	env := testenv.Require(t, "pg", "clickhouse")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pg, err := pgx.Connect(ctx, env.PG)
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Close(context.Background())
	conn, err := clickhouse.Open(ctx, env.ClickHouse)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	db := testenv.Name("erasure")
	defer conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+schema.QuoteIdent(db)) //nolint:errcheck
	name := testenv.Name("orders")
	if _, err := pg.Exec(ctx, fmt.Sprintf(`CREATE TABLE %s (tenant_id text, id bigint, customer_id bigint, PRIMARY KEY (tenant_id, id))`, pgx.Identifier{name}.Sanitize())); err != nil {
		t.Fatal(err)
	}
	defer pg.Exec(context.Background(), "DROP TABLE "+pgx.Identifier{name}.Sanitize()) //nolint:errcheck
	cols := []record.Column{{Name: "tenant_id", Type: "text", Key: true, TypMod: -1}, {Name: "id", Type: "int8", Key: true, TypMod: -1}, {Name: "customer_id", Type: "int8", TypMod: -1}}
	tbl, err := schema.NewTable(record.Source{Schema: "public", Table: name}, "tenant_id", cols, schema.Options{Database: db})
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"CREATE DATABASE " + schema.QuoteIdent(db), tbl.CreateDDL(1),
		"INSERT INTO " + tbl.QualifiedName() + " (tenant_id, id, customer_id, _version, _is_deleted, _commit_ts) VALUES ('acme', 1, 42, 10, 0, now64()), ('acme', 2, 43, 11, 0, now64())"} {
		if err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
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
	env := testenv.Require(t, "pg", "clickhouse")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pg, err := pgx.Connect(ctx, env.PG)
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Close(context.Background())
	conn, err := clickhouse.Open(ctx, env.ClickHouse)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	db := testenv.Name("erasure")
	defer conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+schema.QuoteIdent(db)) //nolint:errcheck
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
