package sink

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walhouse/walhouse/record"
)

// With Config.Recopies (walhouse sink --recopy-on-gap) a gap in a table's
// topic is repaired without an operator:
//
//  1. The sink writes a record.RecopyRequest for the table to the re-copy
//     topic (before it loads anything after the gap) and loads on: records
//     after the gap are versioned, so loading them is safe. The table's
//     watermark is held (writeMarks) and the gap stays in Gaps and in
//     walhouse_sink_recopies_pending until the request is done, so
//     lastSyncAt never claims the lost changes loaded. The request is
//     durable in Kafka: a sink that starts reads the pending ones first
//     (its committed offset is past the gap by then).
//  2. Capture writes a signed notice into the WAL and, at its position L,
//     copies the table online at version Version(L), as after a rewrite;
//     once the copy is acknowledged it sends a re-copy done marker
//     (record.RecopyDone) to every partition of the topic.
//  3. A sink that reaches the marker of partition p has loaded every copied
//     row of p; it records that in ClickHouse (RecopyBarrier). Once every
//     partition passed, every copied row is loaded and the sink sweeps the
//     table at L with truncate semantics: a row whose latest version is
//     below L was not in PostgreSQL when it was copied (a DELETE among the
//     lost records), and gets a tombstone; copied rows (version L) and
//     changes after L stay. A sweep per partition would not do: it is
//     table-wide, and a key of another partition whose copied row is not
//     loaded yet would read as deleted for a moment. The sweep is a no-op
//     when repeated (every row is at L or newer by then), so two sinks
//     doing it, or a retry, are harmless. Then the request is marked done
//     and the table released.
//
// Capture ends the copy after a DDL rewrite the same way (its done markers
// named by record.RewriteSweepID, for no request), so that rows the
// rewrite moved to other ClickHouse positions leave the old ones: every
// sink with a ClickHouse loader sweeps, with --recopy-on-gap or without.

// Recopier is the re-copy topic as the sink uses it; *kafka.Recopies
// implements it.
type Recopier interface {
	// Request stores req as its table's pending request, durably.
	Request(ctx context.Context, req record.RecopyRequest) error
	// Done marks table's request done, durably.
	Done(ctx context.Context, table string) error
	// ReadNew calls each for every entry written since the last call (req
	// nil: the table's request is done).
	ReadNew(ctx context.Context, each func(table string, req *record.RecopyRequest)) error
}

// RecopyBarrier records which partitions of a table's topic passed the
// re-copy done marker of a request; *clickhouse.Writer implements it.
type RecopyBarrier interface {
	// PassRecopy records that partition passed d, then reports whether
	// every one of d.Partitions partitions has, by any sink.
	PassRecopy(ctx context.Context, d record.RecopyDone, partition int32) (complete bool, err error)
}

// recopyPoll is how often the sink reads the re-copy topic for requests
// other sinks wrote or finished.
const recopyPoll = 5 * time.Second

// recopyID names the request for a gap: the same gap found again (a sink
// that crashed before it committed past the gap) asks again under the same
// name.
func recopyID(g Gap) string {
	return fmt.Sprintf("%s/%d/%d-%d", g.Topic, g.Partition, g.From, g.To)
}

// requestRecopy asks capture to copy g's table again, durably, and holds
// the table as recovering. ok is false when the gap cannot be repaired so
// (a topic whose name does not say its table).
func (s *Sink) requestRecopy(ctx context.Context, g Gap) (ok bool, err error) {
	if g.Table == "" {
		return false, nil
	}
	req := record.RecopyRequest{ID: recopyID(g), Table: g.Table, Topic: g.Topic, Partition: g.Partition, From: g.From, To: g.To, RequestedAt: time.Now().UTC()}
	if err := s.retry(ctx, "ask capture to copy "+g.Table+" again", func() error { return s.cfg.Recopies.Request(ctx, req) }); err != nil {
		return false, fmt.Errorf("write the re-copy request of %s: %w", g.Table, err)
	}
	s.recovering(req)
	s.log.Warn("records lost: asked capture to copy the table again (--recopy-on-gap); loading goes on after the gap, and the table's lastSyncAt stays where it was until the copy is loaded",
		"topic", g.Topic, "partition", g.Partition, "lost_from", g.From, "lost_to", g.To-1, "lost", g.Lost(), "table", g.Table, "recopy", req.ID, "err", g.Error())
	return true, nil
}

// recovering notes a pending request: its table's watermark is held.
func (s *Sink) recovering(req record.RecopyRequest) {
	s.mu.Lock()
	s.recopies[req.Table] = req
	s.mu.Unlock()
	s.m.recopiesPending.WithLabelValues(req.Table).Set(1)
}

// recovered forgets table's request (done by this sink or another) and
// releases its watermark; it reports whether one was pending.
func (s *Sink) recovered(table string) (record.RecopyRequest, bool) {
	s.mu.Lock()
	req, ok := s.recopies[table]
	delete(s.recopies, table)
	s.mu.Unlock()
	if ok {
		s.m.recopiesPending.WithLabelValues(table).Set(0)
	}
	return req, ok
}

// heldLocked reports whether the watermark of src waits for a re-copy;
// s.mu is held.
func (s *Sink) heldLocked(src record.Source) bool {
	_, ok := s.recopies[src.Schema+"."+src.Table]
	return ok
}

// readRecopies applies the re-copy topic's entries written since the last
// read: requests pending (of other sinks, or of this one before a restart)
// and requests done.
func (s *Sink) readRecopies(ctx context.Context) error {
	if s.cfg.Recopies == nil {
		return nil
	}
	// Partitions loading in parallel may each reach a marker.
	s.recopyMu.Lock()
	defer s.recopyMu.Unlock()
	err := s.retry(ctx, "read the re-copy topic", func() error {
		return s.cfg.Recopies.ReadNew(ctx, func(table string, req *record.RecopyRequest) {
			if req != nil {
				s.recovering(*req)
				return
			}
			if old, ok := s.recovered(table); ok {
				s.log.Info("the re-copy of the table is done: its lastSyncAt moves again", "table", table, "recopy", old.ID)
			}
		})
	})
	if err != nil {
		return fmt.Errorf("read the pending re-copy requests: %w", err)
	}
	s.recopyRead = time.Now()
	return nil
}

// maybeReadRecopies reads the re-copy topic again every recopyPoll.
func (s *Sink) maybeReadRecopies(ctx context.Context) error {
	if s.cfg.Recopies == nil {
		return nil
	}
	s.recopyMu.Lock()
	due := time.Since(s.recopyRead) >= recopyPoll
	s.recopyMu.Unlock()
	if !due {
		return nil
	}
	return s.readRecopies(ctx)
}

// checkRecopy reports a re-copy done marker that is not for its topic's
// table.
func (s *Sink) checkRecopy(topic string, d *record.RecopyDone) error {
	src, err := s.topicSource(topic, d.Source)
	if err != nil {
		return fmt.Errorf("re-copy done marker: %w", err)
	}
	d.Source = src
	return nil
}

// errNoSweep is a re-copy done marker that this sink cannot act on.
var errNoSweep = errors.New("the sink cannot sweep after a re-copy")

// passRecopy acts on the re-copy done marker kr of its partition, whose
// earlier records are loaded: it records the partition as passed and, when
// it was the last, sweeps the table at the copy's position and marks the
// request done.
func (s *Sink) passRecopy(ctx context.Context, kr *kgo.Record, d record.RecopyDone) error {
	table := d.Source.Schema + "." + d.Source.Table
	t, canSweep := s.loader.(Truncater)
	if s.cfg.RecopyBarrier == nil || !canSweep {
		// A copy at Version(L) replaced every row it read; only rows
		// deleted in lost records, or moved by a rewrite, stay.
		s.log.Warn("a re-copy done marker, and this sink cannot sweep (no ClickHouse loader): rows deleted in records lost, or moved by a rewrite, may stay", "table", table, "recopy", d.ID, "err", errNoSweep)
		return nil
	}
	var complete bool
	err := s.retry(ctx, "record the re-copy of "+table, func() (err error) {
		complete, err = s.cfg.RecopyBarrier.PassRecopy(ctx, d, kr.Partition)
		return err
	})
	if err != nil {
		return fmt.Errorf("record that %s/%d passed the re-copy %s of %s: %w", kr.Topic, kr.Partition, d.ID, table, err)
	}
	if !complete {
		s.log.Info("re-copy loaded in this partition; waiting for the others", "table", table, "recopy", d.ID, "topic", kr.Topic, "partition", kr.Partition, "partitions", d.Partitions)
		return nil
	}
	req := TruncateRequest{Truncate: record.Truncate{Source: d.Source, LSN: d.LSN, CommitTime: d.At, At: d.At}, Token: "recopy/" + d.ID}
	if err := s.retry(ctx, "sweep "+table+" after its re-copy", func() error { return t.Truncate(ctx, req) }); err != nil {
		return fmt.Errorf("sweep %s at %s after its re-copy %s: %w", table, d.LSN, d.ID, err)
	}
	if record.IsRewriteSweep(d.ID) {
		// Answers no request: nothing to mark done, no watermark held.
		s.log.Info("the copy after a DDL rewrite is loaded in every partition and swept at the rewrite's position: versions the rewrite moved to other positions are gone from the old ones",
			"table", table, "recopy", d.ID, record.LogLSN, d.LSN.String(), "partitions", d.Partitions)
		return nil
	}
	// A request this sink has not read yet may be newer than d's.
	if err := s.readRecopies(ctx); err != nil {
		return err
	}
	s.mu.Lock()
	pending, ok := s.recopies[table]
	s.mu.Unlock()
	if ok && pending.ID != d.ID {
		// A newer gap asked again: that copy releases the table.
		s.log.Info("re-copy loaded and swept; a newer request for the table is pending", "table", table, "recopy", d.ID, "pending", pending.ID)
		return nil
	}
	if s.cfg.Recopies != nil {
		if err := s.retry(ctx, "mark the re-copy of "+table+" done", func() error { return s.cfg.Recopies.Done(ctx, table) }); err != nil {
			return fmt.Errorf("mark the re-copy %s of %s done: %w", d.ID, table, err)
		}
	}
	s.recovered(table)
	s.m.recopiesDone.WithLabelValues(table).Inc()
	s.log.Info("re-copy of the table loaded in every partition and swept at its position: rows deleted in the records lost are gone, and its lastSyncAt moves again",
		"table", table, "recopy", d.ID, record.LogLSN, d.LSN.String(), "partitions", d.Partitions, "requested_at", pending.RequestedAt, "lost", pending.To-pending.From)
	return nil
}

// recoveringGapsLocked returns the gaps being repaired by a re-copy, for
// Gaps; s.mu is held.
func (s *Sink) recoveringGapsLocked() []Gap {
	out := make([]Gap, 0, len(s.recopies))
	for _, r := range s.recopies {
		out = append(out, Gap{Topic: r.Topic, Partition: r.Partition, From: r.From, To: r.To, Table: r.Table, Recopy: r.ID})
	}
	return out
}
