package record

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// EnvelopeVersion is the version of the wire format this package writes by
// default. Decode reads it and version 1; a new version gets a new number
// and a window in which both are read.
const EnvelopeVersion = 2

// Op is the kind of a row change.
type Op uint8

// The row operations. The zero value is invalid so that a forgotten field is
// caught by Validate.
const (
	Insert Op = iota + 1
	Update
	Delete
	// Read is a row read by a copy (a snapshot); a consumer applies it like
	// an insert. Its version is SnapshotVersion, or, for a copy after a
	// table rewrite, Version of its LSN (see RewriteCopyVersion).
	Read
)

// String returns the one-letter wire code of op ("c", "u", "d").
func (op Op) String() string {
	switch op {
	case Insert:
		return "c"
	case Update:
		return "u"
	case Delete:
		return "d"
	case Read:
		return "r"
	default:
		return fmt.Sprintf("Op(%d)", uint8(op))
	}
}

// verb is the past-tense word used in eventType.
func (op Op) verb() string {
	switch op {
	case Insert:
		return "inserted"
	case Update:
		return "updated"
	case Delete:
		return "deleted"
	case Read:
		return "snapshotted"
	default:
		return "unknown"
	}
}

// ParseOp parses a wire code written by Op.String.
func ParseOp(s string) (Op, error) {
	switch s {
	case "c":
		return Insert, nil
	case "u":
		return Update, nil
	case "d":
		return Delete, nil
	case "r":
		return Read, nil
	default:
		return 0, fmt.Errorf("unknown op %q (want c, u, d or r)", s)
	}
}

// Column describes one column of the source relation as capture saw it.
type Column struct {
	// Name is the PostgreSQL column name, exactly as in the catalog.
	Name string `json:"name"`
	// Type is the PostgreSQL type name of the column or, for arrays, of the
	// element (e.g. "int8", "numeric", "timestamptz", "order_status"). Domains
	// are resolved to their base type.
	Type string `json:"type"`
	// Enum is true when Type is an enum type.
	Enum bool `json:"enum,omitempty"`
	// Array is true for array columns.
	Array bool `json:"array,omitempty"`
	// TypMod is the PostgreSQL type modifier (atttypmod), -1 when none. It
	// carries numeric precision/scale and varchar length.
	TypMod int32 `json:"typmod"`
	// Key is true for columns of the replica identity (the primary key).
	Key bool `json:"key,omitempty"`
	// Attnum is the column's number in the PostgreSQL catalog (0 when
	// unknown). It survives a RENAME COLUMN, so a consumer can tell a
	// renamed column from a dropped one and a new one.
	Attnum int16 `json:"attnum,omitempty"`
	// Missing is the value rows written before the column was added have
	// (ALTER TABLE ADD COLUMN ... DEFAULT, which PostgreSQL applies without
	// rewriting, so without changes in the stream); nil when none.
	Missing *string `json:"missing,omitempty"`
	// Labels are an enum column's labels in PostgreSQL's order
	// (pg_enum.enumsortorder), carried only when a layout stores the
	// column as a ClickHouse Enum8 or Enum16, which is built from them;
	// empty otherwise. A label added later (ALTER TYPE ... ADD VALUE)
	// makes a new schema. At most MaxEnumLabels, MaxSchemaLabels over a
	// schema.
	Labels []string `json:"labels,omitempty"`
}

// Source says where a change was read.
type Source struct {
	// ID identifies the PostgreSQL database the change came from; it is part
	// of every eventId, so two sources never produce the same eventId.
	ID string `json:"id"`
	// Schema and Table name the source relation.
	Schema string `json:"schema"`
	Table  string `json:"table"`
}

// Record is one row change.
type Record struct {
	EventID    string    // see EventID
	OccurredAt time.Time // commit time of the transaction
	IngestedAt time.Time // when capture read the change
	// TenantID is the row's tenant: the tenant column's value, which may
	// be the empty string (a legitimate PostgreSQL value, carried as is),
	// or the configured default tenant of a table without one.
	TenantID string
	// TenantColumn names the source column the tenant was read from; empty
	// when the table has none and the tenant is a configured constant.
	TenantColumn string
	Source       Source
	LSN          LSN // the change's own WAL position
	CommitLSN    LSN // commit LSN of the transaction
	Ordinal      uint32
	Version      uint64
	Op           Op
	Columns      []Column
	SchemaID     string
	// Values holds one value per column, aligned with Columns. For a delete
	// they are the old row as far as the replica identity sends it (the key
	// columns at least; the others are null).
	Values []Value
	// OldKey holds the old values of the key columns (aligned with Columns,
	// non-key entries null) when an update changed the row's key; nil
	// otherwise. Capture also emits a delete of the old key, so a consumer
	// may ignore it.
	OldKey []Value
}

// Value is one column value of a row.
type Value struct {
	// Text is PostgreSQL's text output of the value.
	Text string
	// Null is true for SQL NULL.
	Null bool
	// Unchanged is true for an unchanged TOASTed value that PostgreSQL did
	// not send: the row's stored value stays as it is.
	Unchanged bool
}

// EventType returns "<schema>.<table>.<verb>", the envelope's eventType.
func (r *Record) EventType() string {
	return r.Source.Schema + "." + r.Source.Table + "." + r.Op.verb()
}

// ErrInvalid is wrapped by every validation error, so callers can route
// invalid records (for example to a dead-letter topic) with errors.Is.
var ErrInvalid = errors.New("invalid record")

// Validate reports every problem of r at once; nil means r may be produced
// or loaded.
func (r *Record) Validate() error {
	if err := ValidateColumns(r.TenantColumn, r.Columns); err != nil {
		return err
	}
	return r.ValidateRow()
}

// problems collects what a validation finds, keeping the first
// maxProblems: a record with one fault per column must not make an error
// (and a log line, and a dead-letter header) as large as itself.
type problems struct {
	errs []error
	more int
}

const maxProblems = 8

func (p *problems) add(format string, args ...any) {
	if len(p.errs) == maxProblems {
		p.more++
		return
	}
	p.errs = append(p.errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...))
}

func (p *problems) err() error {
	if p.more > 0 {
		return errors.Join(append(p.errs, fmt.Errorf("and %d more problems", p.more))...)
	}
	return errors.Join(p.errs...)
}

// ValidateColumns checks a relation's shape: names and types present and
// unique, a key column, the tenant column among them. A producer checks it
// once per shape and calls ValidateRow per row.
func ValidateColumns(tenantColumn string, cols []Column) error {
	var errs problems
	bad := errs.add
	if len(cols) == 0 {
		bad("columns are missing")
	}
	seen := make(map[string]bool, len(cols))
	keys, labels := 0, 0
	for _, c := range cols {
		labels += len(c.Labels)
		if err := validateLabels(c); err != nil {
			bad("column %q: %v", c.Name, err)
		}
		if c.Name == "" || c.Type == "" {
			bad("column %+v must have a name and a type", c)
		}
		if seen[c.Name] {
			bad("column %q appears twice", c.Name)
		}
		seen[c.Name] = true
		if c.Key {
			keys++
		}
	}
	if tenantColumn != "" && !seen[tenantColumn] {
		bad("tenant column %q is not among the columns", tenantColumn)
	}
	if keys == 0 {
		bad("no key column: the source table needs a primary key or replica identity index")
	}
	if labels > MaxSchemaLabels {
		bad("%d enum labels in all, more than the %d a schema may carry", labels, MaxSchemaLabels)
	}
	return errs.err()
}

// validateLabels checks an enum column's labels: only on a single enum
// column, at most MaxEnumLabels, each once (PostgreSQL's labels are
// unique within their type).
func validateLabels(c Column) error {
	if len(c.Labels) == 0 {
		return nil
	}
	switch {
	case !c.Enum || c.Array:
		return errors.New("labels are for enum columns that are not arrays")
	case len(c.Labels) > MaxEnumLabels:
		return fmt.Errorf("%d enum labels, more than %d", len(c.Labels), MaxEnumLabels)
	}
	seen := make(map[string]bool, len(c.Labels))
	for _, l := range c.Labels {
		if seen[l] {
			return fmt.Errorf("enum label %q appears twice", l)
		}
		seen[l] = true
	}
	return nil
}

// ValidateRow checks what varies per row: identity, position, op, tenant
// and values. It assumes the columns passed ValidateColumns.
func (r *Record) ValidateRow() error {
	var errs problems
	bad := errs.add
	if _, err := ParseEventID(r.EventID); err != nil {
		bad("eventId: %v", err)
	}
	if r.Op < Insert || r.Op > Read {
		bad("op %v is not insert, update, delete or read", r.Op)
	}
	if r.Op == Read && r.Version != SnapshotVersion && r.Version != Version(r.LSN) {
		bad("copied row has version %d, want %d (a copy) or its lsn %s (%d, a copy after a rewrite)", r.Version, SnapshotVersion, r.LSN, Version(r.LSN))
	}
	if r.Source.ID == "" || r.Source.Schema == "" || r.Source.Table == "" {
		bad("source %+v must name id, schema and table", r.Source)
	}
	if r.OccurredAt.IsZero() {
		bad("occurredAt is missing")
	}
	if r.CommitLSN == 0 || r.LSN == 0 {
		bad("lsn and commitLsn must be set")
	}
	// A change precedes its commit, and its version is its own WAL
	// position (see Version; one below for a move's delete, MoveVersion):
	// a record that says otherwise would order itself above or below
	// changes it never saw.
	if r.LSN > r.CommitLSN {
		bad("lsn %s is after commitLsn %s", r.LSN, r.CommitLSN)
	}
	if r.Op != Read && r.Version != Version(r.LSN) && (r.Op != Delete || r.Version != MoveVersion(r.LSN)) {
		bad("version %d is not the change's WAL position %s (%d), nor one below it (a move's delete)", r.Version, r.LSN, Version(r.LSN))
	}
	if len(r.Values) != len(r.Columns) {
		bad("%d values for %d columns", len(r.Values), len(r.Columns))
	} else {
		for i, c := range r.Columns {
			v := r.Values[i]
			if v.Null && v.Unchanged {
				bad("column %q is both null and unchanged", c.Name)
			}
			if c.Key && (v.Null || v.Unchanged) {
				bad("key column %q has no value", c.Name)
			}
		}
	}
	if r.OldKey != nil && len(r.OldKey) != len(r.Columns) {
		bad("%d old key values for %d columns", len(r.OldKey), len(r.Columns))
	}
	if r.TenantColumn != "" && len(r.Values) == len(r.Columns) {
		for i, c := range r.Columns {
			if c.Name == r.TenantColumn && (r.Values[i].Null || r.Values[i].Unchanged || r.Values[i].Text != r.TenantID) {
				bad("tenantId %q does not match tenant column %q", r.TenantID, c.Name)
			}
		}
	}
	return errs.err()
}

// SchemaID returns a short, stable hash of cols: records whose columns are
// equal carry the same id, so a consumer can cache what it derived from them.
//
// The hashed text is, per column, `"name" "type" enum array typmod key
// attnum[ "missing"][ labels "label"…]` (Go-quoted strings, true/false, decimals) after a
// line `tenant "column"`; it is written with strconv rather than fmt, which
// made this a third of decoding a version 1 record, and
// TestSchemaIDMatchesReference pins it to the fmt form.
func SchemaID(tenantColumn string, cols []Column) string {
	h := sha256.New()
	b := make([]byte, 0, 128)
	b = appendTenantIdentity(b, tenantColumn)
	for _, c := range cols {
		b = appendColumnIdentity(b, c)
		h.Write(b)
		b = b[:0]
	}
	h.Write(b)
	var sum [sha256.Size]byte
	return hex.EncodeToString(h.Sum(sum[:0])[:8])
}

// appendTenantIdentity and appendColumnIdentity append the lines of the
// text SchemaID hashes; Schema.Same compares that whole text.
func appendTenantIdentity(b []byte, tenantColumn string) []byte {
	b = append(b, "tenant "...)
	b = strconv.AppendQuote(b, tenantColumn)
	return append(b, '\n')
}

func appendColumnIdentity(b []byte, c Column) []byte {
	b = strconv.AppendQuote(b, c.Name)
	b = append(b, ' ')
	b = strconv.AppendQuote(b, c.Type)
	b = append(b, ' ')
	b = strconv.AppendBool(b, c.Enum)
	b = append(b, ' ')
	b = strconv.AppendBool(b, c.Array)
	b = append(b, ' ')
	b = strconv.AppendInt(b, int64(c.TypMod), 10)
	b = append(b, ' ')
	b = strconv.AppendBool(b, c.Key)
	b = append(b, ' ')
	b = strconv.AppendInt(b, int64(c.Attnum), 10)
	if c.Missing != nil {
		b = append(b, ' ')
		b = strconv.AppendQuote(b, *c.Missing)
	}
	if len(c.Labels) > 0 {
		// Only when given, so the id of every schema without labels is
		// what it was before they existed.
		b = append(b, " labels"...)
		for _, l := range c.Labels {
			b = append(b, ' ')
			b = strconv.AppendQuote(b, l)
		}
	}
	return append(b, '\n')
}

// KeyColumns returns the names of the key columns of cols, in column order.
func KeyColumns(cols []Column) []string {
	var names []string
	for _, c := range cols {
		if c.Key {
			names = append(names, c.Name)
		}
	}
	return names
}

// PartitionKey returns the Kafka key for a change of the row identified by
// tenant and the key values: a JSON array of strings, so it is unambiguous
// whatever the values contain.
func PartitionKey(tenant string, keyValues []string) string {
	b := appendJSONString([]byte{'['}, tenant)
	for _, v := range keyValues {
		b = append(b, ',')
		b = appendJSONString(b, v)
	}
	return string(append(b, ']'))
}
