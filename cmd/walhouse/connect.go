package main

import (
	"context"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
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
