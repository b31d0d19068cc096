package record

import (
	"fmt"
	"strings"
	"time"
)

// Heartbeat headers. A heartbeat is a Kafka record with no key and no value
// and these headers, produced by capture to every partition of a table's
// topic: every change of that table committed before At that routes to that
// partition was produced to it before the heartbeat. The sink uses them to
// prove freshness (lastSyncAt) for tables and partitions that are idle.
const (
	HeaderHeartbeat = "walhouse-heartbeat" // At, RFC 3339
	HeaderLSN       = "walhouse-lsn"       // WAL position of the heartbeat
	HeaderTable     = "walhouse-table"     // schema.table
)

// Heartbeat is the content of a heartbeat record.
type Heartbeat struct {
	At     time.Time
	LSN    LSN
	Source Source // Schema and Table only
}

// ParseHeartbeat reads a heartbeat from header values (as returned by
// get). ok is false when the record is not a heartbeat.
func ParseHeartbeat(get func(key string) (string, bool)) (hb Heartbeat, ok bool, err error) {
	at, ok := get(HeaderHeartbeat)
	if !ok {
		return hb, false, nil
	}
	if hb.At, err = time.Parse(time.RFC3339Nano, at); err != nil {
		return hb, true, fmt.Errorf("%w: heartbeat time: %v", ErrInvalid, err)
	}
	lsn, _ := get(HeaderLSN)
	if hb.LSN, err = ParseLSN(lsn); err != nil {
		return hb, true, fmt.Errorf("%w: heartbeat: %v", ErrInvalid, err)
	}
	table, _ := get(HeaderTable)
	schema, name, found := strings.Cut(table, ".")
	if !found || schema == "" || name == "" {
		return hb, true, fmt.Errorf("%w: heartbeat table %q: want schema.table", ErrInvalid, table)
	}
	hb.Source = Source{Schema: schema, Table: name}
	return hb, true, nil
}
