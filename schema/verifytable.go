package schema

import "fmt"

// VerifyTable is the table, in walhouse's database, where `walhouse
// verify` records each table's last round (package clickhouse writes it),
// so that serve (another process) shows it on its status page and in GET
// /v1/lag. It holds counts, WAL positions and times only, never a key, a
// value or a tenant: verify's results are pipeline-wide, and the report
// file (mode 0600) stays the one place that holds values.
const VerifyTable = "_walhouse_verify"

// VerifyOutcome says whether a round verified its table. VerifyTable keeps
// the last round of each outcome per table, so a failed round does not hide
// how far the table was verified before.
type VerifyOutcome uint8

// The outcomes of a round.
const (
	// Verified: the table was compared; the round's counts say what was
	// found.
	Verified VerifyOutcome = iota + 1
	// VerifyFailed: the table could not be verified (not loaded up to the
	// snapshot, a timeout, a connection lost); the round's error says why.
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

// VerifyTableDDL returns the CREATE TABLE statement of VerifyTable in
// database (one server; verify has no --cluster). It is a
// ReplacingMergeTree by table and outcome with finished_at as version: the
// last verified round and the last failed one of each table.
func VerifyTableDDL(database string) string {
	p := Placement{Database: database}
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
