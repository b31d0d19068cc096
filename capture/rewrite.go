package capture

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/walhouse/walhouse/record"
)

// Some DDL rewrites every row of a table without a row change in the WAL:
// ALTER COLUMN … TYPE with a conversion that is not binary-coercible (or a
// USING expression), ADD COLUMN with a volatile default
// (clock_timestamp(), gen_random_uuid()), SET LOGGED. pgoutput sends
// nothing for the rows, so ClickHouse would keep their old values. The
// event trigger walhouse_rewrite (ddl.go) writes a notice into the WAL from
// PostgreSQL's table_rewrite event, inside the DDL's transaction and under
// its ACCESS EXCLUSIVE lock, and capture copies the table again, online,
// with every copied row at version record.RewriteCopyVersion(at), at being
// the notice's position. Every change of the table before the DDL has a
// smaller version, every change after its commit a larger one: the copy
// replaces the stale rows and nothing newer, whatever the order in which
// Kafka delivers copy and stream. Rows changed after the DDL carry the new
// values in their own changes already; a row the copy reads after such a
// change carries the same values under a lower version.
//
// Where the copy cannot run (WithoutRewriteCopy, or a table over
// WithRewriteCopyMaxRows) the table is marked inexact
// (walhouse_capture_tables_inexact, alert WalhouseTableInexact), in its
// saved snapshot plan so that the mark survives a restart, until a
// --resnapshot into a new ClickHouse table.

// rewritePrefix marks walhouse's rewrite notices in the WAL.
const rewritePrefix = "walhouse_rewrite"

// rewriteNotice is the content of a rewrite notice: the table PostgreSQL
// rewrites, its partition root (itself when it is no partition) and
// PostgreSQL's reason bits (AT_REWRITE_*), kept for the log.
type rewriteNotice struct {
	OID    uint32   `json:"oid"`
	Table  []string `json:"table"`
	Root   []string `json:"root"`
	Reason int      `json:"reason"`
}

// parseRewriteNotice decodes a rewrite notice.
func parseRewriteNotice(content []byte) (rewriteNotice, error) {
	var n rewriteNotice
	if err := json.Unmarshal(content, &n); err != nil {
		return n, fmt.Errorf("rewrite message: %w", err)
	}
	if len(n.Table) != 2 || len(n.Root) != 2 {
		return n, errors.New("rewrite message: table and root must be [schema, name]")
	}
	return n, nil
}

// tables returns the names ("schema.table") under which the rewritten
// table may be captured: itself (a plain table, or a partition published
// on its own), then its partition root.
func (n rewriteNotice) tables() []string {
	own := n.Table[0] + "." + n.Table[1]
	root := n.Root[0] + "." + n.Root[1]
	if root == own {
		return []string{own}
	}
	return []string{own, root}
}

// rewrite acts on a rewrite notice decoded at lsn: the captured table it
// names is copied again (tableSet.rewritten).
func (t *translator) rewrite(ctx context.Context, lsn record.LSN, m logicalMessage) error {
	content, ok := t.key.verify(m.Content)
	if !ok {
		t.ignored.note(m.Prefix, lsn, errUnauthenticated)
		return nil
	}
	if !m.Transactional || !t.inTx {
		t.ignored.note(m.Prefix, lsn, fmt.Errorf("%w: the event trigger writes rewrite notices in the DDL's transaction", errMisplaced))
		return nil
	}
	n, err := parseRewriteNotice(content)
	if err != nil {
		t.ignored.note(m.Prefix, lsn, fmt.Errorf("%w: %w", errMalformed, err))
		return nil
	}
	at := lsn
	if m.LSN != 0 {
		at = record.LSN(m.LSN)
	}
	for _, table := range n.tables() {
		if !t.cfg.excluded(table) && t.tables.captured(table) {
			return t.tables.rewritten(ctx, rewrite{table: table, at: at, reason: n.Reason})
		}
	}
	return nil
}

// rewrite is a table rewritten by DDL at a WAL position.
type rewrite struct {
	table  string
	at     record.LSN // the rewrite notice's position: the copy's version
	reason int        // PostgreSQL's AT_REWRITE_* bits
}

// rewritten copies a captured table again after a rewrite, or marks it
// inexact when it must not be copied. The copy's progress is saved at
// once, so a restart after the slot confirmed the notice still makes it.
func (s *stream) rewritten(ctx context.Context, rw rewrite) error {
	s.c.rewrites.WithLabelValues(rw.table).Inc()
	if !s.c.cfg.rewriteCopy {
		return s.c.rewriteNotCopied(ctx, rw, "--rewrite-copy is off")
	}
	s.c.log.Warn("DDL rewrote the table without row changes (PostgreSQL sends none for it): copying it again next to the stream, at the rewrite's position, so that ClickHouse converges",
		"table", rw.table, "at", rw.at, "reason", rw.reason)
	// A copy of the table that runs stops first (its last chunk could
	// save its own plan over the pending one), and the rewrite's copy is
	// queued once the pending plan is saved (it saves its own plan).
	if stopped := s.online.supersede(rw.table); stopped != nil {
		<-stopped
	}
	if err := s.c.saveRewritePending(ctx, rw); err != nil {
		return err
	}
	s.online.rewrite(rw.table, rw.at)
	return nil
}

// saveRewritePending saves a plan that copies the whole table at the
// rewrite's position, for a restart before the copy planned its chunks (a
// copy that starts plans them and saves that plan in its place).
func (c *Capturer) saveRewritePending(ctx context.Context, rw rewrite) error {
	if c.cfg.state == nil {
		return nil
	}
	old, err := loadPlan(ctx, &c.cfg, rw.table)
	if err != nil {
		return err
	}
	p := &snapshotPlan{Table: rw.table, CP: rw.at.String(), At: time.Now().UTC(), ChunkPages: c.cfg.chunkPages, Chunks: 1, Rewrite: true}
	if old != nil {
		p.Membership, p.Leaves, p.Inexact = old.Membership, old.Leaves, old.Inexact || old.LeftOut != ""
	}
	return c.savePlan(ctx, p)
}

// rewriteNotCopied marks a rewritten table inexact, saved in its snapshot
// plan (a complete one if it had none, so that no copy follows from it),
// and says why and what to do.
func (c *Capturer) rewriteNotCopied(ctx context.Context, rw rewrite, why string) error {
	c.log.Error("DDL rewrote the table without row changes, and it is not copied again ("+why+"): ClickHouse keeps values older than the rewrite and the table is marked inexact (walhouse_capture_tables_inexact). "+
		"For an exact table: once the sink has caught up, stop it, drop the table's ClickHouse table and run capture once with --resnapshot <table>",
		"table", rw.table, "at", rw.at, "reason", rw.reason)
	c.refused.setInexact(rw.table, true)
	if c.cfg.state == nil {
		return nil
	}
	p, err := loadPlan(ctx, &c.cfg, rw.table)
	if err != nil {
		return err
	}
	if p == nil {
		p = &snapshotPlan{Table: rw.table, CP: rw.at.String(), At: time.Now().UTC(), ChunkPages: c.cfg.chunkPages, Complete: true}
	}
	if p.Inexact && (p.Complete || !p.Rewrite) {
		return nil
	}
	p.Inexact = true
	if p.Rewrite {
		p.Complete = true // the copy of the rewrite is given up, also after a restart
	}
	return c.savePlan(ctx, p)
}

// savePlan saves p as its table's snapshot plan.
func (c *Capturer) savePlan(ctx context.Context, p *snapshotPlan) error {
	raw, err := json.Marshal(p)
	if err != nil {
		return err
	}
	if err := c.cfg.state.Save(ctx, stateKey(c.cfg.slot, p.Table), raw); err != nil {
		return fmt.Errorf("save the snapshot state of %s: %w", p.Table, err)
	}
	return nil
}

// supersede stops the running copy of table, if any, for a rewrite's copy
// that replaces it, and returns a channel closed once it returned (nil
// when none runs). The table still counts as being copied.
func (o *onlineSnapshots) supersede(table string) (stopped <-chan struct{}) {
	o.mu.Lock()
	defer o.mu.Unlock()
	rc := o.running
	if rc == nil || rc.table != table || rc.dropped {
		return nil
	}
	rc.superseded = true
	rc.cancel()
	return rc.stopped
}

// rewrite queues a copy of table at version RewriteCopyVersion(at), in
// place of a copy of the table that is queued; one that runs (supersede
// was not called, or a queued one started since) stops, and run queues
// the new one first. Rows copied before the rewrite have lower versions,
// so whatever of them arrives is replaced, and rows they read after it
// carry its values anyway.
func (o *onlineSnapshots) rewrite(table string, at record.LSN) {
	job := onlineJob{table: table, cp: at, rewrite: true}
	o.mu.Lock()
	defer o.mu.Unlock()
	if rc := o.running; rc != nil && rc.table == table && !rc.dropped {
		rc.next = &job
		rc.cancel()
		return
	}
	for i := range o.queue {
		if o.queue[i].table == table {
			o.queue[i] = job
			return
		}
	}
	o.active[table] = true
	o.queue = append(o.queue, job)
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

// errRewriteTooLarge is a rewritten table over WithRewriteCopyMaxRows.
var errRewriteTooLarge = errors.New("the table has more rows than --rewrite-copy-max-rows")

// checkRewriteSize returns errRewriteTooLarge for a table with more rows
// than the configured limit. It counts at most limit+1 rows, so the check
// costs no more than a copy the limit allows.
func (o *onlineSnapshots) checkRewriteSize(ctx context.Context, table string) error {
	limit := o.c.cfg.rewriteCopyMaxRows
	if limit <= 0 {
		return nil
	}
	conn, err := connect(ctx, o.c.cfg.connString, false)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var n int64
	if err := conn.QueryRow(ctx, fmt.Sprintf("SELECT count(*) FROM (SELECT FROM %s LIMIT $1) s", quoteTable(table)), limit+1).Scan(&n); err != nil {
		return fmt.Errorf("count the rows of %s against --rewrite-copy-max-rows: %w", table, err)
	}
	if n > limit {
		return fmt.Errorf("%w (%d)", errRewriteTooLarge, limit)
	}
	return nil
}

// newRewritesCounter returns the counter of rewrites noticed, by table.
func newRewritesCounter() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "walhouse_capture_table_rewrites_total",
		Help: "DDL that rewrote a captured table without row changes (ALTER COLUMN TYPE with a conversion, ADD COLUMN with a volatile default): each copies the table again, or marks it inexact.",
	}, []string{"table"})
}
