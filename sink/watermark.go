package sink

import (
	"context"
	"time"

	"github.com/walhouse/walhouse/record"
)

// Watermarker records how far each partition of each table is loaded; the
// query API reads it to report lastSyncAt. *clickhouse.Writer implements it.
type Watermarker interface {
	MarkLoaded(ctx context.Context, marks []Watermark) error
}

// Watermark says that every change of Source committed at or before
// Through that routes to Partition is loaded (or set aside in the
// dead-letter topic).
//
// Only two things prove a partition loaded through a time: a heartbeat
// (capture sends it to every partition once everything committed before
// it, copied rows included, is in that partition) and a streamed change
// (its commit time, less commitMargin). A copied row proves nothing: a copy
// is an image of the table at its start, complete only once all of it is
// loaded, and its rows arrive over many batches. Nor does a change captured
// while its table's copy runs (record.HeaderCopying): copied rows of its
// partition may follow it. Partitions is the topic's partition count, as
// the last heartbeat said (0 when none said yet), so that a reader can tell
// a partition that has not reported from one that does not exist.
type Watermark struct {
	Source     record.Source
	Partition  int32
	Through    time.Time
	LSN        record.LSN
	Partitions int32
}

// provesLoaded reports whether loading r, which it carried, proves its
// partition loaded through r's commit time (see Watermark).
func provesLoaded(it item, r *record.Record) bool {
	return r.Op != record.Read && !it.copying
}

// commitMargin is taken off a record's commit time before it counts as a
// watermark: a transaction takes its commit timestamp a moment before its
// commit record reaches the WAL, so one that committed slightly earlier may
// still follow in the stream.
const commitMargin = time.Second

// advance raises the pending watermark of a partition to what a chunk
// proved.
func (s *Sink) advance(k tp, src record.Source, p progress) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w, ok := s.marks[k]
	if !ok {
		w = Watermark{Source: src, Partition: k.partition}
	}
	if p.through.After(w.Through) {
		w.Through = p.through
	}
	w.LSN = max(w.LSN, p.lsn)
	if p.partitions > 0 {
		w.Partitions = p.partitions
	}
	s.marks[k] = w
}

// writeMarks hands the pending watermarks to the Watermarker. It runs after
// the offsets are committed; a failure only delays freshness, so it is
// logged and retried with the next batch.
func (s *Sink) writeMarks(ctx context.Context) {
	if s.cfg.Watermarks == nil {
		return
	}
	s.mu.Lock()
	marks := make([]Watermark, 0, len(s.marks))
	for _, w := range s.marks {
		// A table being copied again after a gap keeps its marks here
		// until the copy is loaded (recopy.go): they are true then.
		if !s.heldLocked(w.Source) {
			marks = append(marks, w)
		}
	}
	s.mu.Unlock()
	if len(marks) == 0 {
		return
	}
	if err := s.cfg.Watermarks.MarkLoaded(ctx, marks); err != nil {
		s.log.Warn("record load watermarks failed; retrying with the next batch", "err", err)
		return
	}
	s.mu.Lock()
	for _, w := range marks {
		k := tp{s.topicOf[w.Source], w.Partition}
		if cur, ok := s.marks[k]; ok && !cur.Through.After(w.Through) && cur.LSN <= w.LSN {
			delete(s.marks, k)
		}
	}
	s.mu.Unlock()
}
