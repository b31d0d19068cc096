package capture

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/walhouse/walhouse/capture/pgoutput"
	"github.com/walhouse/walhouse/record"
	"github.com/walhouse/walhouse/schema"
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
// A rewrite that converts a column of the ClickHouse sorting or partition
// key (a layout's, or the primary key) moves rows: the copy writes each at
// its new position, where nothing older is to replace, and the version at
// the old position would stay in FINAL. So the copy ends like a re-copy
// after lost records (recopy.go): once it is acknowledged, capture sends
// done markers (record.RewriteSweepID; snapshotPlan.Sweep keeps that due
// across a restart) and the sink sweeps the table at the rewrite's
// position: no row PostgreSQL had after the DDL has a latest version
// below it.
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
// PostgreSQL's reason bits (AT_REWRITE_*), kept for the log. A notice of
// the event trigger walhouse_enum names the enum (schema, name) one of
// whose labels was renamed instead: the table holds it (see enumRenamed),
// in Columns, of which Plain are of the enum itself (not an array, a
// domain or a composite of it).
type rewriteNotice struct {
	OID     uint32   `json:"oid"`
	Table   []string `json:"table"`
	Root    []string `json:"root"`
	Reason  int      `json:"reason"`
	Enum    []string `json:"enum,omitempty"`
	Columns []string `json:"columns,omitempty"`
	Plain   []string `json:"plain,omitempty"`
}

// parseRewriteNotice decodes a rewrite notice.
func parseRewriteNotice(content []byte) (rewriteNotice, error) {
	var n rewriteNotice
	if err := json.Unmarshal(content, &n); err != nil {
		return n, fmt.Errorf("rewrite message: %w", err)
	}
	if len(n.Table) != 2 || len(n.Root) != 2 || n.Enum != nil && len(n.Enum) != 2 {
		return n, errors.New("rewrite message: table, root and enum must be [schema, name]")
	}
	return n, nil
}

// ALTER TYPE ... RENAME VALUE changes what every stored value of the
// label reads as, in every table that holds the enum, without a rewrite
// or a row change: ClickHouse would keep the old label in every row not
// changed since (a column a layout stores as Enum8/Enum16 excepted, whose
// label the sink renames: see enumFollowed). The event trigger
// walhouse_enum (ddl.go) writes a rewrite notice naming the enum for each
// table, and the table is copied again as after a rewrite, with two
// differences, since the rename locks the type and not the tables:
//
//   - the copy's version is the position of the DDL's commit, not the
//     notice's: logical decoding reads an enum value with the catalog as
//     of its change's position, or with the label its catalog cache holds,
//     so another transaction's change written before the commit (after
//     the notice too) may carry the old label, and the copy must replace
//     it; every change after the commit carries the new one;
//   - the copy waits for the table's writers (waitForWriters): a
//     transaction that wrote the old label before the commit may still be
//     open when the copy starts, and the copy must read its rows.
//
// One notice per table is acted on: a root whose partitions all hold the
// enum is named by each of them, at one commit. A table whose layout
// stores every column that holds the enum as an Enum8/Enum16 is not
// copied: the sink renames the label in those columns (labels.go).

// enumFollowed reports whether every captured column of table that holds
// the enum of notice n is one of the enum itself whose layout stores it
// as an Enum8/Enum16, which follows a renamed label by itself.
func (c *config) enumFollowed(table string, n rewriteNotice) bool {
	layout := c.layouts[table]
	for _, col := range n.Columns {
		if layout.Excludes(col) {
			continue
		}
		if o, ok := layout.Columns[col]; !ok || !schema.IsEnumOverride(o.Type) || !slices.Contains(n.Plain, col) {
			return false
		}
	}
	return len(n.Columns) > 0
}

// enumRenamed returns the copy's version for a rewrite notice of an enum
// rename in the transaction that commits at commit (at when unknown).
func enumRenamed(at, commit record.LSN) record.LSN {
	if commit > at {
		return commit
	}
	return at
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
func (t *translator) rewrite(ctx context.Context, lsn record.LSN, m pgoutput.LogicalMessage) error {
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
	rw := rewrite{at: at, reason: n.Reason}
	if n.Enum != nil {
		rw.at, rw.enum = enumRenamed(at, t.commitLSN), n.Enum[0]+"."+n.Enum[1]
	}
	for _, table := range n.tables() {
		if !t.cfg.excluded(table) && t.tables.captured(table) {
			if rw.enum != "" && (t.enumCopied[table] == rw.at || t.cfg.enumFollowed(table, n)) {
				return nil // another partition of the same root, or no stale value
			}
			if rw.enum != "" {
				t.enumCopied[table] = rw.at
			}
			rw.table = table
			return t.tables.rewritten(ctx, rw)
		}
	}
	return nil
}

// rewrite is a table rewritten by DDL at a WAL position.
type rewrite struct {
	table  string
	at     record.LSN // the copy's version: the rewrite notice's position (or see rewrittenByCatalog)
	reason int        // PostgreSQL's AT_REWRITE_* bits
	// catalog says why a Relation message showed a rewrite no notice
	// reported (rewrittenByCatalog); empty for a notice.
	catalog string
	// recopy is the re-copy request a recopy notice carried (recopy.go);
	// empty for a rewrite.
	recopy string
	// enum is the enum ("schema.name") whose renamed label the table
	// holds (enumRenamed); empty for a rewrite.
	enum string
	// inexact says why the table cannot be copied exactly and is marked
	// inexact instead (enumRenamedUnnoticed); empty for a copy.
	inexact string
}

// rewritten copies a captured table again after a rewrite, or marks it
// inexact when it must not be copied. The copy's progress is saved at
// once, so a restart after the slot confirmed the notice still makes it.
func (s *stream) rewritten(ctx context.Context, rw rewrite) error {
	if rw.recopy != "" && s.c.cfg.state != nil {
		// Asked for (recopy.go): copied whatever --rewrite-copy says.
		if p, err := loadPlan(ctx, &s.c.cfg, rw.table); err != nil {
			return err
		} else if p != nil && (p.Recopy == rw.recopy || p.RecopyRefused == rw.recopy) {
			return nil // a second notice of the same request
		}
	}
	if rw.recopy != "" {
		s.c.log.Warn("copying the table again, asked by a sink after records of its topic were lost (--recopy-on-gap)", "table", rw.table, "at", rw.at, "recopy", rw.recopy)
	} else {
		s.c.rewrites.WithLabelValues(rw.table).Inc()
	}
	if rw.inexact != "" {
		return s.c.rewriteNotCopied(ctx, rw, rw.inexact)
	}
	if !s.c.cfg.rewriteCopy && rw.recopy == "" {
		return s.c.rewriteNotCopied(ctx, rw, "--rewrite-copy is off")
	}
	switch {
	case rw.recopy != "": // logged above
	case rw.enum != "":
		s.c.log.Warn("ALTER TYPE "+rw.enum+" RENAME VALUE changed what the table's stored values read as without row changes (PostgreSQL sends none for it): copying it again next to the stream, at the position of the DDL's commit, so that ClickHouse converges",
			"table", rw.table, "at", rw.at)
	case rw.catalog != "":
		s.c.log.Warn("DDL may have rewritten the table without row changes, and no event trigger notice said so ("+rw.catalog+"): copying it again next to the stream, at the position of its first change after the DDL, so that ClickHouse converges",
			"table", rw.table, "at", rw.at)
	default:
		s.c.log.Warn("DDL rewrote the table without row changes (PostgreSQL sends none for it): copying it again next to the stream, at the rewrite's position, so that ClickHouse converges",
			"table", rw.table, "at", rw.at, "reason", rw.reason)
	}
	// A copy of the table that runs stops first (its last chunk could
	// save its own plan over the pending one), and the rewrite's copy is
	// queued once the pending plan is saved (it saves its own plan).
	if stopped := s.online.supersede(rw.table); stopped != nil {
		<-stopped
	}
	if err := s.c.saveRewritePending(ctx, rw); err != nil {
		return err
	}
	s.online.rewrite(rw.table, rw.at, rw.catalog != "" || rw.recopy != "" || rw.enum != "", rw.recopy)
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
	p := &snapshotPlan{Table: rw.table, CP: rw.at.String(), At: time.Now().UTC(), ChunkPages: c.cfg.chunkPages, Chunks: 1, Rewrite: true, Recopy: rw.recopy}
	if old != nil {
		p.Membership, p.Leaves, p.Inexact = old.Membership, old.Leaves, old.Inexact || old.LeftOut != ""
		if p.Recopy == "" && old.Recopy != "" && !old.Complete {
			// A rewrite supersedes a re-copy under way: its copy, at a
			// later position, answers the request as well.
			p.Recopy = old.Recopy
		}
	}
	p.Sweep = p.Recopy == ""
	return c.savePlan(ctx, p)
}

// rewriteNotCopied marks a rewritten table inexact, saved in its snapshot
// plan (a complete one if it had none, so that no copy follows from it),
// and says why and what to do.
func (c *Capturer) rewriteNotCopied(ctx context.Context, rw rewrite, why string) error {
	what := "DDL rewrote the table without row changes"
	if rw.enum != "" {
		what = "ALTER TYPE " + rw.enum + " RENAME VALUE changed what the table's stored values read as without row changes"
	}
	c.log.Error(what+", and it is not copied again ("+why+"): ClickHouse keeps values older than the rewrite and the table is marked inexact (walhouse_capture_tables_inexact). "+
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
	p.Sweep = false // no copy: a sweep would remove every row
	if p.Recopy != "" {
		// No done marker may claim a copy that was not made.
		c.log.Error("the re-copy a sink asked for is given up: the sink keeps the table's lastSyncAt before its gap (walhouse_sink_recopies_pending); recover by hand (docs/operations.md#records-lost)", "table", rw.table, "recopy", p.Recopy)
		p.RecopyRefused, p.Recopy = p.Recopy, ""
	}
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
// when none runs). A queued copy of the table leaves the queue, so that it
// cannot start and save its plan over the rewrite's pending one before
// rewrite queues the latter. The table still counts as being copied.
func (o *onlineSnapshots) supersede(table string) (stopped <-chan struct{}) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.queue = slices.DeleteFunc(o.queue, func(j onlineJob) bool { return j.table == table })
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
//
// waitWriters makes the copy wait for the table's writers first (see
// waitForWriters): a rewrite found by the catalog needs it, one a notice
// reported does not.
//
// recopy names the re-copy request the copy answers (recopy.go), if any.
func (o *onlineSnapshots) rewrite(table string, at record.LSN, waitWriters bool, recopy string) {
	job := onlineJob{table: table, cp: at, rewrite: true, waitWriters: waitWriters, recopy: recopy}
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

// writersTurn is how long a rewrite's copy waits for the table's writers
// before the other queued copies get their turn (writersOpenError).
const writersTurn = time.Minute

// writersOpenError says that transactions a rewrite's copy waits for
// (waitForWriters) were still open after its turn: one transaction left
// open (idle in transaction, say) must not hold up every other table's
// copy, so the copy goes to the back of the queue and waits for the same
// transactions, and no others, at its next turn.
type writersOpenError struct {
	table     string
	remaining []string // virtual transaction ids still open
}

func (e *writersOpenError) Error() string {
	return fmt.Sprintf("the copy of %s after a rewrite waits for %d transactions that wrote to it to end (see pg_locks, pg_stat_activity): the other copies go first", e.table, len(e.remaining))
}

// beforeRewriteCopy runs before a rewrite's copy starts: it waits for the
// table's writers if asked (waitForWriters; job.writers, when listed at an
// earlier turn, are the ones left) and returns errRewriteTooLarge for a
// table with more rows than the configured limit, counting at most
// limit+1 rows, so the check costs no more than a copy the limit allows.
func (o *onlineSnapshots) beforeRewriteCopy(ctx context.Context, job onlineJob, waitWriters bool) error {
	table := job.table
	limit := o.c.cfg.rewriteCopyMaxRows
	if !waitWriters && limit <= 0 {
		return nil
	}
	conn, err := connect(ctx, o.c.cfg.connString, connOptions{})
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if waitWriters {
		if err := waitForWriters(ctx, conn, table, job.writers, o.writersTurn); err != nil {
			return err
		}
	}
	if limit <= 0 {
		return nil
	}
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
		Help: "DDL that rewrote a captured table without row changes (ALTER COLUMN TYPE with a conversion, ADD COLUMN with a volatile default), or changed what its stored values read as (ALTER TYPE ... RENAME VALUE of an enum it holds): each copies the table again, or marks it inexact.",
	}, []string{"table"})
}

// Without the event trigger (capture not a superuser, a trigger disabled,
// PostgreSQL 13, whose pgoutput streams no logical messages) no notice
// says that DDL rewrote a table. The next Relation message of the table
// shows what may have: a column whose type changed other than
// binary-coercibly, or a new column that older rows do not read as a
// stored "missing" value although it has a default (a volatile one). Such
// a table is copied again at version lsn-1, lsn being the position of the
// first change after the Relation message (which itself comes without
// one), the first change of the table after the DDL in commit order:
// every change before the DDL is below it. A change
// after the DDL can be below it too, written by a transaction that
// commits later; such a transaction still holds its lock on the table
// when the copy starts, and the copy waits for it (waitForWriters), so
// the copy reads its effect. A table whose description changed while a
// notice was seen is left to the notices: the trigger ran.

// rewrittenByCatalog notes a table for a copy when its new relation shows
// DDL that may have rewritten it: its next change (retypedChange) says at
// which position.
func (t *translator) rewrittenByCatalog(ctx context.Context, relID uint32, prev, rel *relation) error {
	why := retyped(prev.columns, rel.columns)
	if why == "" {
		added := addedColumns(prev.columns, rel.columns)
		if len(added) > 0 {
			volatile, err := t.cat.volatileDefaults(ctx, relID)
			if err != nil {
				return err
			}
			for _, c := range added {
				if volatile[c.Name] && c.Missing == nil {
					why = "column " + c.Name + " was added with a default that older rows do not read as a stored value (a volatile one)"
					break
				}
			}
		}
	}
	if why != "" {
		t.retyped[relID] = why
	}
	return nil
}

// retypedChange copies a table noted by rewrittenByCatalog at its first
// change, at lsn.
func (t *translator) retypedChange(ctx context.Context, lsn record.LSN, relID uint32) error {
	why, ok := t.retyped[relID]
	if !ok {
		return nil
	}
	delete(t.retyped, relID)
	rel := t.rels[relID]
	if rel.skip || lsn == 0 {
		return nil
	}
	return t.tables.rewritten(ctx, rewrite{table: rel.name, at: lsn - 1, catalog: why})
}

// retyped says which column of prev changed its type in cols other than
// binary-coercibly (so PostgreSQL rewrote the table), or "" for none.
func retyped(prev, cols []record.Column) string {
	for _, c := range cols {
		for _, p := range prev {
			if !sameColumn(p, c) {
				continue
			}
			if valueChangingRetype(p, c) {
				return fmt.Sprintf("column %s changed type from %s to %s", c.Name, typeString(p), typeString(c))
			}
		}
	}
	return ""
}

// addedColumns returns the columns of cols that prev does not have.
func addedColumns(prev, cols []record.Column) []record.Column {
	var out []record.Column
	for _, c := range cols {
		if !slices.ContainsFunc(prev, func(p record.Column) bool { return sameColumn(p, c) }) {
			out = append(out, c)
		}
	}
	return out
}

// sameColumn reports whether a and b are one column: the same attnum when
// both are known, the same name otherwise.
func sameColumn(a, b record.Column) bool {
	if a.Attnum > 0 && b.Attnum > 0 {
		return a.Attnum == b.Attnum
	}
	return a.Name == b.Name
}

// typeString writes a column's type for the log.
func typeString(c record.Column) string {
	s := c.Type
	if c.TypMod >= 0 {
		s += fmt.Sprintf("(typmod %d)", c.TypMod)
	}
	if c.Array {
		s += "[]"
	}
	return s
}

// valueChangingRetype reports whether PostgreSQL may have rewritten the
// values of a column whose type went from p to c: false only for the
// changes it makes without a rewrite (binary-coercible), which
// docs/schema-changes.md lists; anything else counts as a rewrite, since a
// copy too many costs time and one too few leaves stale values.
func valueChangingRetype(p, c record.Column) bool {
	switch {
	case p.Type == c.Type && p.Array == c.Array && p.TypMod == c.TypMod:
		return false
	case p.Array != c.Array:
		return true
	case p.Type == c.Type:
		return !widerTypmod(p.Type, p.TypMod, c.TypMod)
	case p.Type == "varchar" && c.Type == "text", p.Type == "text" && c.Type == "varchar" && c.TypMod < 0:
		return false
	}
	return true
}

// widerTypmod reports whether a type modifier change of typ from from to
// to keeps every value's bytes: a longer (or unbounded) varchar or bit
// varying, a numeric of more precision at the same scale (or unbounded).
func widerTypmod(typ string, from, to int32) bool {
	switch typ {
	case "varchar", "varbit":
		return to < 0 || from >= 0 && to >= from
	case "numeric":
		if to < 0 {
			return true
		}
		if from < 0 {
			return false
		}
		// typmod = (precision << 16 | scale) + 4
		fp, fs := (from-4)>>16, (from-4)&0xffff
		tp, ts := (to-4)>>16, (to-4)&0xffff
		return ts == fs && tp >= fp
	}
	return false
}

// writersPoll is how long waitForWriters waits between looks.
const writersPoll = 100 * time.Millisecond

// waitForWriters waits until every transaction that holds a write lock on
// table (or a partition of it: pg_partition_tree lists no plain table, so
// the table itself is named too) when it is first called has ended, so that
// a copy started afterwards sees all changes those transactions made (see
// the comment above rewrittenByCatalog). listed, when not nil, are those
// transactions still open at an earlier turn: only they are waited for.
// After turn it returns a *writersOpenError with the ones still open.
func waitForWriters(ctx context.Context, conn *pgx.Conn, table string, listed []string, turn time.Duration) error {
	vxids := listed
	if vxids == nil {
		err := conn.QueryRow(ctx, `SELECT coalesce(array_agg(DISTINCT l.virtualtransaction), '{}') FROM pg_catalog.pg_locks l
		WHERE l.locktype = 'relation' AND l.mode = 'RowExclusiveLock' AND l.pid <> pg_backend_pid()
		AND l.relation IN (SELECT $1::regclass UNION SELECT relid FROM pg_partition_tree($1::regclass))`, quoteTable(table)).Scan(&vxids)
		if err != nil {
			return fmt.Errorf("list the transactions writing to %s before copying it after a rewrite: %w", table, err)
		}
	}
	deadline := time.Now().Add(turn)
	for len(vxids) > 0 {
		var open []string
		err := conn.QueryRow(ctx, `SELECT coalesce(array_agg(DISTINCT virtualxid), '{}') FROM pg_catalog.pg_locks WHERE locktype = 'virtualxid' AND virtualxid = ANY($1) AND granted`, vxids).Scan(&open)
		if err != nil {
			return fmt.Errorf("wait for the transactions writing to %s: %w", table, err)
		}
		if len(open) == 0 {
			return nil
		}
		vxids = open
		if time.Now().After(deadline) {
			return &writersOpenError{table: table, remaining: open}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(writersPoll):
		}
	}
	return nil
}
