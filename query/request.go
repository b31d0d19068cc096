package query

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
)

// Request is the body of POST /v1/tables/{table}/query: a structured read,
// never SQL. Every name in it is checked against the table's real columns.
type Request struct {
	// Columns to return; empty means every column (or, with GroupBy or
	// Aggregates, the group-by columns followed by the aggregates).
	Columns []string `json:"columns,omitempty"`
	// Filters are ANDed together.
	Filters []Filter `json:"filters,omitempty"`
	// TimeRange restricts one date or timestamp column to [from, to).
	TimeRange *TimeRange `json:"timeRange,omitempty"`
	// GroupBy columns, with Aggregates computed per group.
	GroupBy    []string    `json:"groupBy,omitempty"`
	Aggregates []Aggregate `json:"aggregates,omitempty"`
	// OrderBy names output columns (selected columns, group-by columns or
	// aggregate aliases). Ties are broken by the sorting key (or the
	// group-by columns) so that pages are stable.
	OrderBy []Order `json:"orderBy,omitempty"`
	// Limit is the page size: default and maximum come from the server's
	// Limits.
	Limit int `json:"limit,omitempty"`
	// Cursor continues a previous response's meta.nextCursor; it is only
	// valid with the same tenant, table and request.
	Cursor string `json:"cursor,omitempty"`
	// Consistency is "final" (default) or "approximate".
	Consistency Consistency `json:"consistency,omitempty"`
	// TokenRead makes the read wait for consistency tokens (token.go).
	TokenRead
}

// Filter compares one column with a value.
type Filter struct {
	Column string `json:"column"`
	// Op is one of = != < <= > >= in not_in is_null not_null like prefix.
	Op Op `json:"op"`
	// Value is a JSON value of the column's type; an array for in and
	// not_in; absent for is_null and not_null.
	Value any `json:"value,omitempty"`
}

// TimeRange restricts Column to From ≤ value < To; either bound may be
// empty. Bounds are ISO 8601 timestamps (dates for Date columns).
type TimeRange struct {
	Column string `json:"column"`
	From   string `json:"from,omitempty"`
	To     string `json:"to,omitempty"`
}

// Aggregate is one aggregate function over a column.
type Aggregate struct {
	// Fn is one of count sum avg min max uniq.
	Fn string `json:"fn"`
	// Column is required except for count (count without a column counts
	// rows; with one, non-NULL values).
	Column string `json:"column,omitempty"`
	// As names the output column; default fn or fn_column.
	As string `json:"as,omitempty"`
}

// Order sorts by one output column.
type Order struct {
	Column string `json:"column"`
	Desc   bool   `json:"desc,omitempty"`
}

// Op is a filter operator.
type Op string

// The filter operators.
const (
	OpEq      Op = "="
	OpNe      Op = "!="
	OpLt      Op = "<"
	OpLe      Op = "<="
	OpGt      Op = ">"
	OpGe      Op = ">="
	OpIn      Op = "in"
	OpNotIn   Op = "not_in"
	OpIsNull  Op = "is_null"
	OpNotNull Op = "not_null"
	OpLike    Op = "like"
	OpPrefix  Op = "prefix"
)

// Consistency says whether a read deduplicates versions (FINAL) or not.
type Consistency string

const (
	// Final reads with FINAL: one row per key, its latest version, deleted
	// rows hidden. The default.
	Final Consistency = "final"
	// Approximate reads without FINAL: faster, but a row updated or
	// deleted recently may appear in several versions until ClickHouse
	// merges its parts. Rows whose latest version is a delete marker are
	// still filtered out (_is_deleted = 0), but older versions of a deleted
	// row may appear. Aggregates count every version present.
	Approximate Consistency = "approximate"
)

// shapeHash identifies the request apart from its cursor, so a cursor is
// only accepted for the request that produced it.
func (r Request) shapeHash() string {
	r.Cursor = ""
	r.TokenRead = TokenRead{} // a later page may wait for other tokens
	if r.Consistency == "" {
		r.Consistency = Final
	}
	b, _ := json.Marshal(r) // cannot fail: every value came from json.Unmarshal
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16])
}
