package clickhouse

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"

	"github.com/walhouse/walhouse/schema"
	"github.com/walhouse/walhouse/sink"
)

// A relayout gives a table ClickHouse already has the sorting key and
// partitions of its layout (docs/shaping-tables.md#changing-a-layout),
// when the sink starts with WithRelayout and meets the table first. CREATE
// TABLE IF NOT EXISTS keeps the shape a table was created with, and
// ReplacingMergeTree's shape cannot be altered in place.
//
// The new table is built beside the old one from the rows ClickHouse has,
// not from PostgreSQL: every row that is live at FINAL, at its version,
// and the newest tombstone of every key that is deleted at FINAL (so a
// stale version replayed later, a dead letter say, cannot bring the row
// back). Versions collapse by the old sorting key there, which holds the
// primary key, so that is one row per row of PostgreSQL whatever the new
// key is. Then EXCHANGE TABLES swaps the two atomically: a reader sees the
// old table, then the new one, never a missing or doubled row. Rows other
// sinks of the group inserted into the old table meanwhile (their parts
// are new: merges of the old table are stopped first) are copied after the
// swap, as they were inserted: capture's layout moves every row whose new
// sorting columns changed, so they land at the new key. The old table is
// kept under RelayoutKeptName, outside what the query API, erasure and
// cleanup see, unless WithRelayout said to drop it.
//
// This sink loads nothing into the table meanwhile (the table is opened
// under Writer.ddl), so the table's lastSyncAt stays where it was. A crash
// before the swap leaves the old table as it was and the half-built one,
// which the next start drops and builds again; a crash after it leaves
// the new table in place and the old one under its building name, whose
// rows the next start copies again (at FINAL, so the newer versions the
// new table has win) before keeping it.

// RelayoutBuildName is the name of the table a relayout of table builds.
func RelayoutBuildName(table string) string { return schema.ReservedPrefix + "_relayout_" + table }

// RelayoutKeptName is the name a relayout of table keeps the old table
// under, until an operator drops it.
func RelayoutKeptName(table string) string { return schema.ReservedPrefix + "_old_" + table }

// WithRelayout makes the Writer rebuild a table whose sorting key or
// partitions differ from its layout (or the default shape), the first
// time it loads into the table; dropOld drops the old table once the new
// one is in place, instead of keeping it (RelayoutKeptName).
func WithRelayout(dropOld bool) WriterOption {
	return func(w *Writer) {
		w.relayoutOn = true
		w.relayoutDropOld = dropOld
	}
}

// shape is a table's sorting key and partition key as ClickHouse says.
type shape struct {
	exists       bool
	sortingKey   []string
	partitionKey string
}

// readShape reads the shape of table name of the local database.
func (w *Writer) readShape(ctx context.Context, t *schema.Table, name string) (shape, error) {
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

// sameShape reports whether s is t's layout: the same sorting key and
// the same partition expression (compared without blanks and quotes,
// which ClickHouse writes its own way).
func sameShape(s shape, t *schema.Table) bool {
	norm := func(e string) string {
		return strings.NewReplacer(" ", "", "`", "", "\n", "").Replace(e)
	}
	return slices.Equal(s.sortingKey, t.OrderBy) && norm(s.partitionKey) == norm(t.PartitionKey())
}

// relayout rebuilds t's table in the shape of t (see above); have is the
// shape it has. It runs under w.ddl.
func (w *Writer) relayout(ctx context.Context, t *schema.Table, have shape) error {
	p := t.Placement()
	if p.OnCluster() {
		return &sink.TableError{Table: t.QualifiedName(),
			Err: fmt.Errorf("its sorting key is %s, not its layout's, and a relayout is not supported on a cluster yet", strings.Join(have.sortingKey, ", ")),
			Fix: "start the sink without --relayout (the table keeps its shape; capture's layout must then name the sorting columns it has), or rebuild the table by hand (docs/shaping-tables.md#changing-a-layout)"}
	}
	build, kept := RelayoutBuildName(t.Name), RelayoutKeptName(t.Name)
	old, err := w.readShape(ctx, t, kept)
	if err != nil {
		return err
	}
	if old.exists && !w.relayoutDropOld {
		return &sink.TableError{Table: t.QualifiedName(),
			Err: fmt.Errorf("a relayout would keep the old table as %s, which an earlier relayout kept there", p.Local(kept)),
			Fix: fmt.Sprintf("drop it (DROP TABLE %s) once you no longer need it, or start the sink with --relayout-drop-old; then restart the sink", p.Local(kept))}
	}
	start := time.Now()
	w.log.Info("relayout: building the table in its new shape beside the old one; loading into it waits meanwhile, readers read the old one",
		"table", t.QualifiedName(), "sorting_key", strings.Join(have.sortingKey, ", "), "new_sorting_key", strings.Join(t.OrderBy, ", "),
		"partition_key", have.partitionKey, "new_partition_key", t.PartitionKey())
	exec := func(what, stmt string) error {
		if err := w.conn.Exec(ch.Context(ctx, ch.WithSettings(ch.Settings{"insert_deduplicate": 0})), stmt); err != nil {
			return fmt.Errorf("relayout of %s: %s: %w", t.QualifiedName(), what, err)
		}
		return nil
	}
	// A build an earlier start left before its swap is incomplete, unless
	// another sink of the group, also started with --relayout, is copying
	// into it: then this one waits (the load is retried) until it swapped.
	// Should the two cross anyway, a step of one fails and is retried
	// against what the other did.
	if busy, err := w.copying(ctx, build); err != nil || busy {
		if err == nil {
			err = fmt.Errorf("relayout of %s: another sink is copying its rows into %s; waiting until it swaps the tables (start --relayout on one sink of a group)", t.QualifiedName(), p.Local(build))
		}
		return err
	}
	if err := exec("drop an unfinished build", "DROP TABLE IF EXISTS "+p.Local(build)+" SYNC"); err != nil {
		return err
	}
	// Parts made from here on hold rows inserted after the copy's read.
	if err := exec("stop merges of the old table", "SYSTEM STOP MERGES "+p.Local(t.Name)); err != nil {
		return err
	}
	before, err := w.activeParts(ctx, t, t.Name)
	if err == nil {
		err = exec("create the new table", t.RelayoutDDL(build, t.Name))
	}
	if err == nil {
		err = exec("copy the rows", copyFinal(p.Local(build), p.Local(t.Name), have.sortingKey))
	}
	if err == nil {
		err = exec("swap the tables", "EXCHANGE TABLES "+p.Local(t.Name)+" AND "+p.Local(build))
	}
	if err != nil {
		// The old table stays in place: it must merge again, or a sink
		// that gives up the relayout would pile up its parts.
		if serr := w.conn.Exec(context.WithoutCancel(ctx), "SYSTEM START MERGES "+p.Local(t.Name)); serr != nil {
			w.log.Warn("relayout: could not start the old table's merges again; run SYSTEM START MERGES on it", "table", t.QualifiedName(), "err", serr)
		}
		return err
	}
	copied, err := w.catchUp(ctx, t, build, before)
	if err != nil {
		return err
	}
	if err := w.keepOld(ctx, t, build, kept); err != nil {
		return err
	}
	w.log.Info("relayout: the table has its new shape", "table", t.QualifiedName(), "rows_copied_after_swap", copied,
		"took", time.Since(start).Round(time.Millisecond), "old_table", w.keptNote(p, kept))
	return nil
}

// resumeRelayout finishes a relayout whose swap happened before a crash:
// t's table has its new shape and the old one is still under its building
// name. Its rows are copied again at FINAL: the new table has them or
// newer versions, so the copy changes nothing but what was missing.
func (w *Writer) resumeRelayout(ctx context.Context, t *schema.Table, build shape) error {
	p := t.Placement()
	name, kept := RelayoutBuildName(t.Name), RelayoutKeptName(t.Name)
	if old, err := w.readShape(ctx, t, kept); err != nil || old.exists && !w.relayoutDropOld {
		if err == nil {
			err = &sink.TableError{Table: t.QualifiedName(),
				Err: fmt.Errorf("a relayout interrupted after its swap would keep the old table, now %s, as %s, which an earlier relayout kept there", p.Local(name), p.Local(kept)),
				Fix: fmt.Sprintf("drop %s once you no longer need it; then restart the sink", p.Local(kept))}
		}
		return err
	}
	w.log.Warn("relayout: finishing one interrupted after its swap: copying the old table's rows again", "table", t.QualifiedName(), "old_table", p.Local(name))
	stmt := copyFinal(p.Local(t.Name), p.Local(name), build.sortingKey)
	if err := w.conn.Exec(ch.Context(ctx, ch.WithSettings(ch.Settings{"insert_deduplicate": 0})), stmt); err != nil {
		return fmt.Errorf("relayout of %s: copy the rows of the old table again: %w", t.QualifiedName(), err)
	}
	if err := w.keepOld(ctx, t, name, kept); err != nil {
		return err
	}
	w.log.Info("relayout: the table has its new shape", "table", t.QualifiedName(), "old_table", w.keptNote(p, kept))
	return nil
}

// copyFinal returns the INSERT that copies into dst the rows of src that
// are live at FINAL and the newest tombstone of each key of src (its
// sorting key, key) that is deleted at FINAL.
func copyFinal(dst, src string, key []string) string {
	quoted := make([]string, len(key))
	for i, c := range key {
		quoted[i] = schema.QuoteIdent(c)
	}
	k := "(" + strings.Join(quoted, ", ") + ")"
	del, ver := schema.QuoteIdent(schema.DeletedColumn), schema.QuoteIdent(schema.VersionColumn)
	return fmt.Sprintf("INSERT INTO %[1]s SELECT * FROM %[2]s FINAL "+
		"UNION ALL SELECT * FROM %[2]s WHERE %[3]s = 1 AND %[5]s NOT IN (SELECT %[5]s FROM %[2]s FINAL) ORDER BY %[4]s DESC LIMIT 1 BY %[5]s "+
		"SETTINGS transform_null_in = 1", dst, src, del, ver, k)
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

// catchUp copies the rows of the parts the old table, now named old, got
// after its parts before were listed, until no new part came for
// relayoutQuiet: inserts of other sinks that ran across the swap.
func (w *Writer) catchUp(ctx context.Context, t *schema.Table, old string, before map[string]bool) (copied int, err error) {
	p := t.Placement()
	seen := before
	quiet := time.Now().Add(relayoutQuiet)
	for time.Now().Before(quiet) {
		parts, err := w.activeParts(ctx, t, old)
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
			stmt := fmt.Sprintf("INSERT INTO %s SELECT * FROM %s WHERE _part IN (%s)", p.Local(t.Name), p.Local(old), strings.Join(fresh, ", "))
			if err := w.conn.Exec(ch.Context(ctx, ch.WithSettings(ch.Settings{"insert_deduplicate": 0})), stmt); err != nil {
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
	build, err := w.readShape(ctx, t, RelayoutBuildName(t.Name))
	if err != nil {
		return err
	}
	if sameShape(have, t) {
		if build.exists && !sameShape(build, t) {
			return w.resumeRelayout(ctx, t, build)
		}
		return nil
	}
	if !w.relayoutOn {
		w.log.Warn("the table keeps the sorting key it was created with, not the one its layout gives; capture's --layout must name the sorting columns the table has, or FINAL may keep moved rows twice. Start the sink with --relayout to rebuild it in its layout (docs/shaping-tables.md#changing-a-layout)",
			"table", t.QualifiedName(), "sorting_key", strings.Join(have.sortingKey, ", "), "layout", strings.Join(t.OrderBy, ", "),
			"partition_key", have.partitionKey, "layout_partition_key", t.PartitionKey())
		return nil
	}
	return w.relayout(ctx, t, have)
}
