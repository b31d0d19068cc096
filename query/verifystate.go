package query

import (
	"context"
	"errors"
	"fmt"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"

	"github.com/walhouse/walhouse/schema"
)

// VerifyState is what `walhouse verify` last found for one table
// (schema.VerifyTable): counts, positions and times, never a key or a
// value, so it is shown to admins only (GET /v1/lag, the status page).
type VerifyState struct {
	// VerifiedAt is when the table's last verified round ended; nil when no
	// round verified it yet.
	VerifiedAt *time.Time `json:"verifiedAt"`
	// SnapshotLSN is the WAL position ClickHouse was compared at.
	SnapshotLSN *LSN `json:"snapshotLsn"`
	Standby     bool `json:"standby,omitempty"`
	// RowsChecked counts the PostgreSQL rows compared in that round.
	RowsChecked int64 `json:"rowsChecked"`
	// MismatchedRows counts the rows confirmed different and not
	// repaired: the report file of that round lists them.
	MismatchedRows int64 `json:"mismatchedRows"`
	RepairedRows   int64 `json:"repairedRows"`
	// NotExamined counts suspects beyond verify's --max-mismatches, neither
	// confirmed nor counted in MismatchedRows.
	NotExamined  int64 `json:"notExamined"`
	ChangedSince int64 `json:"changedSince"`
	// FailedAt and Error are set when a round after the last verified one
	// (or with none before it) could not verify the table.
	FailedAt *time.Time `json:"failedAt,omitempty"`
	Error    string     `json:"error,omitempty"`
}

// verifyStates reads the last round of each table verify recorded, by
// ClickHouse table name. A missing table means verify never recorded one.
func verifyStates(ctx context.Context, conn Conn, database string) (map[string]*VerifyState, error) {
	q := fmt.Sprintf(`SELECT source_table, outcome, finished_at, snapshot_lsn, standby, rows_checked, mismatched_rows, repaired_rows, not_examined, changed_since, error
		FROM %s.%s FINAL ORDER BY source_table, finished_at`, schema.QuoteIdent(database), schema.QuoteIdent(schema.VerifyTable))
	rows, err := conn.Query(ctx, q)
	var ex *ch.Exception
	if errors.As(err, &ex) && (ex.Code == chUnknownTable || ex.Code == chUnknownDatabase) {
		return map[string]*VerifyState{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read verify rounds from %s.%s: %w", database, schema.VerifyTable, err)
	}
	defer rows.Close()
	out := map[string]*VerifyState{}
	for rows.Next() {
		var (
			name, outcome, msg                          string
			at                                          time.Time
			lsn, checked, mism, repaired, notEx, change uint64
			standby                                     bool
		)
		if err := rows.Scan(&name, &outcome, &at, &lsn, &standby, &checked, &mism, &repaired, &notEx, &change, &msg); err != nil {
			return nil, fmt.Errorf("read verify rounds from %s.%s: %w", database, schema.VerifyTable, err)
		}
		o, err := schema.ParseVerifyOutcome(outcome)
		if err != nil {
			return nil, err
		}
		st := out[name]
		if st == nil {
			st = &VerifyState{}
			out[name] = st
		}
		at = at.UTC()
		switch o {
		case schema.Verified:
			l := LSN(lsn)
			st.VerifiedAt, st.SnapshotLSN, st.Standby = &at, &l, standby
			st.RowsChecked, st.MismatchedRows, st.RepairedRows = clampInt64(checked), clampInt64(mism), clampInt64(repaired)
			st.NotExamined, st.ChangedSince = clampInt64(notEx), clampInt64(change)
		case schema.VerifyFailed:
			st.FailedAt, st.Error = &at, msg
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read verify rounds from %s.%s: %w", database, schema.VerifyTable, err)
	}
	// A failure is news only when no verified round came after it.
	for _, st := range out {
		if st.FailedAt != nil && st.VerifiedAt != nil && !st.FailedAt.After(*st.VerifiedAt) {
			st.FailedAt, st.Error = nil, ""
		}
	}
	return out, nil
}

// clampInt64 converts a count ClickHouse stores unsigned.
func clampInt64(v uint64) int64 {
	if v > 1<<63-1 {
		return 1<<63 - 1
	}
	return int64(v)
}
