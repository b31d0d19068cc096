package capture

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/walhouse/walhouse/internal/failpoint"
	"github.com/walhouse/walhouse/record"
)

// Online snapshots copy a table while the stream runs: a table added to the
// publication while capture streams, and, after a restart, a snapshot that
// was unfinished or never taken. Other tables keep streaming meanwhile.
//
// Why reading next to the stream is correct: every snapshot row has
// record.SnapshotVersion (0) and every streamed change a version above it,
// so ClickHouse keeps, for each row, its newest streamed change if it has
// one and the snapshot row otherwise. All changes committed after the table
// joined the stream are in the stream, so a row with no streamed change has
// not changed since, and any snapshot taken after that point shows it as it
// is. The order of snapshot rows and changes in Kafka does not matter for
// the result, with one exception, which onlineSnapshots handles: an update
// that leaves a TOASTed value unchanged carries no value for it (pgoutput's
// 'u'), and the sink takes it from the row's previous version, which may not
// have been loaded yet. While a table's copy runs, capture fills such values
// from the source row itself (see stream.fillFromSource). That value can be
// newer than the update, never older; if it is newer, a later change that
// set it is in the stream, so the end result is the same. The same holds,
// and capture does the same, for an update that changed the row's
// ClickHouse key: its previous version is under the old key, in another
// partition or already merged with the move's delete.
//
// A table's load watermark, hence the query API's lastSyncAt, must not claim
// completeness before its copy is in ClickHouse. So while a table's copy
// runs, heartbeats skip it and its streamed changes carry
// record.HeaderCopying, which the sink does not count towards the
// watermark (nor does it count copied rows). The first heartbeat after the
// copy follows every copied row in its partition (copy() returns once they
// are acknowledged), and proves the partition complete.

// onlineSnapshots queues and runs online snapshots, one table at a time,
// each with the configured number of workers.
type onlineSnapshots struct {
	c        *Capturer
	sourceID string

	mu      sync.Mutex
	active  map[string]bool // tables whose copy is not yet acknowledged in full
	queue   []onlineJob
	err     error
	running *runningCopy                           // the copy in progress, if any
	refused map[string]error                       // tables whose copy found them uncapturable, for the stream to leave out
	copyFn  func(context.Context, onlineJob) error // o.copy; tests replace it
	// writersTurn bounds one turn of a rewrite copy's wait for writers
	// (writersOpenError); tests shorten it.
	writersTurn time.Duration
	wake        chan struct{}
	done        chan struct{} // closed when run returns
}

// runningCopy is the copy in progress, which restart can interrupt.
type runningCopy struct {
	table   string
	cancel  context.CancelFunc
	stopped chan struct{} // closed once it returned, its rows acknowledged
	again   bool          // restart asked for a new copy
	dropped bool          // drop asked it to stop for good
	next    *onlineJob    // a rewrite asked for this copy instead (rewrite.go)
	// superseded: a rewrite stopped it and queues its own copy
	// (rewrite.go); the table still counts as being copied.
	superseded bool
}

// onlineJob is one table to copy: planned already (at start) or to plan
// when its turn comes (found while streaming).
type onlineJob struct {
	table string
	cp    record.LSN
	plan  *snapshotPlan
	// rewrite makes the copy's rows carry the version of cp, the
	// position of a DDL that rewrote the table (rewrite.go).
	rewrite bool
	// recopy is the re-copy request a rewrite's copy answers (recopy.go).
	recopy string
	// waitWriters makes a rewrite's copy wait for the transactions that
	// write to the table first (waitForWriters).
	waitWriters bool
	// writers, once listed, are the transactions a rewrite's copy still
	// waits for after an earlier turn (writersOpenError).
	writers []string
}

func newOnlineSnapshots(c *Capturer, sourceID string) *onlineSnapshots {
	o := &onlineSnapshots{c: c, sourceID: sourceID, active: map[string]bool{}, refused: map[string]error{}, wake: make(chan struct{}, 1), done: make(chan struct{}), writersTurn: writersTurn}
	o.copyFn = o.copy
	return o
}

// add queues a table. With a nil plan the table is new to the stream and
// gets a new plan; cp is the stream position it was found at, recorded in
// its snapshot records. The table counts as being copied from now on.
func (o *onlineSnapshots) add(table string, cp record.LSN, plan *snapshotPlan) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.active[table] {
		return
	}
	o.active[table] = true
	o.queue = append(o.queue, onlineJob{table: table, cp: cp, plan: plan})
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

// copying reports whether the table's copy is still running (false for a
// stream without online snapshots).
func (o *onlineSnapshots) copying(table string) bool {
	if o == nil {
		return false
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.active[table]
}

// failure returns the error that stopped the online snapshots, if any.
func (o *onlineSnapshots) failure() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.err
}

// run copies queued tables until ctx is done or a copy fails.
func (o *onlineSnapshots) run(ctx context.Context) {
	defer close(o.done)
	for {
		o.mu.Lock()
		var job onlineJob
		ok := len(o.queue) > 0
		if ok {
			job, o.queue = o.queue[0], o.queue[1:]
		}
		o.mu.Unlock()
		if !ok {
			select {
			case <-o.wake:
				continue
			case <-ctx.Done():
				return
			}
		}
		jctx, cancel := context.WithCancel(ctx)
		rc := &runningCopy{table: job.table, cancel: cancel, stopped: make(chan struct{})}
		o.mu.Lock()
		o.running = rc
		o.mu.Unlock()
		err := o.copyFn(jctx, job)
		cancel()
		o.mu.Lock()
		o.running = nil
		stop := false
		var open *writersOpenError
		switch {
		case rc.dropped:
			delete(o.active, job.table)
		case rc.superseded:
		case rc.next != nil:
			// A rewrite's copy replaces this one, first: see rewrite.
			o.queue = append([]onlineJob{*rc.next}, o.queue...)
		case rc.again:
			// Copy the table anew, first: see restart.
			o.queue = append([]onlineJob{{table: job.table, cp: job.cp, rewrite: job.rewrite, recopy: job.recopy, waitWriters: job.waitWriters}}, o.queue...)

		case err != nil && ctx.Err() == nil && errors.As(err, &open):
			// Writers it waits for are still open: the other copies go
			// first, and it waits for the same writers at its next turn.
			o.c.log.Warn("the copy after a rewrite waits for transactions that write to the table to end; the other copies go first", "table", job.table, "transactions", len(open.remaining), "err", err)
			job.writers = open.remaining
			o.queue = append(o.queue, job)
		case err != nil && ctx.Err() == nil && errors.Is(err, errUncapturable):
			// What a user wrote since the table joined (its key
			// dropped, say): the stream leaves it out (takeRefused).
			delete(o.active, job.table)
			o.refused[job.table] = err
		case err != nil && ctx.Err() == nil && pgCode(err) == pgUndefinedColumn:
			// A column renamed or dropped under the copy: copy the
			// table anew, as it is now, after the others.
			o.c.log.Warn("a column of the table changed while it was being copied: copying it again", "table", job.table, "err", err)
			o.queue = append(o.queue, onlineJob{table: job.table, cp: job.cp, rewrite: job.rewrite, recopy: job.recopy, waitWriters: job.waitWriters})
		case err != nil && ctx.Err() == nil && pgCode(err) == pgUndefinedTable:
			// Dropped or renamed: it leaves the publication, and the
			// stream forgets it at its next poll.
			o.c.log.Warn("the table went away while it was being copied: its copy stops", "table", job.table, "err", err)
			delete(o.active, job.table)
		case err != nil && ctx.Err() == nil:
			o.err = err
			stop = true
		case err != nil:
			stop = true
		default:
			delete(o.active, job.table)
		}
		o.mu.Unlock()
		close(rc.stopped)
		if stop {
			return
		}
	}
}

// restart makes the copy of a table start over with a new plan, after
// every row the current copy produced is acknowledged. The stream calls it
// for a TRUNCATE of a table being copied, before producing the truncate
// markers: rows read before the TRUNCATE then all precede the markers in
// their partitions (so the sink removes them), and the new copy reads the
// table as the TRUNCATE left it. A copy that is only queued needs nothing:
// its finished chunks were produced before the markers, its other chunks
// are read later.
func (o *onlineSnapshots) restart(table string) {
	o.mu.Lock()
	rc := o.running
	if rc == nil || rc.table != table {
		o.mu.Unlock()
		return
	}
	rc.again = true
	rc.cancel()
	o.mu.Unlock()
	<-rc.stopped
}

// drop stops and forgets the copy of a table the stream leaves out, so
// that the copy it gets when it joins again is a new one: rows inserted
// while it was out into pages this copy already read would be missed.
// It returns once a running copy stopped, its rows acknowledged.
func (o *onlineSnapshots) drop(table string) {
	if o == nil {
		return
	}
	o.mu.Lock()
	o.queue = slices.DeleteFunc(o.queue, func(j onlineJob) bool { return j.table == table })
	rc := o.running
	if rc == nil || rc.table != table {
		delete(o.active, table)
		o.mu.Unlock()
		return
	}
	rc.dropped = true
	rc.cancel()
	o.mu.Unlock()
	<-rc.stopped
}

// takeRefused returns, and forgets, the tables whose copy found them
// uncapturable since the last call, with why.
func (o *onlineSnapshots) takeRefused() map[string]error {
	if o == nil {
		return nil
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.refused) == 0 {
		return nil
	}
	out := o.refused
	o.refused = map[string]error{}
	return out
}

// SQLSTATEs of a copy whose table changed under it.
const (
	pgUndefinedColumn = "42703"
	pgUndefinedTable  = "42P01"
)

// pgCode returns the SQLSTATE of a PostgreSQL error in err's chain, or "".
func pgCode(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

func (o *onlineSnapshots) copy(ctx context.Context, job onlineJob) error {
	s := o.c.newSnapshotter(o.sourceID, job.cp, "")
	s.log = s.log.With("online", true)
	s.rewrite, s.recopy = job.rewrite, job.recopy
	plans := []*snapshotPlan{job.plan}
	var estimate int64
	if job.rewrite && job.plan == nil || job.plan != nil && job.plan.Rewrite && len(job.plan.Done) == 0 {
		// A plan saved before its copy started (a restart) does not say
		// whether the rewrite needs the wait: it waits.
		wait := job.waitWriters || job.plan != nil
		if err := o.beforeRewriteCopy(ctx, job, wait); errors.Is(err, errRewriteTooLarge) {
			return o.c.rewriteNotCopied(ctx, rewrite{table: job.table, at: job.cp}, err.Error())
		} else if err != nil {
			return err
		}
	}
	if job.plan == nil {
		var err error
		if plans, estimate, err = s.planAll(ctx, []string{job.table}, false, true); err != nil {
			return err
		}
	}
	if len(plans) > 0 {
		if cp, err := record.ParseLSN(plans[0].CP); err == nil {
			s.cp = cp
		}
	}
	if len(plans) == 0 || !plans[0].Complete {
		if err := s.read(ctx, plans, estimate); err != nil {
			return err
		}
	}
	// The table counts as being copied until the markers are sent, so
	// that its lastSyncAt waits for the sweep too: each partition's next
	// heartbeat follows its marker.
	for _, p := range plans {
		if p.sweepPending() {
			o.c.cfg.failpoints.At(failpoint.CaptureRewriteCopied)
			if err := o.c.rewriteSwept(ctx, p); err != nil {
				return err
			}
		}
	}
	return nil
}

// fillFromSource replaces unchanged TOAST values of a change of case c
// with the source row's current values, read by the row's (new) key: of an
// update of a table whose online copy runs (see the comment at the top of
// this file), of an update that changed the row's ClickHouse key, whose
// previous version the sink would have to find under the old key, and of
// an insert that moved a row into a row filter (tableSet.fillUnchanged).
// The same argument holds for all three, as every later change of the row
// (that the filter lets through) is in the stream. A row that no longer
// exists under that key keeps its markers: its deletion (or its move to
// another key or out of the filter, sent as one) is further on in the
// stream, and the sink's lookup fills them until it loads.
func (s *stream) fillFromSource(ctx context.Context, rel *relation, c fillCase, values []record.Value) error {
	var (
		cols  []string
		idx   []int
		where []string
		args  []any
	)
	for i, v := range values {
		if v.Unchanged {
			cols = append(cols, pgx.Identifier{rel.columns[i].Name}.Sanitize())
			idx = append(idx, i)
		}
	}
	types, err := s.keyTypes(ctx, rel)
	if err != nil {
		return err
	}
	for n, i := range rel.keyIdx {
		args = append(args, values[i].Text)
		where = append(where, fmt.Sprintf("%s = CAST($%d::text AS %s)", pgx.Identifier{rel.columns[i].Name}.Sanitize(), n+1, types[n]))
	}
	from, err := s.fillFrom(ctx, rel)
	if err != nil {
		return err
	}
	q := fmt.Sprintf("SELECT %s FROM %s WHERE %s", strings.Join(cols, ", "), from, strings.Join(where, " AND "))
	// The text result format gives each value's output function, as
	// pgoutput does.
	bound := s.cat.bound
	if bound != nil {
		bound.takeCut() // forget rows of other queries
	}
	rows, err := s.cat.conn.Query(ctx, q, append([]any{pgx.QueryResultFormats{pgx.TextFormatCode}}, args...)...)
	if err != nil {
		return fmt.Errorf("read the unchanged TOAST values of %s (%s) from the source: %w", rel.name, c, err)
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return fmt.Errorf("read the unchanged TOAST values of %s (%s) from the source: %w", rel.name, c, err)
		}
		return nil // gone from this key since: its deletion or move is further on in the stream
	}
	if bound != nil && bound.takeCut() {
		return fmt.Errorf("%w: the unchanged TOAST values of %s, read from the source, take more than the %d bytes capture reads (--max-record-bytes + 1 MiB), so its record would be over the bound too; raise --max-record-bytes and change or re-copy the row to load it",
			ErrRowTooLarge, c, s.c.cfg.maxRecordBytes+receiveSlack)
	}
	raw := rows.RawValues()
	dest := make([]*string, len(raw))
	for j, b := range raw {
		if b != nil {
			v := string(b)
			dest[j] = &v
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read the unchanged TOAST values of %s (%s) from the source: %w", rel.name, c, err)
	}
	for j, i := range idx {
		if dest[j] == nil {
			values[i] = record.Value{Null: true}
		} else {
			values[i] = record.Value{Text: *dest[j]}
		}
	}
	return nil
}

// fillFrom returns what fillFromSource reads a relation's rows from: the
// table ONLY (an inheritance parent's changes are its own rows), but a
// partitioned table whole, as its root has no rows of its own and its
// partitions' changes come under its name (publish_via_partition_root).
func (s *stream) fillFrom(ctx context.Context, rel *relation) (string, error) {
	if rel.fillFrom != "" {
		return rel.fillFrom, nil
	}
	var kind string
	if err := s.cat.conn.QueryRow(ctx, `SELECT relkind::text FROM pg_catalog.pg_class WHERE oid = $1::regclass`, rel.quoted).Scan(&kind); err != nil {
		return "", fmt.Errorf("look up the kind of %s: %w", rel.name, err)
	}
	rel.fillFrom = "ONLY " + rel.quoted
	if kind == "p" {
		rel.fillFrom = rel.quoted
	}
	return rel.fillFrom, nil
}

// keyTypes returns the SQL types of a relation's key columns, in keyIdx
// order, for casting key values given as text.
func (s *stream) keyTypes(ctx context.Context, rel *relation) ([]string, error) {
	if rel.keyTypes != nil {
		return rel.keyTypes, nil
	}
	out := make([]string, len(rel.keyIdx))
	for n, i := range rel.keyIdx {
		err := s.cat.conn.QueryRow(ctx, `SELECT format_type(atttypid, atttypmod) FROM pg_catalog.pg_attribute WHERE attrelid = $1::regclass AND attname = $2`,
			rel.quoted, rel.columns[i].Name).Scan(&out[n])
		if err != nil {
			return nil, fmt.Errorf("look up the type of key column %s of %s: %w", rel.columns[i].Name, rel.name, err)
		}
	}
	rel.keyTypes = out
	return out, nil
}
