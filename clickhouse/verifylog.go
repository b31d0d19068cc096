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

// VerifyTable is the table, in walhouse's database, where `walhouse
// verify` records each table's last round, so that serve (another process)
// shows it on its status page and in GET /v1/lag. It holds counts, WAL
// positions and times only, never a key, a value or a tenant: verify's
// results are pipeline-wide, and the report file (mode 0600) stays the one
// place that holds values.
const VerifyTable = "_walhouse_verify"

// MaxVerifyError is the most bytes of a failed round's error VerifyTable
// keeps.
const MaxVerifyError = 1024

// VerifyOutcome says whether a round verified its table. VerifyTable keeps
// the last round of each outcome per table, so a failed round does not hide
// how far the table was verified before.
type VerifyOutcome uint8

// The outcomes of a round.
const (
	// Verified: the table was compared; VerifyRound's counts say what was
	// found.
	Verified VerifyOutcome = iota + 1
	// VerifyFailed: the table could not be verified (not loaded up to the
	// snapshot, a timeout, a connection lost); VerifyRound.Error says why.
	VerifyFailed
)

// String names the outcome as VerifyTable stores it.
func (o VerifyOutcome) String() string {
	switch o {
	case Verified:
		return "verified"
	case VerifyFailed:
		return "failed"
	default:
		return fmt.Sprintf("VerifyOutcome(%d)", uint8(o))
	}
}

// ParseVerifyOutcome reads a name String wrote.
func ParseVerifyOutcome(s string) (VerifyOutcome, error) {
	for o := Verified; o <= VerifyFailed; o++ {
		if o.String() == s {
			return o, nil
		}
	}
	return 0, fmt.Errorf("unknown verify outcome %q in %s", s, VerifyTable)
}

// VerifyRound is one table's round as VerifyTable keeps it: no key, no
// value, no tenant.
type VerifyRound struct {
	// Table is the ClickHouse table name (schema.TableName), as in
	// SyncTable.
	Table      string
	Outcome    VerifyOutcome
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

// VerifyTableDDL returns the CREATE TABLE statement of VerifyTable in
// database (one server; verify has no --cluster). It is a
// ReplacingMergeTree by table and outcome with finished_at as version: the
// last verified round and the last failed one of each table.
func VerifyTableDDL(database string) string {
	p := schema.Placement{Database: database}
	return p.CreateLocal(VerifyTable) + `
(
    source_table    String,
    outcome         LowCardinality(String),
    finished_at     DateTime64(6, 'UTC'),
    snapshot_lsn    UInt64,
    standby         Bool,
    rows_checked    UInt64,
    mismatched_rows UInt64,
    repaired_rows   UInt64,
    not_examined    UInt64,
    changed_since   UInt64,
    error           String
)
` + p.Engine(VerifyTable, "finished_at") + `
ORDER BY (source_table, outcome)`
}

// VerifyLog writes verify's rounds into VerifyTable, creating it first if
// absent. It is safe for concurrent use.
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
	q := schema.Placement{Database: l.database}.Qualified(VerifyTable)
	batch, err := l.conn.PrepareBatch(ctx, "INSERT INTO "+q+" (source_table, outcome, finished_at, snapshot_lsn, standby, rows_checked, mismatched_rows, repaired_rows, not_examined, changed_since, error)")
	if err != nil {
		return fmt.Errorf("record verify rounds in %s: %w", q, err)
	}
	defer batch.Abort()
	for _, r := range rounds {
		if r.Outcome != Verified && r.Outcome != VerifyFailed {
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

// create makes VerifyTable once per VerifyLog.
func (l *VerifyLog) create(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.created {
		return nil
	}
	if err := l.conn.Exec(ctx, VerifyTableDDL(l.database)); err != nil {
		return fmt.Errorf("create %s.%s (verify's ClickHouse user needs CREATE TABLE on it, docs/security.md): %w", l.database, VerifyTable, err)
	}
	l.created = true
	return nil
}
