package sink

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walhouse/walhouse/record"
)

// A version is a WAL position, and in ClickHouse a row's largest version
// wins for good (ReplacingMergeTree), as a truncate marker's position
// deletes every row below it. The decoder checks a record against itself
// (version equal to its position, no later than its commit), which says
// nothing about a record forged at a position near 2^64: it would win over
// every later real change of its row, and a marker there would delete
// every row for good. So the sink bounds each streamed record's commit
// position, each marker's and each heartbeat's by what PostgreSQL can have
// written since the newest position the partition showed before (its
// anchor), and dead-letters the rest (reason future_position, counted in
// walhouse_sink_future_positions_total, alert WalhouseSinkFuturePosition).
//
// PostgreSQL writes WAL at most so fast, and a position is written after
// its commit time is taken (a heartbeat's after its clock is read), so a
// real item at time t has a position below the anchor's plus walRate × (t −
// the anchor's time), plus lsnMargin for clock steps and the moment between
// a commit's timestamp and its WAL record. That holds however long capture
// was stopped or a table left out, since the times are PostgreSQL's. A
// forged item can claim a time at most maxClockSkew ahead of the sink's
// clock, and heartbeats reach every partition every 10 s, so a forged
// position lies at most about lsnMargin + walRate × (maxClockSkew + 10 s)
// (2.2 TiB of WAL) above the partition's real stream: it wins only until
// PostgreSQL writes that much WAL, and climbing further takes one forged
// item per step. Copied rows (version 0) never win and are not bounded;
// rows copied again after a rewrite are bounded but move no anchor
// (checkRecordPosition).
//
// Only a heartbeat is refused for a time more than maxClockSkew ahead of
// the sink's clock (it would claim freshness not yet reached). A record's
// or marker's time is only clamped there for the bound: a PostgreSQL clock
// running ahead must not send every change, copied row and TRUNCATE to the
// dead letters (its heartbeats are refused, and alert), and a forged time
// gains nothing beyond the clamp.
//
// A partition's first anchor is the newest position a sink loaded from it
// before (Config.Positions: the watermarks in ClickHouse), read when the
// sink first meets the partition; a partition nothing was loaded from yet
// is bounded by the other partitions of its topic (fromSiblings), and
// when none has an anchor either, from PostgreSQL's epoch.
//
// Limits, in docs/security.md: without Config.Positions, or for a table
// nothing was loaded from, the first item is bounded only by the
// WAL PostgreSQL can have written since its epoch (about 2^61.6); and an
// anchor raised by a forged position with a current time makes a backlog
// of more than lsnMargin written while capture was stopped look forged.

const (
	// walRate bounds how fast PostgreSQL writes WAL, with room: 4 GiB/s,
	// several times what the fastest servers sustain.
	walRate = 4 << 30
	// lsnMargin is the jump allowed beyond walRate: 1 TiB, over four
	// minutes of WAL at walRate.
	lsnMargin = 1 << 40
	// jumpSlack is how far beyond walRate an accepted item may be before it
	// counts as a jump: a real stream pairs each position with the time it
	// was written, so it never needs the margin; a forged item that climbs
	// it does, and each step is counted (walhouse_sink_position_jumps_total).
	jumpSlack = 16 << 30
)

// pgEpoch is PostgreSQL's epoch: no server wrote WAL before it.
var pgEpoch = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// errFuturePosition marks an item refused for a position or time from the
// future.
var errFuturePosition = fmt.Errorf("%w: a position or time from the future", record.ErrInvalid)

// anchor is the newest position a partition showed and its time (not
// after the sink's clock when it was seen).
type anchor struct {
	lsn record.LSN
	at  time.Time
}

// Positions reads the newest position loaded from a partition of a
// table's topic and the time the partition is loaded through (the
// Watermark the sink recorded last; zero LSN: none). The sink reads it
// once per partition, the first time it meets one, to start bounding
// positions from there (sink/future.go). *clickhouse.Writer implements it.
type Positions interface {
	LoadedPosition(ctx context.Context, src record.Source, partition int32) (record.LSN, time.Time, error)
}

// anchors holds each partition's anchor; partitions load in parallel.
type anchors struct {
	mu sync.Mutex
	m  map[tp]anchor
}

// has reports whether k has an anchor, or was looked up in Positions.
func (as *anchors) has(k tp) bool {
	as.mu.Lock()
	defer as.mu.Unlock()
	_, ok := as.m[k]
	return ok
}

// seed gives k the anchor a unless it has one.
func (as *anchors) seed(k tp, a anchor) {
	as.mu.Lock()
	defer as.mu.Unlock()
	if as.m == nil {
		as.m = map[tp]anchor{}
	}
	if _, ok := as.m[k]; !ok {
		as.m[k] = a
	}
}

// seedAnchor gives partition k of src's topic its first anchor from
// Config.Positions, the first time the sink meets it. Reading is retried
// as loads are: it fails only when ctx ends.
func (s *Sink) seedAnchor(ctx context.Context, k tp, src record.Source) error {
	if s.cfg.Positions == nil || s.anchors.has(k) {
		return nil
	}
	var a anchor
	err := s.retry(ctx, "read the loaded position of "+src.Schema+"."+src.Table, func() error {
		var err error
		a.lsn, a.at, err = s.cfg.Positions.LoadedPosition(ctx, src, k.partition)
		return err
	})
	if err != nil {
		return err
	}
	s.anchors.seed(k, a) // a zero anchor too: looked up, nothing loaded yet
	return nil
}

// reach returns the largest WAL position an item can have at time at,
// given the anchor a (the zero anchor: none yet).
func reach(a anchor, at time.Time) record.LSN {
	from := a.at
	if a.lsn == 0 || a.at.Before(pgEpoch) { // none, or a loaded position without its time
		from = pgEpoch
	}
	d := at.Sub(from)
	if d < 0 {
		d = 0
	}
	// In whole seconds, rounded up: walRate × nanoseconds overflows.
	secs := uint64((d + time.Second - 1) / time.Second)
	room := ^uint64(0) - uint64(a.lsn) - lsnMargin
	if secs > room/walRate {
		return record.LSN(^uint64(0)) // nothing is beyond reach
	}
	return a.lsn + lsnMargin + record.LSN(secs*walRate)
}

// checkTime reports a heartbeat that claims a time more than maxClockSkew
// after the sink's clock: beyond clock skew, it was forged or its clock is
// off, and it would claim freshness not yet reached.
func checkTime(what string, at, now time.Time) error {
	if at.After(now.Add(maxClockSkew)) {
		return fmt.Errorf("%w: %s claims %s, more than %v after the sink's clock", errFuturePosition, what, at.Format(time.RFC3339), maxClockSkew)
	}
	return nil
}

// checkPosition reports an item of partition k (what: "record",
// "heartbeat", "truncate marker") at WAL position lsn and time at that
// PostgreSQL cannot have written yet (see above), and counts it; an item
// that passes raises the partition's anchor if move.
func (s *Sink) checkPosition(ctx context.Context, k tp, src record.Source, what string, lsn record.LSN, at time.Time, move bool) error {
	if err := s.seedAnchor(ctx, k, src); err != nil {
		return err
	}
	now := time.Now()
	var err error
	if what == "heartbeat" {
		err = checkTime(what, at, now)
	} else if limit := now.Add(maxClockSkew); at.After(limit) {
		at = limit // see above: clamped, not refused
	}
	if err == nil {
		var jumped bool
		jumped, err = s.anchors.raise(k, what, lsn, at, now, move)
		if jumped {
			s.m.jumps.WithLabelValues(k.topic, what).Inc()
			s.log.Warn("a WAL position ahead of what PostgreSQL writes since the partition's last one: accepted within the margin, but a real stream never needs it; if this repeats, someone may be producing to the topic (docs/operations.md#positions-from-the-future)",
				"topic", k.topic, "partition", k.partition, "kind", what, "position", lsn.String())
		}
	}
	if errors.Is(err, errFuturePosition) {
		s.m.future.WithLabelValues(k.topic, what).Inc()
	}
	return err
}

// checkRecordPosition checks the commit position (and version) of record
// r, which kr carried, when its version can win over others. A copied row
// at version 0 never does: it is not checked. One copied after a rewrite
// (at the rewrite's position, record.RewriteCopyVersion) is checked, but
// moves no anchor: its time is when capture planned the copy, maybe long
// after the rewrite's position was written (capture catching up), and an
// anchor at that position with that time would make the real changes
// after it, up to the time, look forged beyond lsnMargin.
func (s *Sink) checkRecordPosition(ctx context.Context, kr *kgo.Record, r *record.Record) error {
	if r.Version == record.SnapshotVersion {
		return nil
	}
	return s.checkPosition(ctx, tp{kr.Topic, kr.Partition}, r.Source, "record", max(r.CommitLSN, record.LSN(r.Version)), r.OccurredAt, r.Op != record.Read)
}

// raise checks lsn at time at against k's anchor and, if move, moves the
// anchor to it when it is newer. jumped reports an accepted item beyond
// walRate and jumpSlack from k's anchor: one that needed lsnMargin.
func (as *anchors) raise(k tp, what string, lsn record.LSN, at, now time.Time, move bool) (jumped bool, err error) {
	as.mu.Lock()
	defer as.mu.Unlock()
	a := as.m[k]
	limit := reach(a, at)
	if a.lsn == 0 {
		limit = as.fromSiblings(k, at, limit)
	}
	if lsn > limit {
		return false, fmt.Errorf("%w: %s at WAL position %s, beyond %s, the most PostgreSQL can have written by %s since position %s (walhouse assumes at most %d GiB/s and allows %d GiB more); a record written by capture never is",
			errFuturePosition, what, lsn, limit, at.Format(time.RFC3339), a.lsn, walRate>>30, lsnMargin>>30)
	}
	// limit is the anchor's reach at walRate plus lsnMargin (unless the
	// reach overflowed, or the anchor has no time: then nothing is a jump).
	if a.lsn > 0 && !a.at.Before(pgEpoch) && limit != record.LSN(^uint64(0)) && lsn > limit-lsnMargin+jumpSlack {
		jumped = true
	}
	if move && lsn > a.lsn {
		if as.m == nil {
			as.m = map[tp]anchor{}
		}
		as.m[k] = anchor{lsn: lsn, at: earlier(at, now)}
	}
	return jumped, nil
}

// fromSiblings returns the bound at time at for partition k, which has
// no anchor yet (a partition added to the topic, or nothing loaded from it
// yet): the loosest of the reaches of the other partitions of its topic
// that have one, when that is below limit (PostgreSQL's epoch's). One
// topic is one table of one capture, and WAL positions are the server's,
// not a partition's: what bounds a real item of one partition bounds those
// of the others, so a forged first item of a new partition gets no more
// room than the topic's loosest partition. The loosest, not the tightest:
// one partition's anchor moved by a forged item must not bound the others.
func (as *anchors) fromSiblings(k tp, at time.Time, limit record.LSN) record.LSN {
	var best record.LSN
	for q, a := range as.m {
		if q.topic == k.topic && q != k && a.lsn > 0 {
			best = max(best, reach(a, at))
		}
	}
	if best > 0 && best < limit {
		return best
	}
	return limit
}

// earlier returns the earlier of two times.
func earlier(a, b time.Time) time.Time {
	if a.After(b) {
		return b
	}
	return a
}
