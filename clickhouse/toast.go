package clickhouse

import (
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"

	"github.com/walhouse/walhouse/internal/failpoint"
	"github.com/walhouse/walhouse/record"
	"github.com/walhouse/walhouse/schema"
	"github.com/walhouse/walhouse/sink"
)

// DefaultMaxReadBackBytes bounds the stored values one insert reads back
// for unchanged TOAST values (see WithMaxReadBackBytes).
const DefaultMaxReadBackBytes = 64 << 20

// lookupKeys and lookupKeyBytes bound the rows one read-back query names
// and the text of their key values, which travel as query parameters (in
// the URL over HTTP: under a server's http_max_uri_size, 1 MiB by
// default, even a text of quotes, which keyText's escaping doubles and
// the URL's triples). Each query reads the granules
// its keys fall in whole, so fewer, larger queries read less.
const (
	lookupKeys     = 2000
	lookupKeyBytes = 100 << 10
)

// filled holds values recovered for unchanged TOAST columns: record index →
// column index → value in the client's Go type.
type filled map[int]map[int]any

func (f filled) set(rec, col int, v any) {
	if f[rec] == nil {
		f[rec] = map[int]any{}
	}
	f[rec][col] = v
}

// Unchanged TOAST values (pgoutput's 'u' marker) are the row's previous
// values: taken from an earlier record of the same row in the insert or,
// failing that, from the row as ClickHouse has it (FINAL). Never writing
// NULL or a placeholder over them is the point; REPLICA IDENTITY FULL is
// not needed.
//
// What ClickHouse holds can be far larger than the records that name it:
// an update of many rows that leaves their large values alone is a batch
// of small records whose values are not. So the stored values are sized
// before they are read (byteSize, in ClickHouse), and an insert whose
// values pass the writer's bound is cut into pieces that each read back
// at most that much (one row at least). The cut depends only on the
// records and the stored sizes, so a retry cuts the same pieces and names
// them with the same tokens. A retry can size differently only where a
// piece that landed holds a newer version of a row that an earlier record
// reads back: its pieces may then insert rows again under other tokens,
// with the versions they had, which FINAL collapses, and such an earlier
// record's row takes the newer version's value, which FINAL never shows
// as that version supersedes it.

// unchanged plans where the unchanged values of an insert's records come
// from: earlier records of the insert (copied into the records at once)
// or lookups of stored rows.
type unchanged struct {
	lookups []*lookup
	// uses lists, by record, the lookups its columns take values from.
	uses map[int][]use
	// moves are the records no piece starts at: updates that changed the
	// key, which follow the delete of the old key (see pieces).
	moves map[int]bool
}

// use is a column of a record that takes its value from a lookup.
type use struct {
	col int
	l   *lookup
}

// lookup reads the stored values of some columns of one row.
type lookup struct {
	rec    *record.Record // whose tenant the row has
	key    []record.Value // the row's key values, among values aligned with the table's columns
	before uint64         // 0: the row's latest live version (FINAL); else its latest live version below
	cols   []int          // the columns to read, ascending
	size   int64          // the stored values' bytes, once sized
	values []any          // the stored values aligned with cols, while a piece holds them
	found  bool           // the row was found when values were read
	// refused is ClickHouse's refusal of every query that read the
	// lookup (see readRefusing): its records fail, set aside in the dead
	// letters, rather than the insert retrying a query that fails again.
	refused error
}

// planUnchanged resolves the unchanged values of recs from earlier records
// where it can and plans lookups for the rest, sized.
func (w *Writer) planUnchanged(ctx context.Context, tg *target, recs []*record.Record) (*unchanged, error) {
	if !slices.ContainsFunc(recs, hasUnchanged) {
		return nil, nil // the common case (copies, inserts): no row keys to track
	}
	t := tg.table
	u := &unchanged{uses: map[int][]use{}, moves: map[int]bool{}}
	last := map[string]int{}        // row key → index of its latest record so far
	live := map[string]int{}        // row key → index of its latest insert or update so far
	planned := map[string]*lookup{} // lookup key (row, before, columns) → its lookup
	for i, r := range recs {
		k := rowKey(t, r, r.Values)
		prev, seen := last[k]
		// An update that changed the key takes its unchanged values from
		// the old key's row: its last live version in this insert, else
		// in ClickHouse below the update's version (capture's delete of
		// the old key, possibly in another partition, is not it). Capture
		// fills such values from the source row, so this is for a row
		// gone from the source by then, whose later move or delete
		// replaces what is read here.
		lookupVals, before := r.Values, uint64(0)
		if r.OldKey != nil && r.Op == record.Update {
			lookupVals, before = keyValues(t, r), r.Version
			prev, seen = live[rowKey(t, r, lookupVals)]
			u.moves[i] = true
		}
		last[k] = i
		if r.Op != record.Delete {
			live[k] = i
		}
		var missing []int
		for ci, v := range r.Values {
			if !v.Unchanged {
				continue
			}
			if seen {
				if pv := recs[prev].Values[ci]; !pv.Unchanged {
					r.Values[ci] = pv
					continue
				}
				if l := u.source(prev, ci); l != nil {
					u.uses[i] = append(u.uses[i], use{ci, l})
					continue
				}
			}
			missing = append(missing, ci)
		}
		if len(missing) == 0 {
			continue
		}
		id := rowKey(t, r, lookupVals) + "\x00" + strconv.FormatUint(before, 10) + "\x00" + fmt.Sprint(missing)
		l := planned[id]
		if l == nil {
			l = &lookup{rec: r, key: lookupVals, before: before, cols: missing}
			planned[id] = l
			u.lookups = append(u.lookups, l)
		}
		for _, ci := range missing {
			u.uses[i] = append(u.uses[i], use{ci, l})
		}
	}
	if err := w.readLookups(ctx, tg, u.lookups, true); err != nil {
		return nil, err
	}
	if re := u.refusedRecords(tg, recs, 0, len(recs)); re != nil {
		return nil, re
	}
	return u, nil
}

// refusedRecords is the RecordError that names every record of recs from
// lo to hi-1 that takes a value from a lookup ClickHouse refused to read
// (lookup.refused), or nil when there is none. The cut does not depend on
// what was read before, so a retry of the insert names the same records.
func (u *unchanged) refusedRecords(tg *target, recs []*record.Record, lo, hi int) *sink.RecordError {
	var out *sink.RecordError
	for i := lo; i < hi; i++ {
		for _, x := range u.uses[i] {
			if x.l.refused == nil {
				continue
			}
			f := sink.RecordError{Index: i, Err: fmt.Errorf("%w: record %s: ClickHouse refused the query that reads back the unchanged TOAST values of its row from %s: %v; "+
				"the query is walhouse's, so report this error; the record waits in the dead letters: replay it (walhouse dlq replay) once a walhouse that reads such rows runs, "+
				"or update the row's large columns in PostgreSQL so that capture sends their values", sink.ErrPermanent, recs[i].EventID, tg.table.QualifiedName(), x.l.refused)}
			if out == nil {
				out = &f
			} else {
				out.More = append(out.More, f)
			}
			break
		}
	}
	return out
}

// source returns the lookup record i's column ci takes its value from, or
// nil.
func (u *unchanged) source(i, ci int) *lookup {
	for _, x := range u.uses[i] {
		if x.col == ci {
			return x.l
		}
	}
	return nil
}

// piece is a run of an insert's records, lo to hi-1.
type piece struct{ lo, hi int }

// pieces cuts n records into runs whose lookups read at most limit bytes,
// each with one record at least. A piece never starts at an update that
// changed the key: the delete of the old key before it (capture sends the
// two together) would otherwise land first, and a merge of the old key's
// row with that tombstone could take the values the update reads back.
func (u *unchanged) pieces(n int, limit int64) []piece {
	if u == nil {
		return []piece{{0, n}}
	}
	var (
		out   []piece
		lo    int
		bytes int64
		held  = map[*lookup]bool{}
	)
	// cost is what record i adds to a piece holding held's values.
	cost := func(i int) int64 {
		var c int64
		var counted []*lookup
		for _, x := range u.uses[i] {
			if !held[x.l] && !slices.Contains(counted, x.l) {
				c += x.l.size
				counted = append(counted, x.l)
			}
		}
		return c
	}
	for i := range n {
		c := cost(i)
		if i > lo && bytes+c > limit && !u.moves[i] {
			out = append(out, piece{lo, i})
			lo, bytes = i, 0
			clear(held)
			c = cost(i)
		}
		for _, x := range u.uses[i] {
			held[x.l] = true
		}
		bytes += c
	}
	return append(out, piece{lo, n})
}

// fill reads the values of the lookups that records p.lo..p.hi-1 use and
// returns them by record (indexes relative to p.lo). release forgets them.
func (w *Writer) fill(ctx context.Context, tg *target, u *unchanged, recs []*record.Record, p piece) (filled, error) {
	if u == nil {
		return nil, nil
	}
	var need []*lookup
	seen := map[*lookup]bool{}
	for i := p.lo; i < p.hi; i++ {
		for _, x := range u.uses[i] {
			if !seen[x.l] {
				seen[x.l] = true
				need = append(need, x.l)
			}
		}
	}
	if err := w.readLookups(ctx, tg, need, false); err != nil {
		return nil, err
	}
	if re := u.refusedRecords(tg, recs, p.lo, p.hi); re != nil {
		return nil, re
	}
	out := filled{}
	var absent []string
	missing := 0
	for i := p.lo; i < p.hi; i++ {
		ownKeyOut := ownKeyOutOfRange(tg, recs[i])
		for _, x := range u.uses[i] {
			if !x.l.found {
				out.set(i-p.lo, x.col, nil)
				if ownKeyOut {
					continue // its record goes to the dead letters for its key: nothing is stored
				}
				if len(absent) < 3 {
					absent = append(absent, recs[i].EventID)
				}
				missing++
				continue
			}
			out.set(i-p.lo, x.col, x.l.values[slices.Index(x.l.cols, x.col)])
		}
	}
	if len(absent) > 0 {
		w.log.Warn("unchanged TOAST values of rows ClickHouse does not have; stored as NULL", "table", tg.table.QualifiedName(), "values", missing, "event_ids", absent)
		if w.missingToast != nil {
			w.missingToast.WithLabelValues(tg.table.Source.Schema + "." + tg.table.Source.Table).Add(float64(missing))
		}
	}
	return out, nil
}

// release drops the values the lookups of a piece hold.
func (u *unchanged) release() {
	if u == nil {
		return
	}
	for _, l := range u.lookups {
		l.values = nil
	}
}

// readLookups reads the stored values of ls (or, with sizes, their sizes
// in bytes): the latest-version lookups of the same columns together, up
// to lookupKeys rows a query, and each older-version lookup on its own.
// A lookup ClickHouse refuses to read is marked (lookup.refused, see
// readRefusing).
func (w *Writer) readLookups(ctx context.Context, tg *target, ls []*lookup, sizes bool) error {
	budget := isolateQueries
	groups := map[string][]*lookup{}
	var order []string
	for _, l := range ls {
		if lookupOutOfRange(tg, l) {
			// Not asked: the row at the range's bound is another row's
			// (or one that earlier versions stored there for every key
			// beyond it), never this key's. Its record fails on its key
			// (errKeyOutOfRange), or, for an update that moved the row
			// from such a key, takes NULL with a warning, as for a row
			// ClickHouse does not have.
			l.found, l.size = false, 0
			continue
		}
		g := fmt.Sprint(l.cols)
		if l.before != 0 {
			if err := w.readRefusing(ctx, tg, []*lookup{l}, sizes, &budget); err != nil {
				return err
			}
			continue
		}
		if groups[g] == nil {
			order = append(order, g)
		}
		groups[g] = append(groups[g], l)
	}
	// A value costs its text and a cast in keysParams's form, its text
	// and a quote or comma in keysArray's.
	overhead := 32
	if arrayKeys(tg) {
		overhead = 4
	}
	for _, g := range order {
		ls := groups[g]
		for len(ls) > 0 {
			n, bytes := 0, 0
			for n < len(ls) && n < lookupKeys && (n == 0 || bytes+keyBytes(tg.table, ls[n], overhead) <= lookupKeyBytes) {
				bytes += keyBytes(tg.table, ls[n], overhead)
				n++
			}
			if err := w.readRefusing(ctx, tg, ls[:n], sizes, &budget); err != nil {
				return err
			}
			ls = ls[n:]
		}
	}
	return nil
}

// isolateQueries bounds the queries one readLookups spends finding which
// lookups of a query ClickHouse refused it refuses (readRefusing): one
// refused key among lookupKeys costs about 2·log2(2000) = 22 of them.
// Past it, every lookup of a refused query is refused with it: bounded
// work, at the price of failing lookups a finer search would have read
// when many keys are refused (when every key is, as for a query that
// cannot work for the table, nothing is failed that would have loaded).
const isolateQueries = 64

// readRefusing reads ls with readStored. When ClickHouse refuses the query
// for what it says (refusedQuery), which it would on every retry, it reads
// each half of ls on its own, down to single lookups, while budget lasts,
// and marks each lookup it refuses alone, or in a query refused once the
// budget is spent, with the refusal (lookup.refused, not found): their
// records fail, and the other lookups are read. Other errors (the server
// unreachable, busy, out of memory) are returned, for the insert to be
// retried.
func (w *Writer) readRefusing(ctx context.Context, tg *target, ls []*lookup, sizes bool, budget *int) error {
	return isolateRefused(ls, budget, func(ls []*lookup) error { return w.readStored(ctx, tg, ls, sizes) })
}

// isolateRefused is readRefusing with read for readStored.
func isolateRefused(ls []*lookup, budget *int, read func([]*lookup) error) error {
	err := read(ls)
	if err == nil || !refusedQuery(err) {
		return err
	}
	if len(ls) == 1 || *budget < 2 {
		for _, l := range ls {
			l.refused, l.found, l.size, l.values = err, false, 0, nil
		}
		return nil
	}
	*budget -= 2
	half := len(ls) / 2
	if err := isolateRefused(ls[:half], budget, read); err != nil {
		return err
	}
	return isolateRefused(ls[half:], budget, read)
}

// refusedQuery reports whether err holds ClickHouse's refusal of a query
// for what the query says: its syntax, a parameter or value it cannot
// parse, a type or argument its functions do not take. Such a query fails
// the same way on every retry. Not among them: timeouts, limits of
// memory, parts or queries, network errors, and a table or column that is
// missing (a change of the table in progress, which a retry outlives).
func refusedQuery(err error) bool {
	ex, ok := errors.AsType[*ch.Exception](err)
	if !ok {
		return false
	}
	switch ex.Code {
	case 6, // CANNOT_PARSE_TEXT
		27,  // CANNOT_PARSE_INPUT_ASSERTION_FAILED
		36,  // BAD_ARGUMENTS
		38,  // CANNOT_PARSE_DATE
		41,  // CANNOT_PARSE_DATETIME
		42,  // NUMBER_OF_ARGUMENTS_DOESNT_MATCH
		43,  // ILLEGAL_TYPE_OF_ARGUMENT
		44,  // ILLEGAL_COLUMN
		53,  // TYPE_MISMATCH
		62,  // SYNTAX_ERROR
		69,  // ARGUMENT_OUT_OF_BOUND
		70,  // CANNOT_CONVERT_TYPE
		72,  // CANNOT_PARSE_NUMBER
		130, // CANNOT_READ_ARRAY_FROM_TEXT
		386, // NO_COMMON_TYPE
		456, // UNKNOWN_QUERY_PARAMETER
		457: // BAD_QUERY_PARAMETER
		return true
	}
	return false
}

// lookupOutOfRange reports whether l's key holds a date or timestamp that
// ClickHouse stores as its range's bound (schema.Type.OutOfRange).
func lookupOutOfRange(tg *target, l *lookup) bool {
	t := tg.table
	for i, c := range t.Columns {
		if (c.Source.Key || c.Name == t.TenantColumn) && tg.columns[i].Type.Ranged() && tg.columns[i].Type.OutOfRange(l.key[i].Text) {
			return true
		}
	}
	return false
}

// ownKeyOutOfRange reports whether r's own key holds a date or timestamp
// beyond ClickHouse's range, for which buildColumns fails r (its record
// goes to the dead letters).
func ownKeyOutOfRange(tg *target, r *record.Record) bool {
	t := tg.table
	for i, c := range t.Columns {
		if (c.Source.Key || c.Name == t.TenantColumn) && tg.columns[i].Type.Ranged() && i < len(r.Values) && tg.columns[i].Type.OutOfRange(r.Values[i].Text) {
			return true
		}
	}
	return false
}

// keyBytes estimates the query text l's key takes in t: its values' text
// and overhead bytes a value.
func keyBytes(t *schema.Table, l *lookup, overhead int) int {
	n := len(l.rec.TenantID) + overhead
	for i, c := range t.Columns {
		if c.Source.Key || c.Name == t.TenantColumn {
			n += len(l.key[i].Text) + overhead
		}
	}
	return n
}

// readStored reads, for lookups ls of the same columns (one of them if it
// has a before version), their rows' values of those columns, or their
// sizes in bytes. A row that ClickHouse does not have is not found: its
// earlier versions were never captured (the table was added without a
// snapshot), and its values are stored as NULL.
func (w *Writer) readStored(ctx context.Context, tg *target, ls []*lookup, sizes bool) error {
	t := tg.table
	cols := ls[0].cols
	sel := make([]string, len(cols))
	for j, ci := range cols {
		sel[j] = schema.QuoteIdent(tg.columns[ci].Name)
		if tg.columns[ci].Type.IsJSON() {
			// As the text the insert's other values of the column are:
			// the client refuses an object among them.
			sel[j] = "CAST(" + sel[j] + " AS Nullable(String))"
		}
		if sizes {
			sel[j] = "byteSize(" + sel[j] + ")"
		}
	}
	// Key values are bound as the values inserted for them (converted from
	// PostgreSQL's text the same way), never as that text: bytea, bool or
	// timestamptz text would not match what ClickHouse stored.
	var keyCols []string
	if t.TenantSynthetic {
		keyCols = append(keyCols, schema.QuoteIdent(t.TenantColumn))
	}
	for i, c := range t.Columns {
		if c.Source.Key || c.Name == t.TenantColumn {
			keyCols = append(keyCols, schema.QuoteIdent(tg.columns[i].Name))
		}
	}
	// The keys are written once (IN an array uses the primary key as IN a
	// list does), and each row's place among them is found by comparing
	// its key with them: with indexOf in an array of the columns' own
	// types (keysArray), which compares tuples as IN does; with = in
	// keysParams's array, which compares a key value with its column's
	// value as IN does, also where their types differ. A key holding a
	// float NaN is found and placed by its own condition (nanKeys).
	key := tupleOf(keyCols)
	keys, args, err := keysArray(tg, ls)
	place := fmt.Sprintf("indexOf(keys, %s)", key)
	if err == nil && keys == "" {
		keys, args, err = keysParams(tg, ls)
		place = fmt.Sprintf("arrayFirstIndex(x -> x = %s, keys)", key)
	}
	if err != nil {
		return err
	}
	where := fmt.Sprintf("%s IN keys", key)
	nan, err := nanKeys(tg, ls)
	if err != nil {
		return err
	}
	if len(nan.terms) > 0 {
		where = "(" + where + " OR " + strings.Join(nan.terms, " OR ") + ")"
		var cases []string
		for j, term := range nan.terms {
			cases = append(cases, term, strconv.Itoa(nan.at[j]+1))
		}
		place = fmt.Sprintf("multiIf(%s, %s)", strings.Join(cases, ", "), place)
		args = append(args, nan.args...)
	}
	head := fmt.Sprintf("WITH %s AS keys SELECT toUInt64(%s), %s, %s",
		keys, place, schema.QuoteIdent(schema.VersionColumn), strings.Join(sel, ", "))
	var q string
	if before := ls[0].before; before != 0 {
		// Every version of one key is a handful of rows: no FINAL, the
		// newest live one below the update's version.
		q = fmt.Sprintf("%s FROM %s WHERE %s AND %s = 0 AND %s < {before:UInt64} ORDER BY %s DESC LIMIT 1",
			head, t.QualifiedName(), where, schema.QuoteIdent(schema.DeletedColumn),
			schema.QuoteIdent(schema.VersionColumn), schema.QuoteIdent(schema.VersionColumn))
		args = append(args, ch.Named("before", before))
	} else {
		q = fmt.Sprintf("%s FROM %s FINAL WHERE %s AND %s = 0",
			head, t.QualifiedName(), where, schema.QuoteIdent(schema.DeletedColumn))
	}
	if w.failpoints.Err(failpoint.SinkReadBack) != nil {
		// A query ClickHouse refuses for a parameter it cannot parse, as
		// it refused a date key sent as seconds since the epoch.
		q, args = "SELECT {failpoint:Date32}", []any{ch.Named("failpoint", "not a date")}
	}
	rows, err := w.conn.Query(ctx, q, args...)
	if err != nil {
		return fmt.Errorf("read unchanged TOAST values of %s: %w", t.QualifiedName(), err)
	}
	defer rows.Close()
	versions := make([]uint64, len(ls))
	for _, l := range ls {
		l.found = false
	}
	for rows.Next() {
		var (
			at      uint64
			version uint64
			dest    = make([]any, 2+len(cols))
		)
		dest[0], dest[1] = &at, &version
		for j, ct := range rows.ColumnTypes()[2:] {
			dest[2+j] = reflect.New(ct.ScanType()).Interface()
		}
		if err := rows.Scan(dest...); err != nil {
			return fmt.Errorf("read unchanged TOAST values of %s: %w", t.QualifiedName(), err)
		}
		if at < 1 || int(at) > len(ls) {
			// IN matched a key = does not: its lookup stays not found
			// (stored as NULL, with a warning) rather than stopping
			// the table.
			w.log.Warn("read-back found a row it cannot place among the keys it asked for; skipped", "table", t.QualifiedName(), "index", at)
			continue
		}
		l := ls[at-1]
		if l.found && versions[at-1] >= version {
			continue // a layout's sorting columns can hold a key twice: the newest wins
		}
		l.found, versions[at-1] = true, version
		if sizes {
			l.size = 0
			for j := range cols {
				l.size += int64(*dest[2+j].(*uint64))
			}
			continue
		}
		l.values = make([]any, len(cols))
		for j := range cols {
			l.values[j] = reflect.ValueOf(dest[2+j]).Elem().Interface()
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read unchanged TOAST values of %s: %w", t.QualifiedName(), err)
	}
	return nil
}

// keysParams writes the keys of ls as an array of tuples of query
// parameters, one a value (tenant tn, key column i's kI_n): the form for a
// table whose key types keysArray cannot write exactly. Slow for the
// server to analyze (a cast each), so its queries name fewer keys
// (keyBytes).
func keysParams(tg *target, ls []*lookup) (string, []any, error) {
	t := tg.table
	var args []any
	tuples := make([]string, len(ls))
	for n, l := range ls {
		var vals []string
		if t.TenantSynthetic {
			p := fmt.Sprintf("t%d", n)
			vals = append(vals, fmt.Sprintf("{%s:String}", p))
			args = append(args, ch.Named(p, l.rec.TenantID))
		}
		for i, c := range t.Columns {
			if !c.Source.Key && c.Name != t.TenantColumn {
				continue
			}
			typ := tg.columns[i].Type
			x, err := typ.Convert(l.key[i].Text)
			if err != nil {
				return "", nil, fmt.Errorf("read unchanged TOAST values of %s: key column %s: %w", t.QualifiedName(), c.Name, err)
			}
			if x == nil {
				// A value the column cannot hold (numeric NaN or
				// Infinity), which versions before errKeyNotHeld
				// inserted as the type's default.
				vals = append(vals, fmt.Sprintf("defaultValueOfTypeName(%s)", schema.QuoteString(typ.DDL)))
				continue
			}
			p := fmt.Sprintf("k%d_%d", i, n)
			vals = append(vals, fmt.Sprintf("{%s:%s}", p, typ.DDL))
			args = append(args, ch.Named(p, keyParam(typ, x)))
		}
		tuples[n] = tupleOf(vals)
	}
	return "[" + strings.Join(tuples, ", ") + "]", args, nil
}

// nanConds are the conditions of the lookups whose key holds a float NaN
// (nanKeys): terms[j] is lookup at[j]'s, with its parameters among args.
type nanConds struct {
	terms []string
	at    []int
	args  []any
}

// nanKeys writes, for each lookup of ls whose key holds a float NaN, a
// condition that finds its row without IN, and places it (where = and
// keysParams's = cannot: NaN equals nothing): a conjunction of the key's
// other values, as parameters (n<lookup>_<column>), and isNaN of its NaN
// columns. IN alone misses such a row where the server prunes parts by
// column statistics (ClickHouse 26.4 and later, until its fix): their min
// and max leave NaN out, so a part holding a NaN key seems to hold none
// (ClickHouse issue 116927). isNaN is no range, so no part is pruned for
// it; the key's leading values still select the granules. It also finds
// a NaN stored with other bits than the one the server parses from
// "nan", which IN tells apart (builds before the sink stored that one
// stored Go's, math.NaN).
func nanKeys(tg *target, ls []*lookup) (nanConds, error) {
	t := tg.table
	var out nanConds
	for n, l := range ls {
		var conds []string
		var params []any
		nan := false
		if t.TenantSynthetic {
			p := fmt.Sprintf("n%d_t", n)
			conds = append(conds, fmt.Sprintf("%s = {%s:String}", schema.QuoteIdent(t.TenantColumn), p))
			params = append(params, ch.Named(p, l.rec.TenantID))
		}
		for i, c := range t.Columns {
			if !c.Source.Key && c.Name != t.TenantColumn {
				continue
			}
			typ := tg.columns[i].Type
			x, err := typ.Convert(l.key[i].Text)
			if err != nil {
				return nanConds{}, fmt.Errorf("read unchanged TOAST values of %s: key column %s: %w", t.QualifiedName(), c.Name, err)
			}
			col := schema.QuoteIdent(tg.columns[i].Name)
			if isNaN(x) {
				nan = true
				conds = append(conds, "isNaN("+col+")")
				continue
			}
			if x == nil {
				// As keysParams writes it: the type's default, which
				// versions before errKeyNotHeld inserted.
				conds = append(conds, fmt.Sprintf("%s = defaultValueOfTypeName(%s)", col, schema.QuoteString(typ.DDL)))
				continue
			}
			p := fmt.Sprintf("n%d_%d", n, i)
			conds = append(conds, fmt.Sprintf("%s = {%s:%s}", col, p, typ.DDL))
			params = append(params, ch.Named(p, keyParam(typ, x)))
		}
		if nan {
			out.terms = append(out.terms, "("+strings.Join(conds, " AND ")+")")
			out.at = append(out.at, n)
			out.args = append(out.args, params...)
		}
	}
	return out, nil
}

// isNaN reports whether x, a converted value, is a float NaN.
func isNaN(x any) bool {
	switch v := x.(type) {
	case float64:
		return math.IsNaN(v)
	case float32:
		return math.IsNaN(float64(v))
	}
	return false
}

// keyParam is x, a key value converted for type typ, as a query parameter
// the server parses back into typ. The client sends a time as seconds
// since the epoch, which a DateTime parameter reads and a Date one does
// not: a date goes as its text.
func keyParam(typ schema.Type, x any) any {
	if at, ok := x.(time.Time); ok && typ.IsDate() {
		return at.Format(time.DateOnly)
	}
	return x
}

// tupleOf writes values as one: a tuple of several, or the one itself.
func tupleOf(vals []string) string {
	if len(vals) == 1 {
		return vals[0]
	}
	return "(" + strings.Join(vals, ", ") + ")"
}

// hasUnchanged reports whether r lacks a TOASTed value PostgreSQL did not
// resend.
func hasUnchanged(r *record.Record) bool {
	return slices.ContainsFunc(r.Values, func(v record.Value) bool { return v.Unchanged })
}

// rowKey identifies a row within a table: its tenant and the key values
// among vals (aligned with the table's columns).
func rowKey(t *schema.Table, r *record.Record, vals []record.Value) string {
	var b strings.Builder
	if t.TenantSynthetic {
		b.WriteString(r.TenantID) // a tenant column is among vals
	}
	for i, c := range t.Columns {
		if c.Source.Key || c.Name == t.TenantColumn {
			b.WriteByte(0)
			b.WriteString(vals[i].Text)
		}
	}
	return b.String()
}

// keyValues returns r's values with the key columns' replaced by the old
// key's (r.OldKey), for looking up the row as it was before the update.
func keyValues(t *schema.Table, r *record.Record) []record.Value {
	vals := slices.Clone(r.Values)
	for i, c := range t.Columns {
		if c.Source.Key && i < len(r.OldKey) {
			vals[i] = r.OldKey[i]
		}
	}
	return vals
}
