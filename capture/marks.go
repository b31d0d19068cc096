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
// next heartbeat. So, for a while after a table's change is received,
// capture places marks: it reads the insert position P (with the server's
// clock), and once the stream has passed P outside a transaction, every
// transaction that committed before P has been produced, so a heartbeat
// at P goes to every partition of those tables, as a walBeat's does. A
// round's P is read after the change was received; the token was read
// right after the commit: so, unless the application waited longer than
// markWindow between its COMMIT and reading its token, a mark at or past
// the token follows. Marks are at most one per partition of a recently
// changed table per interval, whatever the load.
type marks struct {
	interval time.Duration        // 0: off
	changed  map[string]time.Time // table → when its last change was received
	pending  *walBeat             // placed, not passed yet
	tables   []string             // the pending mark's
	next     time.Time            // the next round's time
	off      error                // why marks stopped (the server cannot say its position)
}

// markWindow is how long after a table's last change rounds mark it.
const markWindow = 2 * time.Second

// touch notes a change of table, received now.
func (m *marks) touch(table string, now time.Time) {
	if m.interval == 0 || m.off != nil {
		return
	}
	if m.changed == nil {
		m.changed = map[string]time.Time{}
	}
	if len(m.changed) == 0 && m.pending == nil {
		m.next = now.Add(m.interval) // the first round after the change's commit is produced
	}
	m.changed[table] = now
}

// wake is when the run loop must call markRound next; zero when nothing
// is to be marked.
func (m *marks) wake() time.Time {
	if m.interval == 0 || m.off != nil || (len(m.changed) == 0 && m.pending == nil) {
		return time.Time{}
	}
	return m.next
}

// markRound places a mark for the tables changed within markWindow, or,
// while one is placed and not passed, asks the server again how far it
// decoded. It never fails capture: a server that cannot give its
// position (a standby) turns marks off, leaving freshness to heartbeats.
func (s *stream) markRound(ctx context.Context, now time.Time) error {
	m := &s.marks
	if w := m.wake(); w.IsZero() || now.Before(w) {
		return nil
	}
	m.next = now.Add(m.interval)
	if m.pending != nil {
		return s.sendStatus(ctx, true)
	}
	m.tables = m.tables[:0]
	for t, at := range m.changed {
		if now.Sub(at) > markWindow {
			delete(m.changed, t)
			continue
		}
		m.tables = append(m.tables, t)
	}
	if len(m.tables) == 0 {
		return nil
	}
	slices.Sort(m.tables)
	var wb walBeat
	var lsn string
	if err := s.cat.conn.QueryRow(ctx, "SELECT clock_timestamp(), pg_current_wal_insert_lsn()::text").Scan(&wb.at, &lsn); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		m.off = err
		s.c.log.Warn("consistency marks are off: the server's WAL position cannot be read (a standby?); token reads wait for heartbeats", "err", err)
		return nil
	}
	var err error
	if wb.lsn, err = record.ParseLSN(lsn); err != nil {
		return fmt.Errorf("read the server's WAL position for a consistency mark: %w", err)
	}
	m.pending = &wb
	return s.sendStatus(ctx, true)
}

// markDue sends the pending mark once the stream, outside a transaction,
// has reached pos (see walBeatDue).
func (s *stream) markDue(ctx context.Context, pos record.LSN) error {
	m := &s.marks
	wb := m.pending
	if wb == nil || s.tr.inTx || pos < wb.lsn {
		return nil
	}
	m.pending = nil
	// A table left out meanwhile gets no more heartbeats.
	tables := slices.DeleteFunc(m.tables, func(t string) bool { return !s.captured(t) })
	s.c.marks.Add(uint64(len(tables)))
	return s.heartbeatTo(ctx, wb.lsn, wb.at, tables)
}
