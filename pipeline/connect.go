package pipeline

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/walhouse/walhouse/clickhouse"
	"github.com/walhouse/walhouse/dedup"
)

// ClickHouse is where the replicated tables are: a server or a cluster.
type ClickHouse struct {
	// DSN is clickhouse://host:9000 (native) or http://host:8123, with its
	// password.
	DSN string
	// Cluster is the cluster of the servers' remote_servers the tables are
	// created on (docs/clickhouse-cluster.md); empty: the one server of DSN.
	Cluster string
	// Database holds the replicated tables.
	Database string
}

// Open connects to c, as a host of c.Cluster when it is set. The caller
// closes the connection.
func (c ClickHouse) Open(ctx context.Context) (driver.Conn, error) {
	if c.Cluster != "" {
		return clickhouse.OpenCluster(ctx, c.DSN, c.Cluster)
	}
	return clickhouse.Open(ctx, c.DSN)
}

// OpenPG opens a pool of connections to the PostgreSQL at url (with its
// password). The caller closes the pool.
func OpenPG(ctx context.Context, url string) (*pgxpool.Pool, error) {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	return pool, nil
}

// OpenDedup opens the dedup store of cfg (its login and TLS set) and
// checks it at start: a refused login or a certificate that does not
// verify stop the start with the fix, since retrying never helps; a store
// that does not answer only means starting in fail-open mode, as when it
// fails later.
func OpenDedup(ctx context.Context, cfg dedup.Config) (*dedup.Store, error) {
	store, err := dedup.New(cfg)
	if err != nil {
		return nil, err
	}
	err = store.Ping(ctx)
	switch {
	case err == nil:
		return store, nil
	case errors.Is(err, dedup.ErrAuth):
		store.Close()
		return nil, fmt.Errorf("%w; check --dedup-user and the password (WALHOUSE_DEDUP_PASSWORD or --dedup-password-file)", err)
	case certificateError(err):
		store.Close()
		return nil, fmt.Errorf("%w; the dedup store's certificate did not verify: give the CA that signed it with --dedup-tls-ca, and name the store in --dedup-addr as its certificate does", err)
	default:
		slog.Warn("sink: the dedup store does not answer; starting without Layer 2 (fail open) until it does", "err", err)
		return store, nil
	}
}

// certificateError reports whether err is a server certificate that did
// not verify (an unknown CA, a name the certificate does not cover):
// retrying never fixes it, and the fix is a CA flag.
func certificateError(err error) bool {
	var certErr *tls.CertificateVerificationError
	var unknown x509.UnknownAuthorityError
	var hostname x509.HostnameError
	return errors.As(err, &certErr) || errors.As(err, &unknown) || errors.As(err, &hostname)
}
