package testenv

import (
	"context"
	"testing"

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
