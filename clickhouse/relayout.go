package clickhouse

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"

	"github.com/walhouse/walhouse/internal/failpoint"
	"github.com/walhouse/walhouse/record"
	"github.com/walhouse/walhouse/schema"
	"github.com/walhouse/walhouse/sink"
)

// A relayout gives a table ClickHouse already has the sorting key and
// partitions of its layout (docs/shaping-tables.md#changing-a-layout),
// and the column types its layout's overrides name now (schema.PlanRetype),
// when the sink starts with WithRelayout and meets the table first. CREATE
// TABLE IF NOT EXISTS keeps the shape a table was created with,
// ReplacingMergeTree's shape cannot be altered in place, and the sink
// changes no column whose type a layout overrides.
//
// A column type change is made only when every value converts exactly,
// or, for a narrower Decimal, as the sink would convert it under the
// layout's on_overflow: one query over the old table (checkNarrowed)
// counts the values the new type refuses before anything is built, and
// any refused stops the relayout there; the parts copied later are
// checked the same way (after the swap, refused rows are left out and
// reported, ErrRowsLeftOut). Any other change is refused before anything
// is built. The new table gets the
// new types, and the copy, the forwarding view and the catch-ups select
// each converted column through its explicit conversion (selectList).
// Sinks that keep running across the swap have the old types in their
// insert's description (Writer.describeInsert): their inserts disable the
// server's conversion of Native input (prepare), so such an insert fails
// with a type mismatch instead of being converted by the server's rules
// (which write a Decimal's text without PostgreSQL's trailing zeros), and
// the retry reads the table's columns again (loadRun).
//
// The new table is built beside the old one from the rows ClickHouse has,
// not from PostgreSQL: every row that is live at FINAL, at its version,
// and every tombstone (so a stale version replayed later, a dead letter
// say, cannot bring a deleted row back; see final). Versions collapse by the old sorting key there, which holds the
// primary key, so that is one row per row of PostgreSQL whatever the new
// key is. Then EXCHANGE TABLES swaps the two atomically: a reader sees the
// old table, then the new one, never a missing or doubled row.
//
// Sinks keep loading the old table meanwhile (other sinks of the group,
// and every sink when walhouse relayout runs, Writer.Relayout). Before
// the copy reads, a materialized view (RelayoutForwardName) forwards every
// insert into the old table to the new one as well, as it was inserted:
// capture's layout moves every row whose new sorting columns changed, so
// the rows land at the new key. Inserts that began before the view existed
// do not pass through it: the relayout waits until they ended and copies
// their parts (merges of the old table are stopped first, so a part not
// listed before the copy is new) before the swap. So at the swap the new
// table holds everything the old one holds, and a row a reader saw in the
// old table is in the new one. A row copied twice (by the copy and the
// view, or the view and the catch-up) is the same version at the same
// key, which FINAL keeps once. After the swap the view is dropped and the
// parts the old table still got (inserts that ran across the swap) are
// copied as well. The old table is kept under RelayoutKeptName, outside
// what the query API, erasure and cleanup see, unless WithRelayout said to
// drop it.
//
// A sink started with --relayout loads nothing into the table meanwhile
// (the table is opened under Writer.ddl), so the table's lastSyncAt stays
// where it was. A crash before the swap leaves the old table as it was,
// the view and the half-built table, which the next relayout drops (the
// view first: inserts into the old table would fail without its target)
// and builds again; a crash after it leaves the new table in place and the
// old one under its building name, whose rows the next relayout copies
// again (at FINAL, so the newer versions the new table has win) before
// keeping it.

// RelayoutBuildName is the name of the table a relayout of table builds.
func RelayoutBuildName(table string) string { return schema.ReservedPrefix + "_relayout_" + table }

// relayoutColumnsName is the name of the table without rows that a
// relayout of table gives the new column types, to make the new table as.
func relayoutColumnsName(table string) string {
	return schema.ReservedPrefix + "_relayout_cols_" + table
}

// RelayoutKeptName is the name a relayout of table keeps the old table
// under, until an operator drops it.
func RelayoutKeptName(table string) string { return schema.ReservedPrefix + "_old_" + table }

// RelayoutForwardName is the name of the materialized view that forwards
// the inserts into table to the table a relayout builds, until the swap.
func RelayoutForwardName(table string) string {
	return schema.ReservedPrefix + "_relayout_fwd_" + table
}

// ErrNoTable is returned by Writer.Relayout for a table ClickHouse does
// not have.
var ErrNoTable = errors.New("no such table in ClickHouse")

// ErrRowsLeftOut is wrapped by the error of a relayout that gave the
// table its new shape but left out of it rows whose values a narrowed
// column's new type refuses, which sinks loaded into the old table after
// the relayout's last check before its swap (docs/shaping-tables.md#narrowing-a-decimal).
var ErrRowsLeftOut = errors.New("rows left out of the new table")

// RelayoutResult says what Writer.Relayout did.
type RelayoutResult struct {
	// Changed is false when the table had its layout's shape already and
	// no relayout was left unfinished: nothing was done.
	Changed bool
	// Resumed says a relayout interrupted after its swap was finished.
	Resumed bool
	// Rows is the number of rows of the new table once the copy ended
	// (live rows, tombstones, and rows loaded meanwhile).
	Rows uint64
	// CaughtUp is the parts of the old table copied after the copy: rows
	// of inserts that began before the forwarding view or ran across the
	// swap.
	CaughtUp int
	// Old is where the old table is kept; empty when it was dropped.
	Old string
	// SortingKey and PartitionKey are the table's shape before.
	SortingKey   []string
	PartitionKey string
	// NewSortingKey and NewPartitionKey are its layout's: the shape it has
	// now.
	NewSortingKey   []string
	NewPartitionKey string
	// Retyped lists the columns given their layout's type.
	Retyped []schema.Retype
	// Clamped is the number of values of narrowed columns the relayout
	// stored as their new type's bound (on_overflow clamp), as counted
	// before the copy and in the parts copied after it (a version copied
	// twice, by the copy and the view, may count twice).
	Clamped uint64
}

// WithFailpoints gives the Writer the fault tests' crash points
// (failpoint.RelayoutCopied, RelayoutSwapped); nil, the default, turns
// them off.
func WithFailpoints(fps *failpoint.Set) WriterOption {
	return func(w *Writer) { w.failpoints = fps }
}

// WithRelayout makes the Writer rebuild a table whose sorting key,
// partitions or overridden column types differ from its layout (or the
// default shape), the first time it loads into the table; dropOld drops the old table once the new
// one is in place, instead of keeping it (RelayoutKeptName).
func WithRelayout(dropOld bool) WriterOption {
	return func(w *Writer) {
		w.relayoutOn = true
		w.relayoutDropOld = dropOld
	}
}

// shape is a table's sorting key and partition key as ClickHouse says,
// and how its columns' types differ from its layout's.
type shape struct {
	exists       bool
	sortingKey   []string
	partitionKey string
	// retype lists the columns whose type is not their layout's, and
	// retypeErr is a column whose type no relayout can change into its
	// layout's (schema.PlanRetype).
	retype    []schema.Retype
	retypeErr error
}

// readShape reads the shape of table name of the local database.
func (w *Writer) readShape(ctx context.Context, t *schema.Table, name string) (shape, error) {
	s, err := w.readKeys(ctx, t, name)
	if err != nil || !s.exists {
		return s, err
	}
	cols, err := schema.ReadColumns(ctx, w.conn, t.Placement().LocalDatabase(), name)
	if err != nil {
		return shape{}, err
	}
	s.retype, s.retypeErr = schema.PlanRetype(t, cols)
	return s, nil
}

// readKeys reads the sorting key and partition key of table name of the
// local database.
func (w *Writer) readKeys(ctx context.Context, t *schema.Table, name string) (shape, error) {
	qctx := ch.Context(ctx, ch.WithParameters(ch.Parameters{"db": schema.EscapeParam(t.Placement().LocalDatabase()), "tbl": schema.EscapeParam(name)}))
	rows, err := w.conn.Query(qctx, "SELECT sorting_key, partition_key FROM system.tables WHERE database = {db:String} AND name = {tbl:String}")
	if err != nil {
		return shape{}, fmt.Errorf("read the sorting key of %s: %w", name, err)
	}
	defer rows.Close()
	var s shape
	for rows.Next() {
		var key string
		if err := rows.Scan(&key, &s.partitionKey); err != nil {
			return shape{}, fmt.Errorf("read the sorting key of %s: %w", name, err)
		}
		s.exists, s.sortingKey = true, schema.SplitSortingKey(key)
	}
	return s, rows.Err()
}

// sameShape reports whether s is t's layout: the same sorting key, the
// same partition expression (compared without blanks and quotes, which
// ClickHouse writes its own way) and the column types of its layout.
func sameShape(s shape, t *schema.Table) bool {
	norm := func(e string) string {
		return strings.NewReplacer(" ", "", "`", "", "\n", "").Replace(e)
	}
	return slices.Equal(s.sortingKey, t.OrderBy) && norm(s.partitionKey) == norm(t.PartitionKey()) &&
		len(s.retype) == 0 && s.retypeErr == nil
}

// retypeNote lists the column type changes of rs, for logs and errors.
func retypeNote(rs []schema.Retype) string {
	if len(rs) == 0 {
		return "none"
	}
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.String()
	}
	return strings.Join(out, ", ")
}

// selectList is what a relayout's copies select of the old table to
// insert into the new one: every column, those of rs converted to their
// new type (Retype.Expr, which fails on a value a narrowed column
// refuses: a copy stops rather than store another value).
func selectList(rs []schema.Retype) string {
	return replaceList(rs, func(r schema.Retype) string { return r.Expr })
}

// viewList is selectList for the forwarding view and the copies that
// leave out the rows a narrowed column refuses (fitting), whose
// conversions do not fail (Retype.ForwardExpr).
func viewList(rs []schema.Retype) string { return replaceList(rs, schema.Retype.ForwardExpr) }

// replaceList is every column, those of rs converted by expr.
func replaceList(rs []schema.Retype, expr func(schema.Retype) string) string {
	if len(rs) == 0 {
		return "*"
	}
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = expr(r) + " AS " + schema.QuoteIdent(r.Column)
	}
	return "* REPLACE (" + strings.Join(out, ", ") + ")"
}

// refusedAny is the condition true of a row one of rs's narrowed columns
// refuses a value of; "" when none can.
func refusedAny(rs []schema.Retype) string {
	var conds []string
	for _, r := range rs {
		if r.Refused != "" {
			conds = append(conds, r.Refused)
		}
	}
	return strings.Join(conds, " OR ")
}

// fitting is what a copy selects from when it leaves out the rows a
// narrowed column of rs refuses a value of: a subquery of table (quoted)
// with the condition where (after WHERE; "" none) and theirs, or table
// itself when none can be refused and where is "". The condition sits in
// the subquery because in a query whose select list converts a column
// (REPLACE … AS column), ClickHouse reads the column's name in WHERE as
// the converted value: 1.2345 would be tested as the 1.23 it becomes.
// The forwarding view selects from it too, so that it leaves those rows
// out (an insert of a sink must not fail on them; the copy of the old
// table's new parts finds them).
func fitting(table string, rs []schema.Retype, where string) string {
	cond := refusedAny(rs)
	switch {
	case cond == "" && where == "":
		return table
	case cond == "":
		return "(SELECT * FROM " + table + " WHERE " + where + ")"
	case where == "":
		return "(SELECT * FROM " + table + " WHERE NOT (" + cond + "))"
	}
	return "(SELECT * FROM " + table + " WHERE " + where + " AND NOT (" + cond + "))"
}

// relayout rebuilds t's table in the shape of t (see above); have is the
// shape it has. It runs under w.ddl.
func (w *Writer) relayout(ctx context.Context, t *schema.Table, have shape) (RelayoutResult, error) {
	p := t.Placement()
	res := RelayoutResult{Changed: true, SortingKey: have.sortingKey, PartitionKey: have.partitionKey, Retyped: have.retype}
	if have.retypeErr != nil {
		return res, stop(have.retypeErr) // before anything is built
	}
	if p.OnCluster() {
		return res, &sink.TableError{Table: t.QualifiedName(),
			Err: fmt.Errorf("its sorting key is %s, not its layout's, and a relayout is not supported on a cluster yet", strings.Join(have.sortingKey, ", ")),
			Fix: "start the sink without --relayout (the table keeps its shape; capture's layout must then name the sorting columns it has), or rebuild the table by hand (docs/shaping-tables.md#changing-a-layout)"}
	}
	build, kept, fwd := RelayoutBuildName(t.Name), RelayoutKeptName(t.Name), RelayoutForwardName(t.Name)
	old, err := w.readShape(ctx, t, kept)
	if err != nil {
		return res, err
	}
	if old.exists && !w.relayoutDropOld {
		return res, &sink.TableError{Table: t.QualifiedName(),
			Err: fmt.Errorf("a relayout would keep the old table as %s, which an earlier relayout kept there", p.Local(kept)),
			Fix: fmt.Sprintf("drop it (DROP TABLE %s) once you no longer need it, or relayout with --drop-old (the sink: --relayout-drop-old); then try again", p.Local(kept))}
	}
	// The values of narrowed columns, checked in ClickHouse before
	// anything is built: those the copy would refuse stop the relayout
	// here; later rows are checked as their parts are copied.
	plan := copyPlan{from: t.Name, to: build, key: have.sortingKey, retype: have.retype}
	dry, err := w.checkNarrowed(ctx, t, plan, plan.finalRows(p, "*"))
	if err != nil {
		return res, err
	}
	if dry.refused() > 0 {
		return res, refusedError(t, have.retype, dry, "its rows (those live at FINAL, and its tombstones)")
	}
	if len(dry) > 0 {
		w.log.Info("relayout: checked the values of the narrowed columns; none is refused", "table", t.QualifiedName(), "found", dry.note())
		w.countClamped(t, dry, &res, "in the table before the copy")
	}
	start := time.Now()
	w.log.Info("relayout: building the table in its new shape beside the old one; readers read the old one until the swap",
		"table", t.QualifiedName(), "sorting_key", strings.Join(have.sortingKey, ", "), "new_sorting_key", strings.Join(t.OrderBy, ", "),
		"partition_key", have.partitionKey, "new_partition_key", t.PartitionKey(), "column_types", retypeNote(have.retype))
	exec := func(what, stmt string) error {
		if err := w.conn.Exec(ch.Context(ctx, ch.WithSettings(ch.Settings{"insert_deduplicate": 0})), stmt); err != nil {
			return fmt.Errorf("relayout of %s: %s: %w", t.QualifiedName(), what, err)
		}
		return nil
	}
	// A build an earlier start left before its swap is incomplete, unless
	// another relayout is copying into it: then this one waits (the load
	// is retried) until it swapped. Should the two cross anyway, a step of
	// one fails and is retried against what the other did.
	if busy, err := w.copying(ctx, build); err != nil || busy {
		if err == nil {
			err = fmt.Errorf("relayout of %s: another relayout is copying its rows into %s; waiting until it swaps the tables (run one relayout of a table at a time)", t.QualifiedName(), p.Local(build))
		}
		return res, err
	}
	// The view first: without its target, every insert into the old
	// table would fail.
	if err := exec("drop an unfinished build's forwarding view", "DROP VIEW IF EXISTS "+p.Local(fwd)+" SYNC"); err != nil {
		return res, err
	}
	if err := exec("drop an unfinished build", "DROP TABLE IF EXISTS "+p.Local(build)+" SYNC"); err != nil {
		return res, err
	}
	// Parts made from here on hold rows inserted after the copy's read.
	if err := exec("stop merges of the old table", "SYSTEM STOP MERGES "+p.Local(t.Name)); err != nil {
		return res, err
	}
	seen, err := w.buildBeside(ctx, t, have, exec)
	if err == nil {
		res.Rows, err = w.count(ctx, p.Local(build))
	}
	if err == nil {
		w.log.Info("relayout: copied; copying the parts of inserts that began before the forwarding view", "table", t.QualifiedName(), "rows", res.Rows)
		res.CaughtUp, err = w.copyNewParts(ctx, t, plan, seen, &res)
	}
	if err == nil {
		w.failpoints.At(failpoint.RelayoutCopied)
		w.log.Info("relayout: swapping the tables", "table", t.QualifiedName())
		err = exec("swap the tables", "EXCHANGE TABLES "+p.Local(t.Name)+" AND "+p.Local(build))
	}
	if err != nil {
		// The old table stays in place: nothing may forward into the
		// build any more, and it must merge again, or a sink that gives
		// up the relayout would pile up its parts.
		if derr := w.conn.Exec(context.WithoutCancel(ctx), "DROP VIEW IF EXISTS "+p.Local(fwd)+" SYNC"); derr != nil {
			w.log.Warn("relayout: could not drop the forwarding view; drop it (DROP VIEW) before the table it writes to", "view", p.Local(fwd), "err", derr)
		}
		if serr := w.conn.Exec(context.WithoutCancel(ctx), "SYSTEM START MERGES "+p.Local(t.Name)); serr != nil {
			w.log.Warn("relayout: could not start the old table's merges again; run SYSTEM START MERGES on it", "table", t.QualifiedName(), "err", serr)
		}
		return res, err
	}
	w.failpoints.At(failpoint.RelayoutSwapped)
	// The view now forwards inserts into the new table to the old one:
	// harmless, and no longer needed.
	if err := exec("drop the forwarding view", "DROP VIEW IF EXISTS "+p.Local(fwd)+" SYNC"); err != nil {
		return res, err
	}
	copied, leftOut, err := w.catchUp(ctx, t, copyPlan{from: build, to: t.Name, key: have.sortingKey, retype: have.retype, skipPresent: len(have.retype) > 0}, seen, &res)
	res.CaughtUp += copied
	if err != nil {
		return res, err
	}
	drop := w.relayoutDropOld && leftOut.refused() == 0 // the old table holds the rows left out
	if err := w.keepOld(ctx, t, build, kept, drop); err != nil {
		return res, err
	}
	if !drop {
		res.Old = p.Local(kept)
	}
	if leftOut.refused() > 0 {
		return res, leftOutError(t, leftOut, p.Local(kept), "that sinks loaded into the old table after the relayout's last check before its swap")
	}
	w.log.Info("relayout: the table has its new shape", "table", t.QualifiedName(), "rows", res.Rows, "parts_caught_up", res.CaughtUp,
		"took", time.Since(start).Round(time.Millisecond), "old_table", w.keptNote(p, kept))
	return res, nil
}

// buildBeside creates the new table of t (RelayoutBuildName) and the view
// that forwards inserts into the old one to it, copies the old table's
// rows, and returns the old table's parts whose rows the new table has
// (those listed before the copy read). Inserts that began before the view
// may still run.
func (w *Writer) buildBeside(ctx context.Context, t *schema.Table, have shape, exec func(what, stmt string) error) (map[string]bool, error) {
	p := t.Placement()
	build, fwd := RelayoutBuildName(t.Name), RelayoutForwardName(t.Name)
	// The new types are given to a table made as the old one without a
	// key (engine Null), and the new table is made as that one: ClickHouse
	// changes the type of no sorting or partition column, even in an empty
	// table. ALTER changes the metadata alone, and keeps the column's
	// comment (walhouse's notes), default and codec.
	like := t.Name
	if len(have.retype) > 0 {
		like = relayoutColumnsName(t.Name)
		if err := exec("drop an unfinished build's column table", "DROP TABLE IF EXISTS "+p.Local(like)+" SYNC"); err != nil {
			return nil, err
		}
		if err := exec("create the table of the new column types", "CREATE TABLE "+p.Local(like)+" AS "+p.Local(t.Name)+" ENGINE = Null"); err != nil {
			return nil, err
		}
		for _, r := range have.retype {
			if err := exec("give column "+r.Column+" its new type", "ALTER TABLE "+p.Local(like)+" MODIFY COLUMN "+schema.QuoteIdent(r.Column)+" "+r.To); err != nil {
				return nil, err
			}
		}
	}
	if err := exec("create the new table", t.RelayoutDDL(build, like)); err != nil {
		return nil, err
	}
	if like != t.Name {
		if err := exec("drop the table of the new column types", "DROP TABLE "+p.Local(like)+" SYNC"); err != nil {
			return nil, err
		}
	}
	if err := exec("create the view that forwards inserts to the new table", "CREATE MATERIALIZED VIEW "+p.Local(fwd)+" TO "+p.Local(build)+" AS SELECT "+viewList(have.retype)+" FROM "+fitting(p.Local(t.Name), have.retype, "")); err != nil {
		return nil, err
	}
	before, err := w.activeParts(ctx, t, t.Name)
	if err != nil {
		return nil, err
	}
	w.log.Info("relayout: copying the rows of the old table (FINAL, and every tombstone)", "table", t.QualifiedName(), "parts", len(before))
	copyID := fmt.Sprintf("walhouse-relayout-%s-%d", t.Name, time.Now().UnixNano())
	stop := w.reportCopy(ctx, t, copyID)
	err = w.conn.Exec(ch.Context(ctx, ch.WithQueryID(copyID), ch.WithSettings(ch.Settings{"insert_deduplicate": 0})), copyPlan{from: t.Name, to: build, key: have.sortingKey, retype: have.retype}.final(p))
	stop()
	if err != nil {
		return nil, fmt.Errorf("relayout of %s: copy the rows: %w", t.QualifiedName(), err)
	}
	return before, nil
}

// reportCopy logs the progress of the copy running as query id every
// relayoutReport, until the returned function is called.
func (w *Writer) reportCopy(ctx context.Context, t *schema.Table, id string) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(relayoutReport)
		defer tick.Stop()
		qctx := ch.Context(ctx, ch.WithParameters(ch.Parameters{"id": schema.EscapeParam(id)}))
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			var read, total, written uint64
			err := w.conn.QueryRow(qctx, "SELECT read_rows, total_rows_approx, written_rows FROM system.processes WHERE query_id = {id:String}").Scan(&read, &total, &written)
			if err == nil {
				w.log.Info("relayout: copying", "table", t.QualifiedName(), "rows_read", read, "rows_to_read", total, "rows_written", written)
			}
		}
	}()
	return func() { cancel(); <-done }
}

// relayoutReport is how often a relayout logs the progress of its copy.
const relayoutReport = 5 * time.Second

// count returns the number of rows of table (quoted).
func (w *Writer) count(ctx context.Context, table string) (uint64, error) {
	var n uint64
	if err := w.conn.QueryRow(ctx, "SELECT count() FROM "+table).Scan(&n); err != nil {
		return 0, fmt.Errorf("relayout: count the rows of %s: %w", table, err)
	}
	return n, nil
}

// copyPlan says how a relayout copies rows of one table into another.
type copyPlan struct {
	// from and to are the tables, in the local database.
	from, to string
	// key is from's sorting key, which holds the primary key.
	key []string
	// retype lists the columns converted on the way.
	retype []schema.Retype
	// skipPresent leaves out the rows that to has already (the same key,
	// version and deleted flag). Between the swap and the drop of the forwarding view,
	// the view forwards the inserts into the new table back to the old
	// one, converted to the old types, which may lose digits (DateTime64
	// widened): copied back at the same version, such a row could win
	// over the exact one at FINAL.
	skipPresent bool
	// skipRefused leaves out the rows a narrowed column refuses a value
	// of (Retype.Refused), which the copy would otherwise fail on: after
	// the swap, where failing would not keep the old table in place, the
	// relayout counts them first and reports them (leftOut).
	skipRefused bool
}

// keyTuple is the plan's key as a tuple of quoted columns.
func (c copyPlan) keyTuple() string {
	quoted := make([]string, len(c.key))
	for i, k := range c.key {
		quoted[i] = schema.QuoteIdent(k)
	}
	return "(" + strings.Join(quoted, ", ") + ")"
}

// absent is the condition that leaves out the rows c.to has already
// (c.skipPresent), after AND; "" when every row is copied. The server
// builds the set of c.to's rows in memory; with in, the condition on
// c.from that selects the rows copied (some parts), it holds only c.to's
// rows at or above their lowest version, which the rows written since the
// copy began are: memory grows with the writes during the relayout, not
// with the table. (A resumed relayout, which copies the whole old table,
// has no such bound.)
func (c copyPlan) absent(p schema.Placement, in string) string {
	if !c.skipPresent {
		return ""
	}
	// With the deleted flag: a move's tombstone and row share the key
	// and the version.
	ver := schema.QuoteIdent(schema.VersionColumn)
	kv := strings.TrimSuffix(c.keyTuple(), ")") + ", " + ver + ", " + schema.QuoteIdent(schema.DeletedColumn) + ")"
	since := ""
	if in != "" {
		since = fmt.Sprintf(" WHERE %s >= (SELECT min(%s) FROM %s WHERE %s)", ver, ver, p.Local(c.from), in)
	}
	return fmt.Sprintf(" AND %[1]s NOT IN (SELECT %[1]s FROM %[2]s%[3]s)", kv, p.Local(c.to), since)
}

// list is what c selects: selectList, or viewList when it leaves out the
// rows a narrowed column refuses (those that would fail selectList).
func (c copyPlan) list() string {
	if c.skipRefused {
		return viewList(c.retype)
	}
	return selectList(c.retype)
}

// parts returns the INSERT that copies the rows of the parts named (quoted
// strings) of c.from into c.to.
func (c copyPlan) parts(p schema.Placement, names []string) string {
	in := "_part IN (" + strings.Join(names, ", ") + ")"
	if c.skipRefused { // _part is no column of a subquery
		return fmt.Sprintf("INSERT INTO %s SELECT %s FROM %s WHERE 1%s SETTINGS transform_null_in = 1",
			p.Local(c.to), c.list(), fitting(p.Local(c.from), c.retype, in), c.absent(p, in))
	}
	return fmt.Sprintf("INSERT INTO %s SELECT %s FROM %s WHERE %s%s SETTINGS transform_null_in = 1",
		p.Local(c.to), c.list(), p.Local(c.from), in, c.absent(p, in))
}

// copyNewParts waits until the inserts into t's table that were running
// when the forwarding view was created have ended, then copies the rows
// of the parts of table c.from (t's old table) not in seen into table
// c.to, and adds them to seen. Inserts that began later passed through the
// view.
//
// The values of narrowed columns in those parts are checked first: a
// value the new type refuses stops the relayout, before its swap (the
// forwarding view left such rows out), and the clamped ones are counted
// into res.
func (w *Writer) copyNewParts(ctx context.Context, t *schema.Table, c copyPlan, seen map[string]bool, res *RelayoutResult) (int, error) {
	if err := w.waitInserts(ctx, t); err != nil {
		return 0, err
	}
	parts, err := w.activeParts(ctx, t, c.from)
	if err != nil {
		return 0, err
	}
	var fresh []string
	for name := range parts {
		if !seen[name] {
			fresh = append(fresh, schema.QuoteString(name))
			seen[name] = true
		}
	}
	if len(fresh) == 0 {
		return 0, nil
	}
	slices.Sort(fresh)
	found, err := w.checkNarrowed(ctx, t, c, c.partRows(t.Placement(), fresh))
	if err != nil {
		return 0, err
	}
	if found.refused() > 0 {
		return 0, refusedError(t, c.retype, found, "rows that sinks loaded into the old table during the relayout")
	}
	w.countClamped(t, found, res, "loaded during the copy")
	if err := w.conn.Exec(ch.Context(ctx, ch.WithSettings(ch.Settings{"insert_deduplicate": 0})), c.parts(t.Placement(), fresh)); err != nil {
		return 0, fmt.Errorf("relayout of %s: copy rows inserted during the copy: %w", t.QualifiedName(), err)
	}
	return len(fresh), nil
}

// waitInserts waits until the inserts into t's table running now have
// ended (those that begin later are not waited for).
func (w *Writer) waitInserts(ctx context.Context, t *schema.Table) error {
	qctx := ch.Context(ctx, ch.WithParameters(ch.Parameters{"tbl": schema.EscapeParam(t.Name)}))
	running, err := queryStrings(qctx, w.conn, "SELECT query_id FROM system.processes WHERE query ILIKE 'INSERT%' AND position(query, {tbl:String}) > 0")
	if err != nil {
		return fmt.Errorf("relayout of %s: list the server's running inserts: %w", t.QualifiedName(), err)
	}
	for len(running) > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		ids := make([]string, len(running))
		for i, id := range running {
			ids[i] = schema.QuoteString(id)
		}
		if running, err = queryStrings(ctx, w.conn, "SELECT query_id FROM system.processes WHERE query_id IN ("+strings.Join(ids, ", ")+")"); err != nil {
			return fmt.Errorf("relayout of %s: list the server's running inserts: %w", t.QualifiedName(), err)
		}
	}
	return nil
}

// resumeRelayout finishes a relayout whose swap happened before a crash:
// t's table has its new shape and the old one is still under its building
// name. Its rows are copied again at FINAL: the new table has them or
// newer versions, so the copy changes nothing but what was missing.
func (w *Writer) resumeRelayout(ctx context.Context, t *schema.Table, build shape) (RelayoutResult, error) {
	p := t.Placement()
	res := RelayoutResult{Changed: true, Resumed: true, SortingKey: build.sortingKey, PartitionKey: build.partitionKey, Retyped: build.retype}
	if build.retypeErr != nil {
		return res, stop(build.retypeErr) // the layout changed again since: its columns cannot be copied into the new table
	}
	name, kept, fwd := RelayoutBuildName(t.Name), RelayoutKeptName(t.Name), RelayoutForwardName(t.Name)
	if old, err := w.readShape(ctx, t, kept); err != nil || old.exists && !w.relayoutDropOld {
		if err == nil {
			err = &sink.TableError{Table: t.QualifiedName(),
				Err: fmt.Errorf("a relayout interrupted after its swap would keep the old table, now %s, as %s, which an earlier relayout kept there", p.Local(name), p.Local(kept)),
				Fix: fmt.Sprintf("drop %s once you no longer need it; then try again", p.Local(kept))}
		}
		return res, err
	}
	w.log.Warn("relayout: finishing one interrupted after its swap: copying the old table's rows again", "table", t.QualifiedName(), "old_table", p.Local(name))
	// The view, if the crash left it, forwards from the new table to the
	// old one, which is renamed or dropped below.
	if err := w.conn.Exec(ctx, "DROP VIEW IF EXISTS "+p.Local(fwd)+" SYNC"); err != nil {
		return res, fmt.Errorf("relayout of %s: drop the forwarding view: %w", t.QualifiedName(), err)
	}
	c := copyPlan{from: name, to: t.Name, key: build.sortingKey, retype: build.retype, skipPresent: len(build.retype) > 0}
	// The new table is in place: a value a narrowed column refuses is
	// left out rather than fail the copy again at every run.
	leftOut, err := w.checkNarrowed(ctx, t, c, c.finalRows(p, "*"))
	if err != nil {
		return res, err
	}
	w.countClamped(t, leftOut, &res, "of the old table, copied again")
	c.skipRefused = leftOut.refused() > 0
	if err := w.conn.Exec(ch.Context(ctx, ch.WithSettings(ch.Settings{"insert_deduplicate": 0})), c.final(p)); err != nil {
		return res, fmt.Errorf("relayout of %s: copy the rows of the old table again: %w", t.QualifiedName(), err)
	}
	drop := w.relayoutDropOld && !c.skipRefused
	if err := w.keepOld(ctx, t, name, kept, drop); err != nil {
		return res, err
	}
	if !drop {
		res.Old = p.Local(kept)
	}
	if c.skipRefused {
		return res, leftOutError(t, leftOut, p.Local(kept), "of the old table")
	}
	w.log.Info("relayout: the table has its new shape", "table", t.QualifiedName(), "old_table", w.keptNote(p, kept))
	return res, nil
}

// final returns the INSERT that copies into c.to the rows of c.from that
// are live at FINAL and every tombstone of c.from. (FINAL applies before
// WHERE: the condition of skipPresent never brings an older version back.)
//
// Every tombstone, not only those of keys deleted at FINAL: a tombstone of
// a key live at FINAL is older than the live row (at one sorting key, the
// newest version is what FINAL shows; a move's tombstone is one version
// below the row after it), so wherever the new layout puts it, it hides
// nothing. Picking the newest tombstone of each deleted key took a set of
// every key at FINAL (NOT IN) and one entry per deleted key (LIMIT BY),
// both held in the server's memory: 1.6 GB for 10M rows, so a relayout
// of a table of a few hundred million rows failed for memory. Now the
// copy streams.
func (c copyPlan) final(p schema.Placement) string {
	return fmt.Sprintf("INSERT INTO %s %s SETTINGS transform_null_in = 1", p.Local(c.to), c.finalRows(p, c.list()))
}

// finalRows is the SELECT of final: list of the rows it copies. With
// c.skipRefused, FINAL applies before the refused rows are left out: an
// older version never comes back in their place.
func (c copyPlan) finalRows(p schema.Placement, list string) string {
	del := schema.QuoteIdent(schema.DeletedColumn)
	absent := c.absent(p, "")
	where := ""
	if absent != "" {
		where = " WHERE 1" + absent
	}
	live, tombs := p.Local(c.from)+" FINAL", p.Local(c.from)
	if c.skipRefused {
		live, tombs = fitting(live, c.retype, ""), fitting(tombs, c.retype, del+" = 1")
	}
	return fmt.Sprintf("SELECT %[2]s FROM %[5]s%[3]s UNION ALL SELECT %[2]s FROM %[6]s WHERE %[1]s = 1%[4]s",
		del, list, where, absent, live, tombs)
}

// partRows is the SELECT of every row of the parts named (quoted
// strings) of c.from.
func (c copyPlan) partRows(p schema.Placement, names []string) string {
	return fmt.Sprintf("SELECT * FROM %s WHERE _part IN (%s)", p.Local(c.from), strings.Join(names, ", "))
}

// narrowExamples is how many keys a relayout's check of narrowed columns
// names per column.
const narrowExamples = 5

// checkNarrowed returns the query that counts, in the rows rows selects
// (of c.from's columns), the values of each narrowed column of c.retype
// that its new type refuses (Retype.Refused) and clamps (Clamped), with
// the keys of up to narrowExamples refused rows: one row per column, in
// one pass over the rows. "" when no column is narrowed.
func (c copyPlan) checkNarrowed(rows string) string {
	var cols []string
	key := c.keyTuple()
	for _, r := range c.retype {
		if !r.Narrows() {
			continue
		}
		refused, clamped := orFalse(r.Refused), orFalse(r.Clamped)
		cols = append(cols, fmt.Sprintf("tuple(%s, countIf(%s), countIf(%s), groupArrayIf(%d)(toString(%s), %s))",
			schema.QuoteString(r.Column), refused, clamped, narrowExamples, key, refused))
	}
	if len(cols) == 0 {
		return ""
	}
	return fmt.Sprintf("SELECT n.1, n.2, n.3, n.4 FROM (SELECT [%s] AS a FROM (%s)) ARRAY JOIN a AS n SETTINGS transform_null_in = 1", strings.Join(cols, ", "), rows)
}

// orFalse is cond, or 0 when it is "".
func orFalse(cond string) string {
	if cond == "" {
		return "0"
	}
	return cond
}

// narrowCount is what a check of a narrowed column found.
type narrowCount struct {
	column           string
	refused, clamped uint64
	// examples are the keys of some refused rows.
	examples []string
}

// narrowCounts is what one check found, by column.
type narrowCounts []narrowCount

// refused is the number of values refused in every column.
func (n narrowCounts) refused() (sum uint64) {
	for _, c := range n {
		sum += c.refused
	}
	return sum
}

// note says what n found, for logs and errors: "amount: 3 refused
// (keys ('t1', 4), …), 12 clamped".
func (n narrowCounts) note() string {
	var out []string
	for _, c := range n {
		s := fmt.Sprintf("%s: %d refused", c.column, c.refused)
		if c.refused > 0 {
			s += " (keys " + strings.Join(c.examples, ", ")
			if c.refused > uint64(len(c.examples)) {
				s += ", …"
			}
			s += ")"
		}
		out = append(out, s+fmt.Sprintf(", %d clamped", c.clamped))
	}
	return strings.Join(out, "; ")
}

// checkNarrowed runs c.checkNarrowed over rows; nil when no column is
// narrowed.
func (w *Writer) checkNarrowed(ctx context.Context, t *schema.Table, c copyPlan, rows string) (narrowCounts, error) {
	q := c.checkNarrowed(rows)
	if q == "" {
		return nil, nil
	}
	res, err := w.conn.Query(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("relayout of %s: count the values the narrowed columns cannot hold: %w", t.QualifiedName(), err)
	}
	defer res.Close()
	var out narrowCounts
	for res.Next() {
		var n narrowCount
		if err := res.Scan(&n.column, &n.refused, &n.clamped, &n.examples); err != nil {
			return nil, fmt.Errorf("relayout of %s: count the values the narrowed columns cannot hold: %w", t.QualifiedName(), err)
		}
		out = append(out, n)
	}
	return out, res.Err()
}

// countClamped adds the values n found clamped to the table's and the
// result's counts, and logs them.
func (w *Writer) countClamped(t *schema.Table, n narrowCounts, res *RelayoutResult, when string) {
	for _, c := range n {
		if c.clamped == 0 {
			continue
		}
		res.Clamped += c.clamped
		if w.clamped != nil {
			w.clamped.WithLabelValues(t.Source.Schema+"."+t.Source.Table, c.column).Add(float64(c.clamped))
		}
		w.log.Info("relayout: values beyond the range of the column's new type stored as its bound, as the sink stores them (on_overflow clamp)",
			"table", t.QualifiedName(), "column", c.column, "values", c.clamped, "rows", when)
	}
}

// leftOutError is the error of a relayout that, after its swap, left out
// of the new table the rows (what) whose values the new types of narrowed
// columns refuse (n): the table has its new shape, holding each such
// row's previous version, as when the sink sends a change to the dead
// letters; the rows are in the old table, kept as kept.
func leftOutError(t *schema.Table, n narrowCounts, kept, what string) error {
	return &sink.TableError{Table: t.QualifiedName(),
		Err: fmt.Errorf("the table has its new shape, but rows %s held values the new column types cannot hold exactly (%s); the relayout left them out, as the sink sends such changes to the dead letters (%w): the table holds each such row's previous version, and the rows left out are in the old table, kept as %s", what, n.note(), ErrRowsLeftOut, kept),
		Fix: fmt.Sprintf("change those rows in PostgreSQL (the sink loads their new versions), or copy them by hand from %s once the layout holds them; keep %s until then", kept, kept)}
}

// refusedError is the error of a relayout that found values the new
// types of narrowed columns cannot hold in the rows (what) of the table,
// before its swap: the table is unchanged. rs are the table's retypes.
func refusedError(t *schema.Table, rs []schema.Retype, n narrowCounts, what string) error {
	var changes []string
	for _, r := range rs {
		for _, c := range n {
			if c.column == r.Column && c.refused > 0 {
				changes = append(changes, r.String())
			}
		}
	}
	return &sink.TableError{Table: t.QualifiedName(),
		Err: fmt.Errorf("a relayout would change column %s, and %s hold values the new type cannot hold exactly (%s): the sink would send such a value to the dead letters (more digits before the point than the type holds, under on_overflow dead_letter; more decimals than its scale, under either policy, since nothing is rounded), so the relayout stored nothing and left the table as it was",
			strings.Join(changes, ", column "), what, n.note()),
		Fix: "change those values in PostgreSQL so that they fit (the sink loads the new versions), or set on_overflow: clamp in the column's layout to store values beyond the range as the type's bound, or give the column a type that holds them (a wider Decimal, or String); then run the relayout again (docs/shaping-tables.md#narrowing-a-decimal)"}
}

// activeParts returns the active parts of table name.
func (w *Writer) activeParts(ctx context.Context, t *schema.Table, name string) (map[string]bool, error) {
	qctx := ch.Context(ctx, ch.WithParameters(ch.Parameters{"db": schema.EscapeParam(t.Placement().LocalDatabase()), "tbl": schema.EscapeParam(name)}))
	parts, err := queryStrings(qctx, w.conn, "SELECT name FROM system.parts WHERE database = {db:String} AND table = {tbl:String} AND active")
	if err != nil {
		return nil, fmt.Errorf("relayout of %s: list the parts of %s: %w", t.QualifiedName(), name, err)
	}
	out := make(map[string]bool, len(parts))
	for _, p := range parts {
		out[p] = true
	}
	return out, nil
}

// catchUp copies the rows of the parts the old table, now named c.from,
// got after its parts before were listed, into the new one, until no new
// part came for relayoutQuiet: inserts of other sinks that ran across the
// swap. A row whose value a narrowed column's new type refuses is left
// out (failing now would not keep the old table in place): leftOut says
// which, and the clamped values are counted into res.
func (w *Writer) catchUp(ctx context.Context, t *schema.Table, c copyPlan, before map[string]bool, res *RelayoutResult) (copied int, leftOut narrowCounts, err error) {
	seen := before
	quiet := time.Now().Add(relayoutQuiet)
	for time.Now().Before(quiet) {
		parts, err := w.activeParts(ctx, t, c.from)
		if err != nil {
			return copied, leftOut, err
		}
		var fresh []string
		for name := range parts {
			if !seen[name] {
				fresh = append(fresh, schema.QuoteString(name))
				seen[name] = true
			}
		}
		if len(fresh) > 0 {
			slices.Sort(fresh)
			found, err := w.checkNarrowed(ctx, t, c, c.partRows(t.Placement(), fresh))
			if err != nil {
				return copied, leftOut, err
			}
			w.countClamped(t, found, res, "loaded across the swap")
			cp := c
			if found.refused() > 0 {
				cp.skipRefused = true
				leftOut = append(leftOut, found...)
				w.log.Error("relayout: rows that sinks loaded into the old table after the last check before the swap hold values the new column types refuse; they are left out of the new table (see the error at the end)",
					"table", t.QualifiedName(), "found", found.note())
			}
			if err := w.conn.Exec(ch.Context(ctx, ch.WithSettings(ch.Settings{"insert_deduplicate": 0})), cp.parts(t.Placement(), fresh)); err != nil {
				return copied, leftOut, fmt.Errorf("relayout of %s: copy rows inserted during the relayout: %w", t.QualifiedName(), err)
			}
			copied += len(fresh)
			quiet = time.Now().Add(relayoutQuiet)
			continue
		}
		select {
		case <-ctx.Done():
			return copied, leftOut, ctx.Err()
		case <-time.After(relayoutQuiet / 4):
		}
	}
	return copied, leftOut, nil
}

// copying reports whether an INSERT into table name of the local
// database runs on the server.
func (w *Writer) copying(ctx context.Context, name string) (bool, error) {
	qctx := ch.Context(ctx, ch.WithParameters(ch.Parameters{"tbl": schema.EscapeParam(name)}))
	n, err := queryStrings(qctx, w.conn, "SELECT query_id FROM system.processes WHERE query ILIKE 'INSERT%' AND position(query, {tbl:String}) > 0")
	if err != nil {
		return false, fmt.Errorf("relayout: list the server's running inserts: %w", err)
	}
	return len(n) > 0, nil
}

// relayoutQuiet is how long the old table must get no new part before a
// relayout is done with it: longer than an insert of another sink that
// began before the swap takes to finish.
const relayoutQuiet = 2 * time.Second

// keepOld renames the old table, under its building name, to kept, or
// drops it (drop).
func (w *Writer) keepOld(ctx context.Context, t *schema.Table, build, kept string, drop bool) error {
	p := t.Placement()
	stmt := "RENAME TABLE " + p.Local(build) + " TO " + p.Local(kept)
	if drop {
		stmt = "DROP TABLE " + p.Local(build) + " SYNC"
	}
	if err := w.conn.Exec(ctx, stmt); err != nil {
		return fmt.Errorf("relayout of %s: %s: %w", t.QualifiedName(), stmt, err)
	}
	return nil
}

// keptNote says where the old table is, for the log.
func (w *Writer) keptNote(p schema.Placement, kept string) string {
	if w.relayoutDropOld {
		return "dropped"
	}
	return p.Local(kept) + " (kept: erasure and cleanup do not reach it; DROP TABLE it once the new table is checked, e.g. by walhouse verify)"
}

// reshape gives t's existing table its layout when WithRelayout asked for
// it, and finishes a relayout a crash interrupted; otherwise it warns of a
// table whose shape is not its layout's.
func (w *Writer) reshape(ctx context.Context, t *schema.Table) error {
	have, err := w.readShape(ctx, t, t.Name)
	if err != nil {
		return err
	}
	_, err = w.reshapeFrom(ctx, t, have, w.relayoutOn)
	if errors.Is(err, ErrRowsLeftOut) {
		// The table has its shape: the sink loads it on, and the
		// operator fixes the rows the error names.
		w.log.Error("relayout: the table has its new shape, but rows were left out of it", "table", t.QualifiedName(), "err", err)
		return nil
	}
	return err
}

// reshapeFrom is reshape of a table whose shape is have; relayout says
// whether to rebuild it (or only warn).
func (w *Writer) reshapeFrom(ctx context.Context, t *schema.Table, have shape, relayout bool) (RelayoutResult, error) {
	build, err := w.readShape(ctx, t, RelayoutBuildName(t.Name))
	if err != nil {
		return RelayoutResult{}, err
	}
	if sameShape(have, t) {
		if build.exists && !sameShape(build, t) {
			return w.resumeRelayout(ctx, t, build)
		}
		return RelayoutResult{SortingKey: have.sortingKey, PartitionKey: have.partitionKey}, nil
	}
	if !relayout {
		// The sink's layout may be the stale one: after walhouse relayout
		// (or another sink's --relayout) gave the table a newer layout,
		// sinks that still have the old file meet it here. Their fix is
		// the new file, not a relayout, which would change the table
		// back, nor the error's drop and copy.
		if have.retypeErr != nil {
			w.log.Warn("a column's type is not the one this sink's layout gives, and a relayout cannot change it without losing values; the sink loads the column in the type it has. If walhouse relayout (or a sink with --relayout) gave the table a newer layout, restart this sink with that layout; otherwise see the error's fix",
				"table", t.QualifiedName(), "err", have.retypeErr)
		}
		if len(have.retype) > 0 || !sameShape(shape{sortingKey: have.sortingKey, partitionKey: have.partitionKey}, t) {
			w.log.Warn("the table's sorting key, partitions or column types are not those this sink's layout gives; the sink loads the table as it is. If walhouse relayout (or a sink with --relayout) gave the table a newer layout, restart this sink with that layout (a relayout with this one would change the table back). "+
				"Otherwise capture's --layout must name the sorting columns the table has, or FINAL may keep moved rows twice; run walhouse relayout on it (or start the sink with --relayout) to rebuild it in its layout (docs/shaping-tables.md#changing-a-layout)",
				"table", t.QualifiedName(), "sorting_key", strings.Join(have.sortingKey, ", "), "layout", strings.Join(t.OrderBy, ", "),
				"partition_key", have.partitionKey, "layout_partition_key", t.PartitionKey(), "column_types", retypeNote(have.retype))
		}
		return RelayoutResult{}, nil
	}
	return w.relayout(ctx, t, have)
}

// Relayout gives the ClickHouse table of source table src, whose records
// have schema s (the newest, as the sink reads it from the schema
// registry), the shape of its layout or the default shape, now: what a
// sink started with WithRelayout does when it first loads the table, for
// walhouse relayout. Sinks may keep loading the table meanwhile (see the
// top of this file). It finishes a relayout a crash interrupted, and
// changes nothing when the table has its shape (Changed false). The old
// table is kept unless WithRelayout said to drop it. It returns an error
// wrapping ErrNoTable when ClickHouse has no such table.
func (w *Writer) Relayout(ctx context.Context, src record.Source, s record.Schema) (RelayoutResult, error) {
	t, err := schema.NewTable(src, s.TenantColumn, s.Columns, w.opts)
	if err != nil {
		return RelayoutResult{}, err
	}
	w.ddl.Lock()
	defer w.ddl.Unlock()
	have, err := w.readShape(ctx, t, t.Name)
	if err != nil {
		return RelayoutResult{}, err
	}
	if !have.exists {
		return RelayoutResult{}, fmt.Errorf("%w: %s.%s has no table %s: the sink creates it when it first loads a change of the table; check --database and the table's name", ErrNoTable, src.Schema, src.Table, t.QualifiedName())
	}
	res, err := w.reshapeFrom(ctx, t, have, true)
	res.NewSortingKey, res.NewPartitionKey = t.OrderBy, t.PartitionKey()
	if err != nil {
		return res, err
	}
	now, err := w.readShape(ctx, t, t.Name)
	if err != nil {
		return res, err
	}
	if !sameShape(now, t) {
		return res, fmt.Errorf("relayout of %s: the table's sorting key is %s, its partition key %q and its column types to change %s after the relayout, not its layout's %s and %q; run walhouse relayout again", t.QualifiedName(), strings.Join(now.sortingKey, ", "), now.partitionKey, retypeNote(now.retype), strings.Join(t.OrderBy, ", "), t.PartitionKey())
	}
	return res, nil
}
