package query

import (
	"context"
	"errors"
	"fmt"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"

	"github.com/walhouse/walhouse/record"
	"github.com/walhouse/walhouse/schema"
)

// PartitionSync is the progress of one Kafka partition of one table.
type PartitionSync struct {
	Partition     int32     `json:"partition"`
	LoadedThrough time.Time `json:"loadedThrough"`
	LSN           LSN       `json:"lsn"`
	UpdatedAt     time.Time `json:"updatedAt"`
}

// SyncState is how far one table is loaded.
//
// LastSyncAt is the minimum loaded_through over the partitions of the
// table's topic (read FINAL): every change committed in PostgreSQL at or
// before it is in ClickHouse. The state is per table, so it holds for every
// tenant of the table. LSN is the minimum lsn likewise.
//
// A partition the sink has not recorded yet (one still loading its share of
// a copy, whose rows prove nothing until the heartbeat after the copy) has
// no row, so a minimum over the rows there are would claim too much. The
// sink records the topic's partition count that capture's heartbeats carry
// (before the first, Kafka's) (TopicPartitions), and both stay nil,
// freshness unknown, until every partition below it has reported. Without
// a count they are nil too. Partitions
// lists the rows there are.
type SyncState struct {
	Table      string     `json:"table"`
	LastSyncAt *time.Time `json:"lastSyncAt"`
	LSN        *LSN       `json:"lsn"`
	// TopicPartitions is the partition count of the table's topic; 0 when
	// not known yet.
	TopicPartitions int32           `json:"topicPartitions"`
	Partitions      []PartitionSync `json:"partitions"`
}

// LSN is a PostgreSQL WAL position; it marshals as "X/Y".
type LSN = record.LSN

// ParseLSN parses the "X/Y" form.
func ParseLSN(s string) (LSN, error) { return record.ParseLSN(s) }

// syncStates reads the progress of table, or of every table when table is
// "". A missing progress table means nothing recorded yet.
func syncStates(ctx context.Context, conn Conn, database, table string) (map[string]*SyncState, error) {
	q := fmt.Sprintf("SELECT source_table, partition, loaded_through, lsn, updated_at, partitions FROM %s.%s FINAL", schema.QuoteIdent(database), schema.QuoteIdent(SyncTable))
	params := ch.Parameters{}
	if table != "" {
		q += " WHERE source_table = {table:String}"
		params["table"] = schema.EscapeParam(table)
	}
	q += " ORDER BY source_table, partition"
	rows, err := conn.Query(ch.Context(ctx, ch.WithParameters(params)), q)
	var ex *ch.Exception
	if errors.As(err, &ex) && (ex.Code == chUnknownTable || ex.Code == chUnknownDatabase) {
		return map[string]*SyncState{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read sync progress from %s.%s: %w", database, SyncTable, err)
	}
	defer rows.Close()
	out := map[string]*SyncState{}
	for rows.Next() {
		var (
			name  string
			p     PartitionSync
			lsn   uint64
			parts int32
		)
		if err := rows.Scan(&name, &p.Partition, &p.LoadedThrough, &lsn, &p.UpdatedAt, &parts); err != nil {
			return nil, fmt.Errorf("read sync progress from %s.%s: %w", database, SyncTable, err)
		}
		p.LSN, p.LoadedThrough, p.UpdatedAt = LSN(lsn), p.LoadedThrough.UTC(), p.UpdatedAt.UTC()
		st := out[name]
		if st == nil {
			st = &SyncState{Table: name}
			out[name] = st
		}
		st.Partitions = append(st.Partitions, p)
		st.TopicPartitions = max(st.TopicPartitions, parts)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read sync progress from %s.%s: %w", database, SyncTable, err)
	}
	for _, st := range out {
		st.settle()
	}
	return out, nil
}

// settle sets LastSyncAt and LSN from the partitions, if every partition of
// the topic reported (see SyncState).
func (st *SyncState) settle() {
	st.LastSyncAt, st.LSN = nil, nil
	reported := make(map[int32]bool, len(st.Partitions))
	for _, p := range st.Partitions {
		if !p.LoadedThrough.IsZero() {
			reported[p.Partition] = true
		}
	}
	for p := int32(0); p < st.TopicPartitions; p++ {
		if !reported[p] {
			return
		}
	}
	if st.TopicPartitions == 0 {
		return
	}
	for _, p := range st.Partitions {
		if st.LastSyncAt == nil || p.LoadedThrough.Before(*st.LastSyncAt) {
			t := p.LoadedThrough
			st.LastSyncAt = &t
		}
		if st.LSN == nil || p.LSN < *st.LSN {
			l := p.LSN
			st.LSN = &l
		}
	}
}

// syncState reads one table's progress; a table with none recorded gets
// a state with nil LastSyncAt.
func syncState(ctx context.Context, conn Conn, database, table string) (SyncState, error) {
	m, err := syncStates(ctx, conn, database, table)
	if err != nil {
		return SyncState{}, err
	}
	if st, ok := m[table]; ok {
		return *st, nil
	}
	return SyncState{Table: table, Partitions: []PartitionSync{}}, nil
}

// ReadSyncState reads how far table (a ClickHouse table name) is loaded in
// database, exactly as meta.lastSyncAt, /v1/lag and the status page see it.
// A table with no progress recorded has a nil LastSyncAt.
func ReadSyncState(ctx context.Context, conn Conn, database, table string) (SyncState, error) {
	return syncState(ctx, conn, database, table)
}
