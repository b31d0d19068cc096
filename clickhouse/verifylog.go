package clickhouse

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/walhouse/walhouse/internal/textcut"
	"github.com/walhouse/walhouse/schema"
)

// MaxVerifyError is the most bytes of a failed round's error
// schema.VerifyTable keeps.
const MaxVerifyError = 1024

// VerifyRound is one table's round as schema.VerifyTable keeps it: no
// key, no value, no tenant.
type VerifyRound struct {
	// Table is the ClickHouse table name (schema.TableName), as in
	// schema.SyncTable.
	Table      string
	Outcome    schema.VerifyOutcome
	FinishedAt time.Time
	// SnapshotLSN is the WAL position of the PostgreSQL snapshot compared
	// (0 for a failed round).
	SnapshotLSN uint64
	// Standby is set when the snapshot was a standby's.
	Standby bool
	// RowsChecked counts the PostgreSQL rows compared; MismatchedRows the
	// rows confirmed different and not repaired; RepairedRows those a
	// repair fixed; NotExamined the suspects beyond verify's bound;
	// ChangedSince the differing rows that changed since the snapshot.
	RowsChecked, MismatchedRows, RepairedRows, NotExamined, ChangedSince int64
	// Error is why a failed round failed (cut to MaxVerifyError bytes): the
	// same value-free text verify logs.
	Error string
}

// VerifyLog writes verify's rounds into schema.VerifyTable (its shape and
// DDL are schema's), creating it first if absent. It is safe for
// concurrent use.
type VerifyLog struct {
	conn     driver.Conn
	database string
	mu       sync.Mutex
	created  bool
}

// NewVerifyLog returns a VerifyLog writing to database through conn.
func NewVerifyLog(conn driver.Conn, database string) *VerifyLog {
	return &VerifyLog{conn: conn, database: database}
}

// Record inserts rounds, each replacing its table's last round of the
// same outcome.
func (l *VerifyLog) Record(ctx context.Context, rounds ...VerifyRound) error {
	if len(rounds) == 0 {
		return nil
	}
	if err := l.create(ctx); err != nil {
		return err
	}
	q := schema.Placement{Database: l.database}.Qualified(schema.VerifyTable)
	batch, err := l.conn.PrepareBatch(ctx, "INSERT INTO "+q+" (source_table, outcome, finished_at, snapshot_lsn, standby, rows_checked, mismatched_rows, repaired_rows, not_examined, changed_since, error)")
	if err != nil {
		return fmt.Errorf("record verify rounds in %s: %w", q, err)
	}
	defer batch.Abort()
	for _, r := range rounds {
		if r.Outcome != schema.Verified && r.Outcome != schema.VerifyFailed {
			return fmt.Errorf("record verify round of %s: outcome %v is neither verified nor failed", r.Table, r.Outcome)
		}
		if err := batch.Append(r.Table, r.Outcome.String(), r.FinishedAt.UTC(), r.SnapshotLSN, r.Standby,
			uint64(max(r.RowsChecked, 0)), uint64(max(r.MismatchedRows, 0)), uint64(max(r.RepairedRows, 0)),
			uint64(max(r.NotExamined, 0)), uint64(max(r.ChangedSince, 0)), textcut.Head(r.Error, MaxVerifyError)); err != nil {
			return fmt.Errorf("record verify round of %s: %w", r.Table, err)
		}
	}
	if err := batch.Send(); err != nil {
		return fmt.Errorf("record verify rounds in %s (verify's ClickHouse user needs CREATE TABLE and INSERT on it, docs/security.md): %w", q, err)
	}
	return nil
}

// create makes schema.VerifyTable once per VerifyLog.
func (l *VerifyLog) create(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.created {
		return nil
	}
	if err := l.conn.Exec(ctx, schema.VerifyTableDDL(l.database)); err != nil {
		return fmt.Errorf("create %s.%s (verify's ClickHouse user needs CREATE TABLE on it, docs/security.md): %w", l.database, schema.VerifyTable, err)
	}
	l.created = true
	return nil
}
