package sink

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walhouse/walhouse/record"
)

// A Kafka record is classified once, when a poll brings it (classify): what
// it is and what its headers say are read there, and everything after (the
// pair hold in Run, cutting chunks, segments between markers, decoding, the
// watermark, the dead letters) uses the item instead of reading headers
// again.

// kind is what a Kafka record of a table topic is to the sink.
type kind uint8

const (
	// kindChange is one row's change: any record that is none of the others
	// (decoding refuses what is not a change).
	kindChange kind = iota
	// kindRowBatch is many rows in one record (record.HeaderRows, with a
	// value; see batch.go).
	kindRowBatch
	// kindHeartbeat is a record.Heartbeat: valueless, heartbeat headers.
	kindHeartbeat
	// kindTruncate is a record.Truncate: valueless, a heartbeat's
	// headers and record.HeaderTruncate.
	kindTruncate
	// kindRecopy is a record.RecopyDone: valueless, a heartbeat's
	// headers and record.HeaderRecopy.
	kindRecopy
)

// String names the kind in errors.
func (k kind) String() string {
	switch k {
	case kindChange:
		return "change"
	case kindRowBatch:
		return "row batch"
	case kindHeartbeat:
		return "heartbeat"
	case kindTruncate:
		return "truncate marker"
	case kindRecopy:
		return "re-copy done marker"
	default:
		return fmt.Sprintf("kind(%d)", uint8(k))
	}
}

// item is a Kafka record with what the sink read of its headers. A poll
// holds one per record, so it is kept small (24 bytes): what few records
// have is behind detail.
type item struct {
	*kgo.Record
	// rows is what the record weighs when batches are cut: the count of
	// its record.HeaderRows when it has a well-formed one (record.RowsOf),
	// else 1. At most record.MaxBatchRows.
	rows int32
	kind kind
	// copying marks a change captured while its table's copy ran
	// (record.HeaderCopying): it proves nothing for the watermark.
	copying bool
	// move marks the delete half of a row's move (record.HeaderMove): the
	// row at its new position follows it.
	move bool
	// detail is set only for a heartbeat, a marker, and a record whose
	// headers are malformed.
	detail *detail
}

// detail is what a heartbeat's or marker's headers say, and why a record
// can never be loaded when its headers say so.
type detail struct {
	// err is why the record can never be loaded (a malformed marker,
	// heartbeat or rows count); it goes to the dead letters with it.
	err error
	// The content of a heartbeat, truncate or re-copy done marker: the
	// field of the item's kind is set, with what could be parsed when err
	// is set.
	heartbeat record.Heartbeat
	truncate  record.Truncate
	recopy    record.RecopyDone
}

// err returns why it can never be loaded, as its headers say; nil for
// most records.
func (it item) err() error {
	if it.detail == nil {
		return nil
	}
	return it.detail.err
}

// classify reads kr's headers once. A valueless record with headers is a
// marker or heartbeat when its headers say so: a re-copy done marker or a
// truncate marker first, since both carry a heartbeat's headers too.
func classify(kr *kgo.Record) item {
	it := item{Record: kr, rows: 1}
	var rows string
	var hasRows, hasMove bool
	for _, h := range kr.Headers { // the first of a key counts, as for headerOf
		switch h.Key {
		case record.HeaderRows:
			if !hasRows {
				rows, hasRows = string(h.Value), true
			}
		case record.HeaderCopying:
			it.copying = true
		case record.HeaderMove:
			if !hasMove {
				it.move, hasMove = string(h.Value) == "1", true
			}
		}
	}
	if hasRows {
		n, err := record.ParseRows(rows)
		if err == nil {
			it.rows = int32(n) // else 1: record.RowsOf
		}
		if kr.Value != nil {
			it.kind = kindRowBatch
			if err != nil {
				it.detail = &detail{err: err}
			}
		}
	}
	if kr.Value != nil || len(kr.Headers) == 0 {
		return it
	}
	get := headerOf(kr)
	var d detail
	var ok bool
	if d.recopy, ok, d.err = record.ParseRecopyDone(get); ok {
		it.kind = kindRecopy
	} else if d.truncate, ok, d.err = record.ParseTruncate(get); ok {
		it.kind = kindTruncate
	} else if d.heartbeat, ok, d.err = record.ParseHeartbeat(get); ok {
		it.kind = kindHeartbeat
	} else {
		return it
	}
	it.detail = &d
	return it
}

// headerOf looks kr's headers up by key, the first of a key, as record's
// header parsers take them.
func headerOf(kr *kgo.Record) func(key string) (string, bool) {
	return func(key string) (string, bool) {
		for _, h := range kr.Headers {
			if h.Key == key {
				return string(h.Value), true
			}
		}
		return "", false
	}
}
