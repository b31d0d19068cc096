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
	// Filters are ANDed together; a filter may itself be an or, and or
	// not group (see Filter).
	Filters []Filter `json:"filters,omitempty"`
	// TimeRange restricts one date or timestamp column to [from, to), or
	// to the last span before now.
	TimeRange *TimeRange `json:"timeRange,omitempty"`
	// Buckets are time buckets of date or timestamp columns, each an
	// output column named by its As that Columns and GroupBy may list.
	Buckets []Bucket `json:"buckets,omitempty"`
	// GroupBy columns (or bucket names), with Aggregates computed per
	// group.
	GroupBy    []string    `json:"groupBy,omitempty"`
	Aggregates []Aggregate `json:"aggregates,omitempty"`
	// Having filters the groups on aggregate names, ANDed together, with
	// the same operators and groups as Filters.
	Having []Filter `json:"having,omitempty"`
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

// Filter compares one column with a value, or is a group: exactly one of
// a comparison (Column, Op, Value), Or, And and Not is set. Groups nest at
// most MaxFilterDepth deep, and one request holds at most MaxFilterNodes
// comparisons and groups in all.
type Filter struct {
	Column string `json:"column,omitempty"`
	// Op is one of = != < <= > >= in not_in is_null not_null like prefix.
	Op Op `json:"op,omitempty"`
	// Value is a JSON value of the column's type; an array for in and
	// not_in; absent for is_null and not_null.
	Value any `json:"value,omitempty"`
	// Or matches when any of its filters does (at least one).
	Or []Filter `json:"or,omitempty"`
	// And matches when all of its filters do (at least one).
	And []Filter `json:"and,omitempty"`
	// Not matches when its filter does not.
	Not *Filter `json:"not,omitempty"`
}

// TimeRange restricts Column to From ≤ value < To, or to values at or
// after Last before now; either bound may be empty, and Last excludes
// both. Bounds are ISO 8601 timestamps (dates for Date columns).
type TimeRange struct {
	Column string `json:"column"`
	From   string `json:"from,omitempty"`
	To     string `json:"to,omitempty"`
	// Last is a span back from the query's now: a count and a unit, m
	// (minutes), h, d or w, as "7d" or "24h". Now is ClickHouse's clock
	// when the query runs, so each page of a paged read has its own now.
	Last string `json:"last,omitempty"`
}

// Bucket is the start of the time bucket that a date or timestamp column
// falls in: toStartOfInterval(column, INTERVAL Every Unit, TimeZone).
type Bucket struct {
	Column string `json:"column"`
	// Unit is one of minute hour day week month (minute and hour only
	// for timestamp columns). Weeks start on Monday.
	Unit BucketUnit `json:"unit"`
	// Every is how many units a bucket spans (default 1, at most 1000).
	Every int `json:"every,omitempty"`
	// TimeZone is the IANA zone that days, weeks and months start in, one
	// the ClickHouse server knows (default UTC); only for timestamp
	// columns. The bucket start is returned as a timestamp in UTC.
	TimeZone string `json:"timeZone,omitempty"`
	// As names the output column: letters, digits and _, not a column of
	// the table.
	As string `json:"as"`
}

// BucketUnit is the unit of a time bucket.
type BucketUnit string

// The bucket units.
const (
	Minute BucketUnit = "minute"
	Hour   BucketUnit = "hour"
	Day    BucketUnit = "day"
	Week   BucketUnit = "week"
	Month  BucketUnit = "month"
)

// Aggregate is one aggregate function over a column.
type Aggregate struct {
	// Fn is one of count sum avg min max uniq uniqExact quantile. uniq
	// is approximate (a few percent off beyond tens of thousands of
	// values); uniqExact is exact and uses memory for every distinct value
	// (bounded by the query's memory limit).
	Fn string `json:"fn"`
	// Column is required except for count (count without a column counts
	// rows; with one, non-NULL values).
	Column string `json:"column,omitempty"`
	// Q is the level of quantile, from 0 to 1 (0.5 is the median); only
	// for quantile, which is approximate (sampled beyond 8192 values).
	Q *float64 `json:"q,omitempty"`
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
