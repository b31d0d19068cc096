package record

import (
	"fmt"
	"strconv"
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
	// HeaderPartitions is the partition count of the topic, as capture
	// knew it when it sent the heartbeat to each of them. Optional (older
	// captures): 0 when absent. The query API knows a table's lastSyncAt
	// only once every one of these partitions reported.
	HeaderPartitions = "walhouse-partitions"
)

// HeaderCopying marks a change record (value "1") of a table whose copy
// runs next to the stream (capture's online copy). Such a change proves
// nothing about the rows of its partition committed before it, since copied
// rows may still follow it, so the sink does not count it towards the load
// watermark; the heartbeat sent after the copy does.
const HeaderCopying = "walhouse-copying"

// HeaderMove marks (value "1") the delete of a row's old position that
// capture sends when an update moved the row to another ClickHouse key (its
// tenant, primary key or a sorting column of its layout changed): the row
// at its new position follows it, next in the same partition when the
// Kafka key is unchanged. A consumer loads the two together, as loading the
// delete alone leaves the row out of FINAL until the row loads. Optional:
// older captures do not set it.
const HeaderMove = "walhouse-move"

// Heartbeat is the content of a heartbeat record.
type Heartbeat struct {
	At     time.Time
	LSN    LSN
	Source Source // Schema and Table only
	// Partitions is the topic's partition count (HeaderPartitions); 0 when
	// the heartbeat does not say.
	Partitions int32
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
	if n, ok := get(HeaderPartitions); ok {
		parts, err := strconv.ParseInt(n, 10, 32)
		if err != nil || parts < 1 {
			return hb, true, fmt.Errorf("%w: heartbeat partitions %q: want a positive count", ErrInvalid, n)
		}
		hb.Partitions = int32(parts)
	}
	return hb, true, nil
}
