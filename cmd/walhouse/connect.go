package main

import (
	"context"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/walhouse/walhouse/cli"
	"github.com/walhouse/walhouse/pipeline"
)

// metricsHTTP is where a command serves its metrics and health: addr
// (--metrics-addr), with the profiling endpoints when cli.PprofEnv is "1".
func metricsHTTP(addr string) pipeline.HTTP {
	return pipeline.HTTP{Addr: addr, Pprof: cli.PprofOn()}
}

// clickHouse is the ClickHouse of the flags of ep, with its password.
func clickHouse(ep *cli.Endpoints) (pipeline.ClickHouse, error) {
	dsn, err := ep.ClickHouseDSN()
	return pipeline.ClickHouse{DSN: dsn, Cluster: ep.Cluster, Database: ep.Database}, err
}

// openClickHouse connects to the ClickHouse of the flags of ep, with its
// password, as a host of --cluster when it is given. The caller closes the
// connection.
func openClickHouse(ctx context.Context, ep *cli.Endpoints) (driver.Conn, error) {
	ch, err := clickHouse(ep)
	if err != nil {
		return nil, err
	}
	return ch.Open(ctx)
}

// openPG opens a pool of connections to the PostgreSQL at dsn (--pg, or
// serve's lag --pg) with the password of the flags of ep. The caller
// closes the pool.
func openPG(ctx context.Context, ep *cli.Endpoints, dsn string) (*pgxpool.Pool, error) {
	url, err := ep.PGConnString(dsn)
	if err != nil {
		return nil, err
	}
	return pipeline.OpenPG(ctx, url)
}
