package erasure

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/walhouse/walhouse/schema"
)

// The source check a table of an erasure had (TableResult.SourceCheck).
const (
	// CheckSubjectAndKeys: the subject's rows were counted (none) and every
	// key the removal would take was looked up, in one snapshot.
	CheckSubjectAndKeys = "subject and keys"
	// CheckKeysOnly: the subject column is gone from the PostgreSQL table
	// (dropped or renamed), so its rows could not be counted by it; every
	// key the removal would take was looked up, and live rows were kept.
	CheckKeysOnly = "keys only: the subject column is gone from PostgreSQL"
	// CheckTableGone: the PostgreSQL table is gone; no row of it is live.
	CheckTableGone = "none: the source table is gone from PostgreSQL"
)

// keysPerLookup bounds the keys one PostgreSQL lookup carries (as arrays,
// one parameter per key column).
const keysPerLookup = 10000

// candidate is a row of the ClickHouse table with a version that carries
// the subject: the removal takes all its versions when PostgreSQL no
// longer has the row, only those carrying the subject when it does.
type candidate struct {
	key []string // toString of each key column but the tenant
	// newestUnsafe: the row's newest stored version carries the subject or
	// is a tombstone, so removing the subject's versions of a live row
	// would leave it without its current state.
	newestUnsafe bool
}

// LiveRowsError refuses an erasure that would remove the current state of
// rows PostgreSQL still holds: rows that once carried the subject and no
// longer do (reassigned, their e-mail changed), whose change walhouse has
// not loaded yet, so their newest stored version still carries the
// subject (or is a tombstone). Nothing was recorded or removed.
type LiveRowsError struct {
	// Rows is the number of such rows per ClickHouse table.
	Rows map[string]int
}

func (e *LiveRowsError) Error() string {
	var parts []string
	for _, t := range slices.Sorted(maps.Keys(e.Rows)) {
		parts = append(parts, fmt.Sprintf("%s (%d rows)", t, e.Rows[t]))
	}
	return "rows PostgreSQL still holds once carried the subject and their newest version in ClickHouse still does: " + strings.Join(parts, ", ") +
		"; nothing was recorded or removed. Wait until the sinks have loaded those rows' changes (lag near 0), then erase again"
}

// candidates reads the rows of t with a version of the subject, and
// whether the newest version of each carries it (or is a tombstone). It
// runs inside the PostgreSQL check's snapshot, so that the keys it finds
// are looked up in that snapshot.
// It reads at most limit rows.
func (e *Eraser) candidates(ctx context.Context, t *target, limit int) ([]candidate, error) {
	cols := keyExprs(t)
	qname := schema.QuoteIdent(e.database) + "." + schema.QuoteIdent(t.name)
	tenant := fmt.Sprintf("%s = {tenant:%s}", schema.QuoteIdent(t.tenantCol), t.tenantType)
	subject := fmt.Sprintf("ifNull(%s = {subject:%s}, 0)", schema.QuoteIdent(t.column), t.subjectType)
	key := strings.Join(cols, ", ")
	q := fmt.Sprintf(`SELECT %s, toUInt8(argMax(%s OR %s = 1, %s))
FROM %s WHERE %s AND (%s) IN (SELECT DISTINCT %s FROM %s WHERE %s AND %s LIMIT %d)
GROUP BY %s`, key, subject, schema.QuoteIdent(schema.DeletedColumn), schema.QuoteIdent(schema.VersionColumn),
		qname, tenant, key, key, qname, tenant, subject, max(limit, 0), key)
	rows, err := e.conn.Query(chParams(ctx, map[string]string{"tenant": t.tenantText, "subject": t.valueText}), q)
	if err != nil {
		return nil, fmt.Errorf("read the keys of the subject's rows in %s: %w", t.name, err)
	}
	defer rows.Close()
	var out []candidate
	for rows.Next() {
		texts := make([]string, len(cols))
		var unsafe uint8
		dest := make([]any, 0, len(cols)+1)
		for i := range texts {
			dest = append(dest, &texts[i])
		}
		if err := rows.Scan(append(dest, &unsafe)...); err != nil {
			return nil, fmt.Errorf("read the keys of the subject's rows in %s: %w", t.name, err)
		}
		out = append(out, candidate{key: texts, newestUnsafe: unsafe != 0})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the keys of the subject's rows in %s: %w", t.name, err)
	}
	return out, nil
}

// keyExprs returns toString of each key column of t but the tenant: the
// form in which the ledger and the removal name a row.
func keyExprs(t *target) []string {
	cols := make([]string, 0, len(t.keyCols)-1)
	for _, k := range t.keyCols[1:] {
		cols = append(cols, "toString("+schema.QuoteIdent(k)+")")
	}
	return cols
}

// liveKeys returns which of cands (by index) PostgreSQL still holds in tx's
// snapshot: the rows of t's source table with the tenant (when the table
// has its column; else every row is the tenant's) and the candidate's key.
// types are the PostgreSQL types of t's columns.
func liveKeys(ctx context.Context, tx pgx.Tx, t *target, types map[string]string, cands []candidate) (map[int]bool, error) {
	keyCols := t.keyCols[1:]
	var conds, unnest, names []string
	for i, c := range keyCols {
		typ, ok := types[c]
		if !ok {
			return nil, fmt.Errorf("table %s: its primary-key column %q is gone from %s, so walhouse cannot tell which of its rows PostgreSQL still holds; nothing was recorded or removed (erase with --tables naming the other tables, or restore the column)", t.name, c, t.owner)
		}
		conds = append(conds, fmt.Sprintf("s.%s = CAST(k.c%d AS %s)", pgx.Identifier{c}.Sanitize(), i, typ))
		unnest = append(unnest, fmt.Sprintf("$%d::text[]", i+1))
		names = append(names, fmt.Sprintf("c%d", i))
	}
	args := make([]any, len(keyCols), len(keyCols)+1)
	if ttype, ok := types[t.tenantCol]; ok {
		conds = append(conds, fmt.Sprintf("s.%s = CAST($%d::text AS %s)", pgx.Identifier{t.tenantCol}.Sanitize(), len(keyCols)+1, ttype))
		args = append(args, t.tenantText)
	}
	q := fmt.Sprintf("SELECT k.i FROM unnest(%s) WITH ORDINALITY AS k(%s, i) WHERE EXISTS (SELECT 1 FROM %s AS s WHERE %s)",
		strings.Join(unnest, ", "), strings.Join(names, ", "), t.owner, strings.Join(conds, " AND "))
	live := map[int]bool{}
	for start := 0; start < len(cands); start += keysPerLookup {
		chunk := cands[start:min(start+keysPerLookup, len(cands))]
		for j := range keyCols {
			col := make([]string, len(chunk))
			for i, c := range chunk {
				col[i] = c.key[j]
			}
			args[j] = col
		}
		rows, err := tx.Query(ctx, q, args...)
		if err != nil {
			return nil, fmt.Errorf("look up in %s the rows the erasure would remove from %s (nothing was recorded or removed; a key whose ClickHouse text PostgreSQL cannot read back is not supported, see docs/erasure.md): %w", t.owner, t.name, err)
		}
		for rows.Next() {
			var i int64
			if err := rows.Scan(&i); err != nil {
				rows.Close()
				return nil, fmt.Errorf("look up the rows of %s: %w", t.owner, err)
			}
			live[start+int(i)-1] = true
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("look up in %s the rows the erasure would remove from %s (nothing was recorded or removed): %w", t.owner, t.name, err)
		}
	}
	return live, nil
}
