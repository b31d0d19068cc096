package record

import (
	"slices"
	"strconv"
)

// HeaderRows marks a row batch (see the package documentation, "Row
// batches"): its value is the number of rows in the record, in decimal. A
// consumer can weigh a batch by it without decoding the value.
const HeaderRows = "walhouse-rows"

// RowsOf returns the number of rows a Kafka record with the given
// HeaderRows value carries: the count for a well-formed header, 1 for
// anything else (a record is at least one row, and a bad count is found
// when the value is decoded).
func RowsOf(header string) int {
	n, err := strconv.Atoi(header)
	if err != nil || n < 1 {
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
// for a relation without a tenant column, TenantID. Only snapshot rows
// (op Read, version SnapshotVersion) travel in batches: their eventIds can
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
	dst = append(dst, `","ordinal":0,"version":0,"op":"r"`...)
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
