package verify

import (
	"context"
	"reflect"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// recheck reads each suspect again, twice, each time in a new snapshot
// once the table is loaded past it, and reports those that differ exactly
// alike both times: the same PostgreSQL row, the same latest ClickHouse
// version (a tombstone included) with the same values. A snapshot's WAL
// position and what it sees are not the same order (a transaction is
// durable, and so may be loaded, a moment before a new snapshot sees it;
// a long transaction's changes precede positions it commits after), so one
// difference may be such a transaction; by the next check it is visible,
// and the row no longer differs the same way. The scan's FINAL hides
// tombstones, which is why its own reading is not one of the two.
func (v *Verifier) recheck(ctx context.Context, t *table, suspects []suspect, res *TableResult) error {
	first := make([]suspect, 0, len(suspects))
	err := v.inSnapshot(ctx, t, func(snap *snapshot) error {
		pgs, chs, err := v.lookup(ctx, t, snap, keysOf(suspects))
		if err != nil {
			return err
		}
		for i, s := range suspects {
			p, c := pgs[i], chs[i]
			if same(p, c) || c != nil && c.version > uint64(snap.lsn) {
				res.ChangedSince++ // it agrees now, or changed since: a change was on its way
				continue
			}
			first = append(first, suspect{keys: s.keys, pg: p, ch: c})
		}
		return nil
	})
	if err != nil || len(first) == 0 {
		return err
	}
	return v.inSnapshot(ctx, t, func(snap *snapshot) error {
		pgs, chs, err := v.lookup(ctx, t, snap, keysOf(first))
		if err != nil {
			return err
		}
		for i, s := range first {
			p, c := pgs[i], chs[i]
			if same(p, c) || !sameRow(s.pg, p) || !sameCH(s.ch, c) || c != nil && c.version > uint64(snap.lsn) {
				res.ChangedSince++
				continue
			}
			res.Mismatches = append(res.Mismatches, t.mismatch(s.keys, p, c))
		}
		return nil
	})
}

// keysOf lists the suspects' keys.
func keysOf(ss []suspect) [][]string {
	out := make([][]string, len(ss))
	for i, s := range ss {
		out[i] = s.keys
	}
	return out
}

// inSnapshot runs f in a new snapshot once the table is loaded past it.
func (v *Verifier) inSnapshot(ctx context.Context, t *table, f func(*snapshot) error) error {
	snap, err := v.open(ctx)
	if err != nil {
		return err
	}
	defer snap.close(context.Background())
	if err := v.waitLoaded(ctx, t.chName, snap.lsn); err != nil {
		return err
	}
	return f(snap)
}

// lookupBatch is how many keys one lookup query reads.
const lookupBatch = 200

// lookup reads keys on both sides, with readable values, a batch of keys
// per query; pg[i] and ch[i] are keys[i]'s rows (nil: none). ClickHouse's
// is what FINAL shows of the key: its live row, or, where FINAL shows
// several (a layout that sorts or partitions by a column the key does not
// hold keeps each position's latest version: a row moved without the
// delete of its old position), one that differs from PostgreSQL's, the
// oldest. Where FINAL shows none, it is the key's latest version, a
// tombstone included, or none.
func (v *Verifier) lookup(ctx context.Context, t *table, snap *snapshot, keys [][]string) (pg, ch []*row, err error) {
	pg, ch = make([]*row, len(keys)), make([]*row, len(keys))
	for from := 0; from < len(keys); from += lookupBatch {
		batch := keys[from:min(from+lookupBatch, len(keys))]
		pw, pargs, cw, params := t.keysWhere(batch)
		ps, err := t.pgRows(ctx, snap.tx.Conn().PgConn(), pw, pargs, 0, true, nil)
		if err != nil {
			return nil, nil, err
		}
		cs, err := v.chRows(ctx, t, cw, params, 0, true, true, len(batch))
		if err != nil {
			return nil, nil, err
		}
		at := make(map[string]int, len(batch))
		for i, k := range batch {
			at[keyOf(k)] = from + i
		}
		for i := range ps {
			if j, ok := at[keyOf(ps[i].keys)]; ok {
				pg[j] = &ps[i]
			}
		}
		for i := range cs {
			if j, ok := at[keyOf(cs[i].keys)]; ok && ch[j] == nil { // the newest version comes first
				ch[j] = &cs[i]
			}
		}
		live, err := v.chRows(ctx, t, cw, params, 0, true, false, len(batch))
		if err != nil {
			return nil, nil, err
		}
		shown := make([]*row, len(batch)) // what FINAL shows of each key of the batch
		for i := range live {
			r := &live[i]
			j, ok := at[keyOf(r.keys)]
			if !ok || r.deleted {
				continue
			}
			switch s := shown[j-from]; {
			case s == nil:
				shown[j-from] = r
			case same(pg[j], s) && !same(pg[j], r):
				shown[j-from] = r
			case same(pg[j], s) == same(pg[j], r) && (r.version < s.version || r.version == s.version && r.hash < s.hash):
				shown[j-from] = r // the same choice in every read
			}
		}
		for i, r := range shown {
			if r != nil {
				ch[from+i] = r
			}
		}
	}
	return pg, ch, nil
}

// sameRow reports whether two reads of a PostgreSQL row agree.
func sameRow(a, b *row) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.hash == b.hash
}

// sameCH reports whether two reads of a ClickHouse row are the same
// version with the same values.
func sameCH(a, b *row) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.version == b.version && a.deleted == b.deleted && a.hash == b.hash
}

// mismatch describes a confirmed difference.
func (t *table) mismatch(keys []string, p, c *row) Mismatch {
	m := Mismatch{keys: keys}
	kc := t.keyColumns()
	for i, col := range kc {
		if i == 0 && !t.synthetic {
			m.Tenant = keys[0]
			continue
		}
		text, _ := col.typ.LookupText(keys[i]) // a float's readable text, not its bits
		m.Key = append(m.Key, KeyValue{Column: col.pg, Value: text})
	}
	if c != nil {
		m.Version = c.version
	}
	switch {
	case p != nil && c == nil:
		m.Kind = MissingInClickHouse
	case p != nil && c.deleted:
		m.Kind = DeletedInClickHouse
	case p == nil:
		m.Kind = OnlyInClickHouse
	default:
		m.Kind = ValuesDiffer
		for i, col := range t.cols {
			if p.cells[i] != c.cells[i] {
				d := ColumnDiff{Column: col.pg}
				if p.display != nil && c.display != nil { // rows read for a report
					d.PostgreSQL, d.ClickHouse = p.display[len(kc)+i], c.display[len(kc)+i]
				}
				m.Columns = append(m.Columns, d)
			}
		}
	}
	return m
}

// newScan returns a pointer the ClickHouse client scans a column into.
func newScan(ct driver.ColumnType) any { return reflect.New(ct.ScanType()).Interface() }

// pacer keeps the PostgreSQL rows read per second under a limit.
type pacer struct {
	limit int
	start time.Time
}

func newPacer(limit int) *pacer { return &pacer{limit: limit, start: time.Now()} }

// wait sleeps until rows read since the start are within the limit.
func (p *pacer) wait(ctx context.Context, rows int64) error {
	if p.limit <= 0 {
		return nil
	}
	due := p.start.Add(time.Duration(float64(rows) / float64(p.limit) * float64(time.Second)))
	d := time.Until(due)
	if d <= 0 {
		return nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return nil
	}
}
