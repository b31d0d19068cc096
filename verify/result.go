package verify

import (
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/walhouse/walhouse/record"
)

// Kind is how a row differs.
type Kind uint8

// The kinds of difference.
const (
	// ValuesDiffer: both sides have the row, with other values.
	ValuesDiffer Kind = iota + 1
	// MissingInClickHouse: PostgreSQL has the row, ClickHouse has no
	// version of it.
	MissingInClickHouse
	// DeletedInClickHouse: PostgreSQL has the row, ClickHouse's latest
	// version is a tombstone.
	DeletedInClickHouse
	// OnlyInClickHouse: ClickHouse shows a live row PostgreSQL does not
	// have (a lost tombstone, a row written behind walhouse's back).
	OnlyInClickHouse
)

// String names the kind as the report does.
func (k Kind) String() string {
	switch k {
	case ValuesDiffer:
		return "values_differ"
	case MissingInClickHouse:
		return "missing_in_clickhouse"
	case DeletedInClickHouse:
		return "deleted_in_clickhouse"
	case OnlyInClickHouse:
		return "only_in_clickhouse"
	default:
		return fmt.Sprintf("Kind(%d)", uint8(k))
	}
}

// MarshalText writes the kind's name.
func (k Kind) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// UnmarshalText reads a name MarshalText wrote, so a report can be read
// back.
func (k *Kind) UnmarshalText(b []byte) error {
	for c := ValuesDiffer; c <= OnlyInClickHouse; c++ {
		if c.String() == string(b) {
			*k = c
			return nil
		}
	}
	return fmt.Errorf("unknown kind of difference %q", b)
}

// ColumnDiff is one column of a row whose values differ: PostgreSQL's text
// output and ClickHouse's value (nil for NULL).
type ColumnDiff struct {
	Column     string  `json:"column"`
	PostgreSQL *string `json:"postgresql"`
	ClickHouse *string `json:"clickhouse"`
}

// KeyValue is one key column's value.
type KeyValue struct {
	Column string `json:"column"`
	Value  string `json:"value"`
}

// Mismatch is a row confirmed different in two snapshots.
type Mismatch struct {
	Tenant string     `json:"tenant,omitempty"`
	Key    []KeyValue `json:"key"`
	Kind   Kind       `json:"kind"`
	// Version is ClickHouse's _version of the row (0: no row).
	Version uint64       `json:"clickhouseVersion"`
	Columns []ColumnDiff `json:"columns,omitempty"`
	// Repaired is set by a repair that wrote PostgreSQL's row (or a
	// tombstone) for the key and found it equal on its check.
	Repaired bool `json:"repaired,omitempty"`
	keys     []string
}

// TableResult is the outcome of verifying one table.
type TableResult struct {
	Table      string     `json:"table"`
	ClickHouse string     `json:"clickhouseTable"`
	Snapshot   record.LSN `json:"snapshotLsn"`
	VerifiedAt time.Time  `json:"verifiedAt"`
	Standby    bool       `json:"standby"`
	// RowsChecked counts PostgreSQL rows compared; Buckets the buckets
	// and SplitBuckets those whose digests differed.
	RowsChecked  int64 `json:"rowsChecked"`
	Buckets      int64 `json:"buckets"`
	SplitBuckets int64 `json:"splitBuckets"`
	// ChangedSince counts differing keys whose ClickHouse version is newer
	// than the snapshot, or that changed between the two checks: checked
	// again next round, never reported.
	ChangedSince int64 `json:"changedSince"`
	// Lossy counts, per column, values equal only through a documented
	// lossy mapping (clamped dates, flattened arrays, numeric NaN).
	Lossy map[string]int64 `json:"lossy,omitempty"`
	// Mismatches are the confirmed differing rows; NotExamined counts
	// the suspects beyond the bound (WithMaxMismatches), neither confirmed
	// nor reported: the next round examines them if they still differ.
	Mismatches  []Mismatch `json:"mismatches"`
	NotExamined int64      `json:"notExamined"`
	Duration    string     `json:"duration"`
}

// Report is what `walhouse verify` writes.
type Report struct {
	Started  time.Time     `json:"started"`
	Finished time.Time     `json:"finished"`
	Tables   []TableResult `json:"tables"`
	// Errors lists tables that could not be verified, and why.
	Errors []string `json:"errors,omitempty"`
}

// WriteReport writes r as JSON to path with mode 0600 (it holds row
// values, which must not reach logs or other users), replacing what was
// there through a temporary file.
func WriteReport(path string, r Report) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("encode the verify report: %w", err)
	}
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("write the verify report: %w", err)
	}
	if err := f.Chmod(0o600); err != nil { // a file left by an earlier run keeps its mode otherwise
		f.Close()
		return fmt.Errorf("write the verify report: %w", err)
	}
	if _, err := f.Write(append(b, '\n')); err != nil {
		f.Close()
		return fmt.Errorf("write the verify report %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write the verify report %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write the verify report %s: %w", path, err)
	}
	return nil
}
