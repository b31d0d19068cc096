package erasure

import (
	"context"
	"errors"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// nopConn is a Conn that is never reached in pure tests.
type nopConn struct{}

func (nopConn) Exec(context.Context, string, ...any) error { return errors.New("no ClickHouse here") }
func (nopConn) Query(context.Context, string, ...any) (driver.Rows, error) {
	return nil, errors.New("no ClickHouse here")
}
