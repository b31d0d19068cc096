package erasure

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/jackc/pgx/v5"
)

// clusterConn answers as a cluster's database: its tables are
// Distributed. It records the statements it runs.
type clusterConn struct {
	execs []string
}

func (c *clusterConn) Exec(_ context.Context, q string, _ ...any) error {
	c.execs = append(c.execs, q)
	return nil
}

func (c *clusterConn) Query(_ context.Context, q string, _ ...any) (driver.Rows, error) {
	if strings.Contains(q, "system.tables") {
		return &stringRows{rows: [][]string{{"orders", "Distributed", "", "", "Nullable(Int64)"}}}, nil
	}
	return emptyRows{}, nil
}

// stringRows are rows of strings.
type stringRows struct {
	driver.Rows
	rows [][]string
	at   int
}

func (r *stringRows) Next() bool   { r.at++; return r.at <= len(r.rows) }
func (r *stringRows) Err() error   { return nil }
func (r *stringRows) Close() error { return nil }
func (r *stringRows) Scan(dest ...any) error {
	for i, d := range dest {
		*d.(*string) = r.rows[r.at-1][i]
	}
	return nil
}

// noPG is a PostgreSQL that must not be reached.
type noPG struct{}

func (noPG) BeginTx(context.Context, pgx.TxOptions) (pgx.Tx, error) {
	return nil, errors.New("PostgreSQL reached")
}

// On a cluster (Distributed tables) an erasure refuses at once with
// ErrCluster, recording nothing: its ledger and mutations would be one
// server's.
func TestEraseRefusesACluster(t *testing.T) {
	conn := &clusterConn{}
	keys, _ := NewKeys([]byte("erasure key of the test, 32 bytes"))
	er, err := NewEraser(Config{PG: noPG{}, Conn: conn, Database: "walhouse", Keys: keys})
	if err != nil {
		t.Fatal(err)
	}
	_, err = er.Erase(context.Background(), Request{Tenant: "acme", Column: "customer_id", Value: "42"})
	if !errors.Is(err, ErrCluster) {
		t.Errorf("erase on a cluster: %v, want ErrCluster", err)
	}
	for _, q := range conn.execs {
		if strings.Contains(q, "INSERT") || strings.Contains(q, "DELETE") {
			t.Errorf("a refused erasure ran %s", q)
		}
	}
}
