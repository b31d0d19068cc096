package testenv

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/walhouse/walhouse/idempotency"
)

// PGPool returns a pool of connections to the PostgreSQL at url, closed
// when t ends: after the cleanups registered later, which may still use it.
func PGPool(t testing.TB, url string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatalf("connect to PostgreSQL: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// Layer1PG is PGPool on a database that holds Layer 1's key table
// (idempotency.Migrate), for the tests of writes through Layer 1.
func Layer1PG(t testing.TB, url string) *pgxpool.Pool {
	t.Helper()
	pool := PGPool(t, url)
	if err := idempotency.Migrate(context.Background(), pool); err != nil {
		t.Fatal(err)
	}
	return pool
}

// querier is what PGMajor asks of a connection (*pgx.Conn, *pgxpool.Pool).
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// PGMajor returns the major version of the PostgreSQL that db reaches.
func PGMajor(t testing.TB, db querier) int {
	t.Helper()
	var num int
	if err := db.QueryRow(context.Background(), "SELECT current_setting('server_version_num')::int").Scan(&num); err != nil {
		t.Fatalf("read the server's version: %v", err)
	}
	return num / 10000
}

// SkipBeforePG skips t when the PostgreSQL that db reaches is older than
// major min, which lacks what (e.g. "publication row filters").
func SkipBeforePG(t testing.TB, db querier, min int, what string) {
	t.Helper()
	if major := PGMajor(t, db); major < min {
		t.Skipf("PostgreSQL %d has no %s (%d+)", major, what, min)
	}
}
