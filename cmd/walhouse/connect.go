package main

import (
	"context"
	"fmt"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walhouse/walhouse/clickhouse"
	"github.com/walhouse/walhouse/kafka"
)

// openClickHouse connects to the ClickHouse of the flags, with its
// password, as a host of --cluster when it is given. The caller closes the
// connection.
func (e *endpoints) openClickHouse(ctx context.Context) (driver.Conn, error) {
	dsn, err := e.clickhouseDSN()
	if err != nil {
		return nil, err
	}
	if e.cluster != "" {
		return clickhouse.OpenCluster(ctx, dsn, e.cluster)
	}
	return clickhouse.Open(ctx, dsn)
}

// kafkaClient connects to the Kafka of the flags, with its security
// settings and opts. The caller closes the client.
func (e *endpoints) kafkaClient(ctx context.Context, opts ...kgo.Opt) (*kgo.Client, error) {
	kc, err := e.kafkaConfig()
	if err != nil {
		return nil, err
	}
	return kafka.NewClient(ctx, kc, opts...)
}

// openPG opens a pool of connections to the PostgreSQL at dsn (--pg, or
// serve's lag --pg) with the password of the flags. The caller closes the
// pool.
func (e *endpoints) openPG(ctx context.Context, dsn string) (*pgxpool.Pool, error) {
	url, err := e.pgConnString(dsn)
	if err != nil {
		return nil, err
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	return pool, nil
}
