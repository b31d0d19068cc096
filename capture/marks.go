package capture

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/walhouse/walhouse/record"
)

// Marks make a table's load watermark pass a write's consistency token
// within about a mark interval, not a heartbeat interval (query's
// read-your-writes; docs/consistency.md).
//
// A token is PostgreSQL's WAL insert position T read after a commit. A
// read waits until every partition of the table is loaded through T: a
// partition's position is that of the last heartbeat or commit it
// carried, and a quiet partition (one the write's rows did not go to, or
// the write's own, whose commit is before T) would only pass T with the
// next heartbeat. So, while a table changed within markWindow, capture
// places marks: every interval it reads the insert position P (with the
// server's clock), and once the stream has passed P outside a
// transaction, every transaction that committed before P has been
// produced, so a heartbeat at P goes to every partition of the tables
// changed within markWindow before P was read, as a walBeat's does.
//
// Marks are placed every interval while any is pending, not one at a
// time: when decoding lags the WAL by L (other databases' or tables'
// writes flood it), a token's mark is one read within an interval of the
// token, passed about L later. One at a time, the mark placed once the
// write's change was received (L after its commit) is passed only L after
// that again, and every later mark waits for the one before: a lag of a
// few seconds kept token reads waiting past their 10 s (e2e
// TestIntegrationReadYourWrites). The application reads its token right
// after its commit; unless it waited longer than markWindow, a mark at or
// past the token follows. When the stream passes several marks at once,
// one heartbeat at the last goes to the tables of all of them: at most one
// per partition of a recently changed table per interval, whatever the
// load.
type marks struct {
	interval time.Duration        // 0: off
	changed  map[string]time.Time // table → when its last change was received
	pending  []mark               // placed, not passed yet; in position order
	next     time.Time            // the next round's time
	off      error                // why marks stopped (the server cannot say its position)
}

// mark is a placed consistency mark: a walBeat, and when it was placed.
type mark struct {
	walBeat
	placed time.Time
}

// markWindow is how long after a table's last change rounds mark it.
const markWindow = 2 * time.Second

// maxPendingMarks bounds the marks placed and not passed (a lag of
// maxPendingMarks intervals); past it, a round moves the newest instead.
const maxPendingMarks = 64

// touch notes a change of table, received now.
func (m *marks) touch(table string, now time.Time) {
	if m.interval == 0 || m.off != nil {
		return
	}
	if m.changed == nil {
		m.changed = map[string]time.Time{}
	}
	if len(m.changed) == 0 && len(m.pending) == 0 {
		m.next = now.Add(m.interval) // the first round after the change's commit is produced
	}
	m.changed[table] = now
}

// wake is when the run loop must call markRound next; zero when nothing
// is to be marked.
func (m *marks) wake() time.Time {
	if m.interval == 0 || m.off != nil || (len(m.changed) == 0 && len(m.pending) == 0) {
		return time.Time{}
	}
	return m.next
}

// due reports whether a round is due at now, and if so schedules the
// next one and forgets the tables no mark needs any more: those whose
// last change was received more than markWindow before now and before
// every pending mark was placed. It reports whether a new mark is to be
// placed: a table changed within markWindow.
func (m *marks) due(now time.Time) (round, place bool) {
	if w := m.wake(); w.IsZero() || now.Before(w) {
		return false, false
	}
	m.next = now.Add(m.interval)
	oldest := now
	if len(m.pending) > 0 {
		oldest = m.pending[0].placed
	}
	for t, at := range m.changed {
		if now.Sub(at) <= markWindow {
			place = true
		} else if oldest.Sub(at) > markWindow {
			delete(m.changed, t)
		}
	}
	return true, place
}

// place adds a mark at wb, read at now.
func (m *marks) place(wb walBeat, now time.Time) {
	if n := len(m.pending); n > 0 && wb.lsn <= m.pending[n-1].lsn {
		return // the WAL has not moved: the newest mark covers it
	}
	mk := mark{walBeat: wb, placed: now}
	if n := len(m.pending); n == maxPendingMarks {
		mk.placed = m.pending[n-1].placed // its tables too
		m.pending[n-1] = mk
		return
	}
	m.pending = append(m.pending, mk)
}

// passed takes the marks the stream passed at pos and returns the last of
// them and the tables it goes to, sorted: those changed within markWindow
// before the first of them was placed (or after). ok is false when pos
// passed none.
func (m *marks) passed(pos record.LSN) (last walBeat, tables []string, ok bool) {
	n := 0
	for n < len(m.pending) && m.pending[n].lsn <= pos {
		n++
	}
	if n == 0 {
		return walBeat{}, nil, false
	}
	first := m.pending[0].placed
	last = m.pending[n-1].walBeat
	m.pending = slices.Delete(m.pending, 0, n)
	for t, at := range m.changed {
		if first.Sub(at) <= markWindow {
			tables = append(tables, t)
		}
	}
	slices.Sort(tables)
	return last, tables, true
}

// markRound places a mark for the tables changed within markWindow and,
// while marks are placed and not passed, asks the server how far it
// decoded. It never fails capture: a server that cannot give its
// position (a standby) turns marks off, leaving freshness to heartbeats.
func (s *stream) markRound(ctx context.Context, now time.Time) error {
	m := &s.marks
	round, place := m.due(now)
	if !round {
		return nil
	}
	if place {
		var wb walBeat
		var lsn string
		if err := s.cat.conn.QueryRow(ctx, "SELECT clock_timestamp(), pg_current_wal_insert_lsn()::text").Scan(&wb.at, &lsn); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			m.off = err
			m.pending = nil
			s.c.log.Warn("consistency marks are off: the server's WAL position cannot be read (a standby?); token reads wait for heartbeats", "err", err)
			return nil
		}
		var err error
		if wb.lsn, err = record.ParseLSN(lsn); err != nil {
			return fmt.Errorf("read the server's WAL position for a consistency mark: %w", err)
		}
		m.place(wb, now)
	}
	if len(m.pending) == 0 {
		return nil
	}
	return s.sendStatus(ctx, true)
}

// markDue sends the heartbeats of the marks the stream, outside a
// transaction, has passed at pos (see walBeatDue).
func (s *stream) markDue(ctx context.Context, pos record.LSN) error {
	if s.tr.inTx || len(s.marks.pending) == 0 {
		return nil
	}
	wb, tables, ok := s.marks.passed(pos)
	if !ok {
		return nil
	}
	// A table left out meanwhile gets no more heartbeats.
	tables = slices.DeleteFunc(tables, func(t string) bool { return !s.captured(t) })
	if len(tables) == 0 {
		return nil
	}
	s.c.marks.Add(uint64(len(tables)))
	return s.heartbeatTo(ctx, wb.lsn, wb.at, tables)
}
