package record

import (
	"fmt"
	"slices"
	"strconv"
)

// HeaderRows marks a row batch (see the package documentation, "Row
// batches"): its value is the number of rows in the record, in decimal. A
// consumer can weigh a batch by it without decoding the value.
const HeaderRows = "walhouse-rows"

// Bounds on what one record may make a decoder allocate. A decoded row or
// value costs far more memory than its text (a Record is about 270 bytes,
// a value 24 more plus the decoder's 40 for its place in the text, against
// 3 bytes for an empty value in JSON), so a record of the size Kafka
// admits could otherwise make the sink allocate many times its size (an
// 8 MiB batch of one-column rows took 893 MiB) and die before it can set
// the record aside. Capture stays far below them: a row batch closes at
// 128 KiB (each row at least 5 bytes, each value 3, so at most about
// 26,000 rows and 44,000 values) or holds one row, and PostgreSQL tables
// have at most 1,600 columns. Decoding stops with ErrInvalid (and
// ErrOverBudget) as soon as a record passes one, before allocating for
// it; at the bounds decoding a row batch allocates a few tens of MiB (53
// MiB measured for 131,072 values in 6 columns).
const (
	// MaxColumns bounds the columns, payload and key members and unchanged
	// names of one record, and the values of one row of a batch:
	// PostgreSQL's MaxTupleAttributeNumber.
	MaxColumns = 1664
	// MaxBatchRows bounds the rows of one row batch (and its HeaderRows).
	MaxBatchRows = 1 << 15
	// MaxBatchCells bounds the values of all rows of one row batch.
	MaxBatchCells = 1 << 17
	// MaxEnumLabels bounds the labels of one enum column (Column.Labels):
	// the most a ClickHouse Enum16 numbered 1..n holds.
	MaxEnumLabels = 32767
	// MaxSchemaLabels bounds the labels of all columns of one schema, so
	// that a forged schema of many columns cannot make each of them a
	// full MaxEnumLabels list.
	MaxSchemaLabels = 1 << 16
)

// ErrOverBudget marks a record refused because decoding it would take more
// memory than any record capture writes (MaxColumns, MaxBatchRows,
// MaxBatchCells); errors wrapping it wrap ErrInvalid too.
var ErrOverBudget = fmt.Errorf("%w: over the decoding budget", ErrInvalid)

// ParseRows reads a HeaderRows value strictly, for a consumer that must
// weigh a batch before decoding it: a count from 1 to MaxBatchRows, in
// decimal. Errors wrap ErrInvalid (and ErrOverBudget for a count above the
// bound).
func ParseRows(header string) (int, error) {
	n, err := strconv.Atoi(header)
	switch {
	case err != nil || n < 1:
		return 0, fmt.Errorf("%w: header %s is %q, want a row count from 1", ErrInvalid, HeaderRows, header)
	case n > MaxBatchRows:
		return 0, fmt.Errorf("%w: header %s says %d rows, more than the %d a row batch may have", ErrOverBudget, HeaderRows, n, MaxBatchRows)
	}
	return n, nil
}

// RowsOf returns the number of rows a Kafka record with the given
// HeaderRows value carries: the count for a well-formed header, 1 for
// anything else, a count over MaxBatchRows included (a record is at least
// one row, and a bad count is found by ParseRows or when the value is
// decoded).
func RowsOf(header string) int {
	n, err := ParseRows(header)
	if err != nil {
		return 1
	}
	return n
}

// RowBatch is the value of one row-batch record while it is being built:
// the fields its rows share, then the rows, each an array of values in
// column order. Make one with Encoder.StartBatch, add rows with
// Encoder.AddRow and take the value with Finish.
type RowBatch struct {
	buf  []byte
	rows int
}

// StartBatch makes b a new row batch of e's relation, written into dst
// (from its length on; dst is b's memory until Finish). The fields all its
// rows share are taken from r: OccurredAt, IngestedAt, LSN, CommitLSN and,
// for a relation without a tenant column, TenantID, and Version. Only
// copied rows (op Read, version SnapshotVersion or RewriteCopyVersion)
// travel in batches: their eventIds can
// be derived from the rows (see SnapshotEventID). A batch is always in
// envelope version 2.
func (e *Encoder) StartBatch(b *RowBatch, dst []byte, r *Record) {
	dst = append(dst, '{')
	dst = append(dst, e.eventType[1:]...) // without its leading comma
	dst = append(dst, Read.verb()...)
	dst = append(dst, `","eventVersion":2,"occurredAt":"`...)
	dst = appendRFC3339Nano(dst, r.OccurredAt)
	dst = append(dst, `","ingestedAt":"`...)
	dst = appendRFC3339Nano(dst, r.IngestedAt)
	dst = append(dst, '"')
	if e.tenantColumn == "" {
		dst = append(dst, `,"tenantId":`...)
		dst = appendJSONString(dst, r.TenantID)
	}
	dst = append(dst, e.tenantJSON...)
	dst = append(dst, e.sourceJSON...)
	dst = append(dst, `,"lsn":"`...)
	dst = appendLSN(dst, r.LSN)
	dst = append(dst, `","commitLsn":"`...)
	dst = appendLSN(dst, r.CommitLSN)
	dst = append(dst, `","ordinal":0,"version":`...)
	dst = strconv.AppendUint(dst, r.Version, 10)
	dst = append(dst, `,"op":"r"`...)
	dst = append(dst, e.schemaRef...)
	dst = append(dst, `,"rows":[`...)
	b.buf, b.rows = dst, 0
}

// AddRow appends one row to b: vals in column order, none of them
// unchanged (a snapshot reads whole rows).
func (e *Encoder) AddRow(b *RowBatch, vals []Value) {
	dst := b.buf
	if b.rows > 0 {
		dst = append(dst, ',')
	}
	dst = append(dst, '[')
	for i := range vals {
		if i > 0 {
			dst = append(dst, ',')
		}
		if vals[i].Null {
			dst = append(dst, "null"...)
		} else {
			dst = appendJSONString(dst, vals[i].Text)
		}
	}
	b.buf = append(dst, ']')
	b.rows++
}

// Grow makes room in b's memory for n more bytes, so that adding a row of
// that size (see RowSize) allocates at most once.
func (b *RowBatch) Grow(n int) { b.buf = slices.Grow(b.buf, n) }

// Rows returns the number of rows added to b.
func (b *RowBatch) Rows() int { return b.rows }

// Size returns the bytes b has written so far, from the start of its
// record.
func (b *RowBatch) Size() int { return len(b.buf) }

// Finish ends b and returns the buffer StartBatch was given, extended by
// the complete record value; b is empty afterwards.
func (b *RowBatch) Finish() []byte {
	out := append(b.buf, "]}"...)
	b.buf, b.rows = nil, 0
	return out
}
