package main

import (
	"context"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/walhouse/walhouse/pipeline"
)

// metricsHTTP is where a command serves its metrics and health: addr
// (--metrics-addr), with the profiling endpoints when PprofEnv is "1".
func metricsHTTP(addr string) pipeline.HTTP {
	return pipeline.HTTP{Addr: addr, Pprof: PprofOn()}
}

// clickHouse is the ClickHouse of the flags, with its password.
func (e *Endpoints) clickHouse() (pipeline.ClickHouse, error) {
	dsn, err := e.ClickHouseDSN()
	return pipeline.ClickHouse{DSN: dsn, Cluster: e.Cluster, Database: e.Database}, err
}

// openClickHouse connects to the ClickHouse of the flags, with its
// password, as a host of --cluster when it is given. The caller closes the
// connection.
func (e *Endpoints) openClickHouse(ctx context.Context) (driver.Conn, error) {
	ch, err := e.clickHouse()
	if err != nil {
		return nil, err
	}
	return ch.Open(ctx)
}

// openPG opens a pool of connections to the PostgreSQL at dsn (--pg, or
// serve's lag --pg) with the password of the flags. The caller closes the
// pool.
func (e *Endpoints) openPG(ctx context.Context, dsn string) (*pgxpool.Pool, error) {
	url, err := e.PGConnString(dsn)
	if err != nil {
		return nil, err
	}
	return pipeline.OpenPG(ctx, url)
}
