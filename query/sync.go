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
// LastSyncAt is the minimum loaded_through over the table's partitions
// (read FINAL): every change committed in PostgreSQL at or before it is in
// ClickHouse. The state is per table, so it holds for every tenant of the
// table. LSN is the minimum lsn likewise. Both are nil when the sink has
// recorded nothing for the table yet: freshness is then unknown.
type SyncState struct {
	Table      string          `json:"table"`
	LastSyncAt *time.Time      `json:"lastSyncAt"`
	LSN        *LSN            `json:"lsn"`
	Partitions []PartitionSync `json:"partitions"`
}

// LSN is a PostgreSQL WAL position; it marshals as "X/Y".
type LSN = record.LSN

// ParseLSN parses the "X/Y" form.
func ParseLSN(s string) (LSN, error) { return record.ParseLSN(s) }

// syncStates reads the progress of table, or of every table when table is
// "". A missing progress table means nothing recorded yet.
func syncStates(ctx context.Context, conn Conn, database, table string) (map[string]*SyncState, error) {
	q := fmt.Sprintf("SELECT source_table, partition, loaded_through, lsn, updated_at FROM %s.%s FINAL", schema.QuoteIdent(database), schema.QuoteIdent(SyncTable))
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
			name string
			p    PartitionSync
			lsn  uint64
		)
		if err := rows.Scan(&name, &p.Partition, &p.LoadedThrough, &lsn, &p.UpdatedAt); err != nil {
			return nil, fmt.Errorf("read sync progress from %s.%s: %w", database, SyncTable, err)
		}
		p.LSN, p.LoadedThrough, p.UpdatedAt = LSN(lsn), p.LoadedThrough.UTC(), p.UpdatedAt.UTC()
		st := out[name]
		if st == nil {
			st = &SyncState{Table: name}
			out[name] = st
		}
		st.Partitions = append(st.Partitions, p)
		if st.LastSyncAt == nil || p.LoadedThrough.Before(*st.LastSyncAt) {
			t := p.LoadedThrough
			st.LastSyncAt = &t
		}
		if st.LSN == nil || p.LSN < *st.LSN {
			l := p.LSN
			st.LSN = &l
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read sync progress from %s.%s: %w", database, SyncTable, err)
	}
	return out, nil
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
