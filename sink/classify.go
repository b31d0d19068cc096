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

// item is a Kafka record with what the sink read of its headers. Exactly
// one of heartbeat, truncate and recopy is set for a record of that kind
// (with what could be parsed when err is set), none for the others.
type item struct {
	*kgo.Record
	kind kind
	// rows is what the record weighs when batches are cut: the count of
	// its record.HeaderRows when it has a well-formed one (record.RowsOf),
	// else 1.
	rows int
	// copying marks a change captured while its table's copy ran
	// (record.HeaderCopying): it proves nothing for the watermark.
	copying bool
	// move marks the delete half of a row's move (record.HeaderMove): the
	// row at its new position follows it.
	move bool
	// err is why the record can never be loaded, found in its headers (a
	// malformed marker, heartbeat or rows count); it goes to the dead
	// letters with it.
	err       error
	heartbeat *record.Heartbeat
	truncate  *record.Truncate
	recopy    *record.RecopyDone
}

// classify reads kr's headers once. A valueless record with headers is a
// marker or heartbeat when its headers say so: a re-copy done marker or a
// truncate marker first, since both carry a heartbeat's headers too.
func classify(kr *kgo.Record) item {
	it := item{Record: kr, rows: 1}
	var rows string
	var batch, move bool
	for _, h := range kr.Headers { // the first of a key counts, as for headerOf
		switch h.Key {
		case record.HeaderRows:
			if !batch {
				rows, batch = string(h.Value), true
			}
		case record.HeaderCopying:
			it.copying = true
		case record.HeaderMove:
			if !move {
				it.move, move = string(h.Value) == "1", true
			}
		}
	}
	if batch {
		n, err := record.ParseRows(rows)
		if err == nil {
			it.rows = n // else 1: record.RowsOf
		}
		if kr.Value != nil {
			it.kind, it.err = kindRowBatch, err
		}
	}
	if kr.Value != nil || len(kr.Headers) == 0 {
		return it
	}
	get := headerOf(kr)
	if d, ok, err := record.ParseRecopyDone(get); ok {
		it.kind, it.recopy, it.err = kindRecopy, &d, err
	} else if tr, ok, err := record.ParseTruncate(get); ok {
		it.kind, it.truncate, it.err = kindTruncate, &tr, err
	} else if h, ok, err := record.ParseHeartbeat(get); ok {
		it.kind, it.heartbeat, it.err = kindHeartbeat, &h, err
	}
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
