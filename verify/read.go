package verify

import (
	"context"
	"fmt"
	"reflect"
	"strconv"
	"strings"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/cespare/xxhash/v2"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/walhouse/walhouse/schema"
)

// row is one row of one side, in canonical form.
type row struct {
	// keys are the canonical tenant (unless synthetic) and key values.
	keys []string
	// cells are the canonical values of the table's other columns.
	cells []string
	// display holds readable values of every column (tenant, keys, cells)
	// for the report; only rows read for a report have it.
	display []*string
	hash    uint64
	// version and deleted are ClickHouse's _version and _is_deleted.
	version uint64
	deleted bool
}

// keyOf is the map key of a row: its key values, each length-prefixed.
func keyOf(keys []string) string {
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(strconv.Itoa(len(k)))
		b.WriteByte(':')
		b.WriteString(k)
	}
	return b.String()
}

// hashCells hashes a row's key and values; a bucket's digest is the sum of
// its rows' hashes, so the order rows arrive in does not matter.
func hashCells(keys, cells []string) uint64 {
	var buf []byte
	return hashRow(&buf, keys, cells)
}

// hashRow is hashCells with a buffer kept between rows: each value is
// written to it length-prefixed and the whole hashed at once, which is
// several times faster than feeding the digest value by value.
func hashRow(buf *[]byte, keys, cells []string) uint64 {
	b := (*buf)[:0]
	for _, part := range [2][]string{keys, cells} {
		for _, c := range part {
			b = strconv.AppendInt(b, int64(len(c)), 10)
			b = append(b, ':')
			b = append(b, c...)
		}
		b = append(b, '|')
	}
	*buf = b
	return xxhash.Sum64(b)
}

// newRow returns a row whose keys and cells share one allocation, and
// that allocation: the canonical values of a read's columns, in order.
func newRow(nkeys, ncells int) (row, []string) {
	vals := make([]string, nkeys+ncells)
	return row{keys: vals[:nkeys:nkeys], cells: vals[nkeys:]}, vals
}

// bucketCap bounds the capacity a read reserves for the rows it expects
// (a bucket's rows are appended, and growing a slice of rows copies them).
const bucketCap = 1 << 16

// unloadable marks the canonical form of a PostgreSQL value the sink's
// conversion refuses (such a row goes to the dead letters): it equals no
// ClickHouse value.
const unloadable = "\x01unloadable: "

// keyColumns lists the tenant (unless synthetic) and the key columns.
func (t *table) keyColumns() []column {
	n := len(t.keys)
	if !t.synthetic {
		n++
	}
	return t.all()[:n:n] // capped: appending never writes into all()
}

// all lists the columns of a read: keyColumns, then the other columns.
func (t *table) all() []column { return t.columns }

// finish lists the table's columns once (all), before any goroutine reads
// them.
func (t *table) finish() *table {
	t.columns = nil
	if !t.synthetic {
		t.columns = append(t.columns, t.tenant)
	}
	t.columns = append(append(t.columns, t.keys...), t.cols...)
	return t
}

// bounds are a bucket's key range over the first key column, exclusive
// below and inclusive above; nil is unbounded.
type bounds struct {
	tenant *string
	lo, hi *string
}

// pgWhere returns the predicate of a bucket and its parameters, numbered
// from $1.
func (t *table) pgWhere(b bounds) (string, []string) {
	var conds, args []string
	if b.tenant != nil && !t.synthetic {
		args = append(args, *b.tenant)
		conds = append(conds, fmt.Sprintf("%s = $%d", pgx.Identifier{t.tenant.pg}.Sanitize(), len(args)))
	}
	k := pgx.Identifier{t.keys[0].pg}.Sanitize()
	if b.lo != nil {
		args = append(args, *b.lo)
		conds = append(conds, fmt.Sprintf("%s > $%d", k, len(args)))
	}
	if b.hi != nil {
		args = append(args, *b.hi)
		conds = append(conds, fmt.Sprintf("%s <= $%d", k, len(args)))
	}
	if len(conds) == 0 {
		return "true", nil
	}
	return strings.Join(conds, " AND "), args
}

// chWhere is pgWhere for ClickHouse, with named parameters cast to the
// columns' types so that the sort key's index serves the predicate.
func (t *table) chWhere(b bounds) (string, ch.Parameters) {
	var conds []string
	params := ch.Parameters{}
	if b.tenant != nil && !t.synthetic {
		params["t"] = schema.EscapeParam(*b.tenant)
		conds = append(conds, fmt.Sprintf("%s = CAST({t:String} AS %s)", schema.QuoteIdent(t.tenant.ch), t.tenant.chType))
	}
	k := schema.QuoteIdent(t.keys[0].ch)
	if b.lo != nil {
		params["lo"] = schema.EscapeParam(*b.lo)
		conds = append(conds, fmt.Sprintf("%s > CAST({lo:String} AS %s)", k, t.keys[0].chType))
	}
	if b.hi != nil {
		params["hi"] = schema.EscapeParam(*b.hi)
		conds = append(conds, fmt.Sprintf("%s <= CAST({hi:String} AS %s)", k, t.keys[0].chType))
	}
	if len(conds) == 0 {
		return "1", params
	}
	return strings.Join(conds, " AND "), params
}

// keyWhere returns the predicates of one key on both sides.
func (t *table) keyWhere(keys []string) (pgCond string, pgArgs []string, chCond string, params ch.Parameters) {
	params = ch.Parameters{}
	var pc, cc []string
	for i, c := range t.keyColumns() {
		text, nan := c.typ.LookupText(keys[i])
		pgArgs = append(pgArgs, text)
		pc = append(pc, fmt.Sprintf("%s = $%d", pgx.Identifier{c.pg}.Sanitize(), i+1))
		if nan {
			cc = append(cc, "isNaN("+schema.QuoteIdent(c.ch)+")") // NaN = NaN is false there, not in PostgreSQL
			continue
		}
		name := "k" + strconv.Itoa(i)
		params[name] = schema.EscapeParam(text)
		cc = append(cc, fmt.Sprintf("%s = CAST({%s:String} AS %s)", schema.QuoteIdent(c.ch), name, c.chType))
	}
	return strings.Join(pc, " AND "), pgArgs, strings.Join(cc, " AND "), params
}

// keysWhere returns the predicates of a batch of keys on both sides: a
// list of key tuples, each value cast to its column's type (PostgreSQL's
// type name, ClickHouse's column type) so that the key's index serves it.
// In ClickHouse, a key holding a float NaN is a conjunction of its other
// values and isNaN instead: IN would miss it where the server prunes
// parts by column statistics, whose min and max leave NaN out (26.4 and
// later, until its fix: ClickHouse issue 116927), and a NaN stored with
// other bits than the one it parses.
func (t *table) keysWhere(keys [][]string) (pgCond string, pgArgs []string, chCond string, params ch.Parameters) {
	kc := t.keyColumns()
	params = ch.Parameters{}
	var pcols, ccols, ptuples, ctuples, cnan []string
	for _, c := range kc {
		pcols = append(pcols, pgx.Identifier{c.pg}.Sanitize())
		ccols = append(ccols, schema.QuoteIdent(c.ch))
	}
	for i, k := range keys {
		var pv, cv, conj []string
		beyond, hasNaN := false, false
		for j, c := range kc {
			text, nan := c.typ.LookupText(k[j])
			pgArgs = append(pgArgs, text)
			pv = append(pv, fmt.Sprintf("$%d::%s", len(pgArgs), pgx.Identifier{c.src.Type}.Sanitize()))
			// A key beyond ClickHouse's range (pgRead keeps its text) is
			// no ClickHouse row's, and ClickHouse may refuse its text.
			beyond = beyond || c.typ.Ranged() && c.typ.OutOfRange(k[j])
			if nan {
				hasNaN = true
				conj = append(conj, "isNaN("+ccols[j]+")")
				continue
			}
			name := fmt.Sprintf("k%d_%d", i, j)
			params[name] = schema.EscapeParam(text)
			cv = append(cv, fmt.Sprintf("CAST({%s:String} AS %s)", name, c.chType))
			conj = append(conj, fmt.Sprintf("%s = %s", ccols[j], cv[len(cv)-1]))
		}
		ptuples = append(ptuples, "("+strings.Join(pv, ", ")+")")
		switch {
		case beyond:
			for j := range kc {
				delete(params, fmt.Sprintf("k%d_%d", i, j))
			}
		case hasNaN:
			cnan = append(cnan, "("+strings.Join(conj, " AND ")+")")
		case len(cv) == 1:
			ctuples = append(ctuples, cv[0])
		default:
			ctuples = append(ctuples, "tuple("+strings.Join(cv, ", ")+")")
		}
	}
	pgCond = fmt.Sprintf("(%s) IN (VALUES %s)", strings.Join(pcols, ", "), strings.Join(ptuples, ", "))
	var cconds []string
	switch {
	case len(ctuples) == 0:
	case len(ccols) == 1:
		cconds = append(cconds, fmt.Sprintf("%s IN (%s)", ccols[0], strings.Join(ctuples, ", ")))
	default:
		cconds = append(cconds, fmt.Sprintf("(%s) IN (%s)", strings.Join(ccols, ", "), strings.Join(ctuples, ", ")))
	}
	chCond = "0"
	if cconds = append(cconds, cnan...); len(cconds) > 0 {
		chCond = strings.Join(cconds, " OR ")
	}
	return pgCond, pgArgs, chCond, params
}

// pgSelect is the select list of a PostgreSQL read: tenant, keys, columns.
func (t *table) pgSelect() string {
	var names []string
	for _, c := range t.all() {
		names = append(names, pgx.Identifier{c.pg}.Sanitize())
	}
	return strings.Join(names, ", ")
}

func (t *table) pgRelation() string {
	return pgx.Identifier{t.source.Schema, t.source.Table}.Sanitize()
}

// pgFrom is what queries read the table's PostgreSQL rows from: the
// table, or only the rows its publication's row filter matches, the rows
// capture sends. PostgreSQL pulls the subquery up into the query, so the
// key's index still serves it.
func (t *table) pgFrom() string {
	if t.filter == "" {
		return t.pgRelation()
	}
	return fmt.Sprintf("(SELECT * FROM %s WHERE (%s)) AS %s", t.pgRelation(), t.filter, pgx.Identifier{t.source.Table}.Sanitize())
}

// pgQuery runs sql with text parameters and text results (the output
// functions' text, what pgoutput sends) and calls each for every row.
func pgQuery(ctx context.Context, conn *pgconn.PgConn, sql string, args []string, each func(vals [][]byte) error) error {
	params := make([][]byte, len(args))
	for i, a := range args {
		params[i] = []byte(a)
	}
	rr := conn.ExecParams(ctx, sql, params, nil, nil, nil)
	for rr.NextRow() {
		if err := each(rr.Values()); err != nil {
			_, _ = rr.Close()
			return err
		}
	}
	_, err := rr.Close()
	return err
}

// pgRows reads rows of the table matching where, as canonical rows.
// lossy counts values equal only through a lossy mapping, per column.
func (t *table) pgRows(ctx context.Context, conn *pgconn.PgConn, where string, args []string, limit int, display bool, lossy map[string]int64) ([]row, error) {
	q := fmt.Sprintf("SELECT %s FROM %s WHERE %s", t.pgSelect(), t.pgFrom(), where)
	if limit > 0 {
		q += " LIMIT " + strconv.Itoa(limit)
	}
	return t.pgRead(ctx, conn, q, args, display, lossy, nil, max(limit, 0))
}

// pgRange reads the next bucket of a ranged table, (b.lo, hi] over the
// first key column within b's tenant: hi is the n-th row's value after lo
// (nil when fewer than n are left: the bucket is then unbounded above, and
// ClickHouse's side of it is read so). With a key of one column, that is
// the first n rows in its order, so bounds and rows come from one index
// range scan. With more, rows beyond the n-th may share the n-th's first
// column: hi is found first, then the whole range read.
func (t *table) pgRange(ctx context.Context, conn *pgconn.PgConn, b bounds, n int, lossy map[string]int64) (rows []row, hi *string, err error) {
	where, args := t.pgWhere(bounds{tenant: b.tenant, lo: b.lo})
	k := pgx.Identifier{t.keys[0].pg}.Sanitize()
	if len(t.keys) > 1 {
		q := fmt.Sprintf("SELECT %s FROM %s WHERE %s ORDER BY %s OFFSET %d LIMIT 1", k, t.pgFrom(), where, k, n-1)
		err := pgQuery(ctx, conn, q, args, func(vals [][]byte) error {
			s := string(vals[0])
			hi = &s
			return nil
		})
		if err != nil {
			return nil, nil, fmt.Errorf("find a bucket boundary of %s: %w", t.pgRelation(), err)
		}
		where, args := t.pgWhere(bounds{tenant: b.tenant, lo: b.lo, hi: hi})
		rows, err = t.pgRows(ctx, conn, where, args, 0, false, lossy)
		return rows, hi, err
	}
	q := fmt.Sprintf("SELECT %s FROM %s WHERE %s ORDER BY %s LIMIT %d", t.pgSelect(), t.pgFrom(), where, k, n)
	var last []byte
	rows, err = t.pgRead(ctx, conn, q, args, false, lossy, &last, n)
	if err != nil || len(rows) < n {
		return rows, nil, err
	}
	h := string(last)
	return rows, &h, nil
}

// pgRead runs q and converts its rows (tenant, keys, columns) to canonical
// rows. last, when not nil, receives the first key column's text of the
// last row. expect is the rows expected (capped at bucketCap), for the
// result's capacity.
func (t *table) pgRead(ctx context.Context, conn *pgconn.PgConn, q string, args []string, display bool, lossy map[string]int64, last *[]byte, expect int) ([]row, error) {
	kc := t.keyColumns()
	first := len(kc) - len(t.keys) // the first key column's index in a row
	out := make([]row, 0, min(expect, bucketCap))
	var joined, hashBuf []byte
	cols := t.all()
	err := pgQuery(ctx, conn, q, args, func(vals [][]byte) error {
		if last != nil {
			*last = append((*last)[:0], vals[first]...)
		}
		r, canons := newRow(len(kc), len(t.cols))
		// Readable values point into texts; without a report, the value
		// being converted is one variable on the stack.
		var texts []string
		if display {
			r.display = make([]*string, len(vals))
			texts = make([]string, len(vals))
		}
		// The row's texts are one string, cut into the values: one
		// allocation per row, not one per value (the canonical forms of
		// text and most numbers are these strings themselves).
		joined = joined[:0]
		for _, v := range vals {
			joined = append(joined, v...)
		}
		all := string(joined)
		at := 0
		var one string
		for i, v := range vals {
			var text *string
			if v != nil {
				one = all[at : at+len(v)]
				at += len(v)
				text = &one
				if display {
					texts[i] = one
					r.display[i] = &texts[i]
				}
			}
			c := &cols[i] // not a copy of the column per value
			canon, err := c.typ.CanonicalText(text)
			switch {
			case err != nil:
				canon = unloadable + err.Error()
			case i < len(kc) && text != nil && c.typ.Ranged() && c.typ.OutOfRange(*text):
				// A key ClickHouse would store at its range's bound (the
				// sink dead-letters its changes): kept as PostgreSQL's own
				// text, which matches no ClickHouse row (the bound's
				// included) and reads back the same row, so the row is
				// reported missing rather than taken for the bound's.
				canon = *text
			case text != nil && lossy != nil && c.typ.Lossy(*text):
				lossy[c.pg]++
			}
			canons[i] = canon
		}
		r.hash = hashRow(&hashBuf, r.keys, r.cells)
		out = append(out, r)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read %s from PostgreSQL: %w", t.pgRelation(), err)
	}
	return out, nil
}

// chSelect is the select list of a ClickHouse read.
func (t *table) chSelect() string {
	var names []string
	for _, c := range t.all() {
		name := schema.QuoteIdent(c.ch)
		if c.typ.IsJSON() {
			name = "CAST(" + name + " AS Nullable(String))" // as text: the canonical form reads JSON text
		}
		names = append(names, name)
	}
	return strings.Join(append(names, schema.VersionColumn, schema.DeletedColumn), ", ")
}

// chRows reads the rows of the table FINAL matching where, as canonical
// rows. FINAL leaves out the keys whose latest version is a tombstone;
// latest reads each key's latest version whatever it is (a tombstone
// included) instead.
func (v *Verifier) chRows(ctx context.Context, t *table, where string, params ch.Parameters, limit int, display, latest bool, expect int) ([]row, error) {
	q := fmt.Sprintf("SELECT %s FROM %s.%s FINAL WHERE %s", t.chSelect(), schema.QuoteIdent(v.cfg.database), schema.QuoteIdent(t.chName), where)
	if latest {
		var keys []string
		for _, c := range t.keyColumns() {
			keys = append(keys, schema.QuoteIdent(c.ch))
		}
		q = fmt.Sprintf("SELECT %s FROM %s.%s WHERE %s ORDER BY %s DESC, %s DESC LIMIT 1 BY %s", t.chSelect(), schema.QuoteIdent(v.cfg.database), schema.QuoteIdent(t.chName), where,
			schema.VersionColumn, schema.DeletedColumn, strings.Join(keys, ", "))
	}
	if limit > 0 {
		q += " LIMIT " + strconv.Itoa(limit)
	}
	qctx := ch.Context(ctx, ch.WithParameters(params), ch.WithSettings(ch.Settings{
		"max_execution_time": v.cfg.chMaxSeconds,
		"max_memory_usage":   v.cfg.chMaxMemory,
	}))
	rows, err := v.ch.Query(qctx, q)
	if err != nil {
		return nil, fmt.Errorf("read ClickHouse table %s: %w", t.chName, err)
	}
	defer rows.Close()
	kc := t.keyColumns()
	cols := t.all()
	n := len(kc) + len(t.cols)
	var (
		dest     []any
		nullable []bool
		version  uint64
		deleted  uint8
		hashBuf  []byte
		out      = make([]row, 0, min(expect, bucketCap))
	)
	for rows.Next() {
		if dest == nil { // an empty result may have no column types over HTTP
			types := rows.ColumnTypes()
			dest, nullable = make([]any, n+2), make([]bool, n)
			for i := range n {
				dest[i] = reflect.New(types[i].ScanType()).Interface()
				nullable[i] = types[i].ScanType().Kind() == reflect.Pointer
			}
			dest[n], dest[n+1] = &version, &deleted
		}
		if err := rows.Scan(dest...); err != nil {
			return nil, fmt.Errorf("read ClickHouse table %s: %w", t.chName, err)
		}
		r, canons := newRow(len(kc), len(t.cols))
		r.version, r.deleted = version, deleted != 0
		if display {
			r.display = make([]*string, n)
		}
		for i := range n {
			// Canonical follows pointers: a column's scan destination is
			// passed as it is, a Nullable one's pointer it holds (neither
			// copies the value into an interface).
			val := dest[i]
			if nullable[i] {
				val = reflect.ValueOf(dest[i]).Elem().Interface()
			}
			c := &cols[i] // not a copy of the column per value
			canon, err := c.typ.Canonical(val)
			if err != nil {
				return nil, fmt.Errorf("ClickHouse table %s, column %s: %w", t.chName, c.ch, err)
			}
			if display && canon != "\x00" {
				s := fmt.Sprint(deref(val))
				r.display[i] = &s
			}
			canons[i] = canon
		}
		r.hash = hashRow(&hashBuf, r.keys, r.cells)
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read ClickHouse table %s: %w", t.chName, err)
	}
	return out, nil
}

// deref follows pointers, for printing.
func deref(v any) any {
	rv := reflect.ValueOf(v)
	for rv.IsValid() && rv.Kind() == reflect.Pointer && !rv.IsNil() {
		rv = rv.Elem()
	}
	if !rv.IsValid() {
		return nil
	}
	if rv.Kind() == reflect.Slice && rv.Type().Elem().Kind() == reflect.Pointer {
		parts := make([]string, rv.Len())
		for i := range parts {
			parts[i] = fmt.Sprint(deref(rv.Index(i).Interface()))
		}
		return "[" + strings.Join(parts, ",") + "]"
	}
	return rv.Interface()
}
