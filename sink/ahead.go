package sink

import (
	"errors"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walhouse/walhouse/record"
)

// A flush decodes each chunk in a goroutine of its own while the chunk
// before it is being inserted, so that decoding, a third of the sink's
// CPU, overlaps the wait for ClickHouse. Decoding has no effects: dead
// letters, Layer 2, inserts, truncates, watermarks and commits all stay in
// order on Run's goroutine, so what is loaded, under which token, and when
// offsets are committed is exactly as without it. At most two chunks are
// decoded at a time (the one loading and the next), each with its own
// Decoder, and a chunk larger than aheadMaxBytes is decoded in order, so
// that large values are not held decoded twice over.

// aheadMaxBytes is the largest chunk (its records' values) decoded ahead.
const aheadMaxBytes = 16 << 20

// decodedChunk is a chunk's records decoded ahead of its load.
type decodedChunk struct {
	done chan struct{}   // closed when recs is complete
	recs []decodedRecord // by position in the chunk
}

// decodedRecord is one Kafka record's decoding.
type decodedRecord struct {
	ok   bool // decoded; records without a value (heartbeats, truncate markers) are not
	rows []*record.Record
	err  error
}

// decodeAhead starts decoding chunk with dec, which nothing else may use
// until the result's done is closed.
func (s *Sink) decodeAhead(chunk []*kgo.Record, dec *record.Decoder) *decodedChunk {
	d := &decodedChunk{done: make(chan struct{}), recs: make([]decodedRecord, len(chunk))}
	size := 0
	for _, kr := range chunk {
		size += len(kr.Value)
	}
	if size > aheadMaxBytes {
		close(d.done)
		return d
	}
	schemas := s.schemas()
	go func() {
		defer close(d.done)
		singles := make([]*record.Record, len(chunk)) // one allocation for the single records' rows
		for i, kr := range chunk {
			if kr.Value == nil {
				continue
			}
			r := &d.recs[i]
			r.ok = true
			if isBatch(kr) {
				r.rows, r.err = dec.DecodeBatch(kr.Value, schemas)
				continue
			}
			singles[i], r.err = dec.Decode(kr.Value, schemas)
			r.rows = singles[i : i+1 : i+1]
		}
	}()
	return d
}

// wait returns the decoded records once they are all there.
func (d *decodedChunk) wait() []decodedRecord {
	<-d.done
	return d.recs
}

// usable reports whether d can stand for decoding its record in order:
// it was decoded, and not with a schema unknown yet (decodeWith then reads
// the registry, which only Run's goroutine does).
func (d decodedRecord) usable() bool {
	return d.ok && !errors.Is(d.err, record.ErrUnknownSchema)
}
