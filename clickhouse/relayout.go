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
// A column type change is made only when every value converts exactly;
// any other is refused before anything is built. The new table gets the
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
// and the newest tombstone of every key that is deleted at FINAL (so a
// stale version replayed later, a dead letter say, cannot bring the row
// back). Versions collapse by the old sorting key there, which holds the
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

// selectList is what a relayout selects of the old table to insert into
// the new one: every column, those of rs converted to their new type.
func selectList(rs []schema.Retype) string {
	if len(rs) == 0 {
		return "*"
	}
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.Expr + " AS " + schema.QuoteIdent(r.Column)
	}
	return "* REPLACE (" + strings.Join(out, ", ") + ")"
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
		res.CaughtUp, err = w.copyNewParts(ctx, t, copyPlan{from: t.Name, to: build, key: have.sortingKey, retype: have.retype}, seen)
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
	copied, err := w.catchUp(ctx, t, copyPlan{from: build, to: t.Name, key: have.sortingKey, retype: have.retype, skipPresent: len(have.retype) > 0}, seen)
	res.CaughtUp += copied
	if err != nil {
		return res, err
	}
	if err := w.keepOld(ctx, t, build, kept); err != nil {
		return res, err
	}
	if !w.relayoutDropOld {
		res.Old = p.Local(kept)
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
	if err := exec("create the view that forwards inserts to the new table", "CREATE MATERIALIZED VIEW "+p.Local(fwd)+" TO "+p.Local(build)+" AS SELECT "+selectList(have.retype)+" FROM "+p.Local(t.Name)); err != nil {
		return nil, err
	}
	before, err := w.activeParts(ctx, t, t.Name)
	if err != nil {
		return nil, err
	}
	w.log.Info("relayout: copying the rows of the old table (FINAL, and the newest tombstones)", "table", t.QualifiedName(), "parts", len(before))
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
// (c.skipPresent), after AND; "" when every row is copied.
func (c copyPlan) absent(p schema.Placement) string {
	if !c.skipPresent {
		return ""
	}
	// With the deleted flag: a move's tombstone and row share the key and
	// the version.
	kv := strings.TrimSuffix(c.keyTuple(), ")") + ", " + schema.QuoteIdent(schema.VersionColumn) + ", " + schema.QuoteIdent(schema.DeletedColumn) + ")"
	return fmt.Sprintf(" AND %[1]s NOT IN (SELECT %[1]s FROM %[2]s)", kv, p.Local(c.to))
}

// parts returns the INSERT that copies the rows of the parts named (quoted
// strings) of c.from into c.to.
func (c copyPlan) parts(p schema.Placement, names []string) string {
	return fmt.Sprintf("INSERT INTO %s SELECT %s FROM %s WHERE _part IN (%s)%s SETTINGS transform_null_in = 1",
		p.Local(c.to), selectList(c.retype), p.Local(c.from), strings.Join(names, ", "), c.absent(p))
}

// copyNewParts waits until the inserts into t's table that were running
// when the forwarding view was created have ended, then copies the rows
// of the parts of table c.from (t's old table) not in seen into table
// c.to, and adds them to seen. Inserts that began later passed through the
// view.
func (w *Writer) copyNewParts(ctx context.Context, t *schema.Table, c copyPlan, seen map[string]bool) (int, error) {
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
	stmt := copyPlan{from: name, to: t.Name, key: build.sortingKey, retype: build.retype, skipPresent: len(build.retype) > 0}.final(p)
	if err := w.conn.Exec(ch.Context(ctx, ch.WithSettings(ch.Settings{"insert_deduplicate": 0})), stmt); err != nil {
		return res, fmt.Errorf("relayout of %s: copy the rows of the old table again: %w", t.QualifiedName(), err)
	}
	if err := w.keepOld(ctx, t, name, kept); err != nil {
		return res, err
	}
	if !w.relayoutDropOld {
		res.Old = p.Local(kept)
	}
	w.log.Info("relayout: the table has its new shape", "table", t.QualifiedName(), "old_table", w.keptNote(p, kept))
	return res, nil
}

// final returns the INSERT that copies into c.to the rows of c.from that
// are live at FINAL and the newest tombstone of each key of c.from that
// is deleted at FINAL. (FINAL applies before WHERE: the condition of
// skipPresent never brings an older version back.)
func (c copyPlan) final(p schema.Placement) string {
	del, ver := schema.QuoteIdent(schema.DeletedColumn), schema.QuoteIdent(schema.VersionColumn)
	absent := c.absent(p)
	where := ""
	if absent != "" {
		where = " WHERE 1" + absent
	}
	return fmt.Sprintf("INSERT INTO %[1]s SELECT %[6]s FROM %[2]s FINAL%[7]s "+
		"UNION ALL SELECT %[6]s FROM %[2]s WHERE %[3]s = 1 AND %[5]s NOT IN (SELECT %[5]s FROM %[2]s FINAL)%[8]s ORDER BY %[4]s DESC LIMIT 1 BY %[5]s "+
		"SETTINGS transform_null_in = 1", p.Local(c.to), p.Local(c.from), del, ver, c.keyTuple(), selectList(c.retype), where, absent)
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
// swap.
func (w *Writer) catchUp(ctx context.Context, t *schema.Table, c copyPlan, before map[string]bool) (copied int, err error) {
	seen := before
	quiet := time.Now().Add(relayoutQuiet)
	for time.Now().Before(quiet) {
		parts, err := w.activeParts(ctx, t, c.from)
		if err != nil {
			return copied, err
		}
		var fresh []string
		for name := range parts {
			if !seen[name] {
				fresh = append(fresh, schema.QuoteString(name))
				seen[name] = true
			}
		}
		if len(fresh) > 0 {
			if err := w.conn.Exec(ch.Context(ctx, ch.WithSettings(ch.Settings{"insert_deduplicate": 0})), c.parts(t.Placement(), fresh)); err != nil {
				return copied, fmt.Errorf("relayout of %s: copy rows inserted during the relayout: %w", t.QualifiedName(), err)
			}
			copied += len(fresh)
			quiet = time.Now().Add(relayoutQuiet)
			continue
		}
		select {
		case <-ctx.Done():
			return copied, ctx.Err()
		case <-time.After(relayoutQuiet / 4):
		}
	}
	return copied, nil
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
// drops it when told to.
func (w *Writer) keepOld(ctx context.Context, t *schema.Table, build, kept string) error {
	p := t.Placement()
	stmt := "RENAME TABLE " + p.Local(build) + " TO " + p.Local(kept)
	if w.relayoutDropOld {
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
