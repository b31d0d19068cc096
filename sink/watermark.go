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
		s.parts[k.topic] = p.partitions
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
	s.partitionCounts(ctx, marks)
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

// partitionCounts gives the marks no heartbeat gave a partition count the
// count of their topic: the one a heartbeat said before, else Kafka's
// (Config.Admin, asked once per topic). Without a count, a reader cannot
// tell every partition reported, so the first batches of a table new to
// the pipeline, which hold changes but not yet the heartbeat of capture's
// first consistency mark, would leave its freshness unknown for another
// batch (a token read of a new table waited a fetch longer). Kafka's count
// is never below capture's (partitions are only ever added, and capture
// reads the topic's count), so a reader never takes a partition that has
// not reported for one that does not exist; a heartbeat's count replaces
// it. Without Config.Admin, or when Kafka does not answer, the marks keep
// no count (the writer then keeps the table's recorded one).
func (s *Sink) partitionCounts(ctx context.Context, marks []Watermark) {
	asked := map[string]bool{} // once per topic and flush, answered or not
	for i, w := range marks {
		if w.Partitions > 0 {
			continue
		}
		s.mu.Lock()
		topic := s.topicOf[w.Source]
		n := s.parts[topic]
		s.mu.Unlock()
		if n == 0 && s.cfg.Admin != nil && topic != "" && !asked[topic] {
			asked[topic] = true
			n = s.kafkaPartitions(ctx, topic)
		}
		marks[i].Partitions = n
	}
}

// kafkaPartitionsWithin bounds the wait for Kafka's partition count of a
// topic: a mark without it is still true, only less useful.
const kafkaPartitionsWithin = 2 * time.Second

// kafkaPartitions asks Kafka how many partitions topic has, and remembers
// it; 0 when Kafka does not say.
func (s *Sink) kafkaPartitions(ctx context.Context, topic string) int32 {
	ctx, cancel := context.WithTimeout(ctx, kafkaPartitionsWithin)
	defer cancel()
	listed, err := s.cfg.Admin.ListStartOffsets(ctx, topic)
	if err == nil {
		err = listed.Error()
	}
	if err != nil {
		s.log.Debug("the partition count of a topic is not known yet; its freshness waits for capture's next heartbeat", "topic", topic, "err", err)
		return 0
	}
	n := int32(len(listed[topic]))
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.parts[topic] == 0 { // a heartbeat's count wins
		s.parts[topic] = n
	}
	return s.parts[topic]
}
