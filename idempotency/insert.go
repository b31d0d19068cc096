package idempotency

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Insert is one row written by the table pattern: the row carries its key
// in a UNIQUE column and its request's fingerprint, and is inserted with
// INSERT … ON CONFLICT (key column) DO NOTHING. The table needs, besides
// its own columns:
//
//	tenant_id               text  NOT NULL,           -- TenantColumn
//	idempotency_key         uuid  NOT NULL UNIQUE,    -- KeyColumn
//	idempotency_fingerprint bytea NOT NULL            -- FingerprintColumn
//
// and, to keep tenants apart in PostgreSQL too, RowLevelSecurity.
type Insert struct {
	Table  string // "schema.table" or "table"
	Tenant string // required
	Key    Key    // required: the same on every retry
	// Columns and Values are the row's other columns, in the same order.
	Columns []string
	Values  []any
	// Returning are the columns whose values Inserted carries (ids,
	// defaults): the first attempt's row also on a retry.
	Returning []string
	// Fingerprint of the request; the zero value: FingerprintOf("INSERT
	// "+Table, the columns and values).
	Fingerprint Fingerprint
	// The pattern's columns, when named otherwise than tenant_id,
	// idempotency_key and idempotency_fingerprint.
	TenantColumn, KeyColumn, FingerprintColumn string
}

// Inserted is the row an Insert wrote, or found written by an earlier
// attempt with the same key (Replayed).
type Inserted struct {
	Values   []any // of Insert.Returning, in order
	Replayed bool
	// Token is the consistency token, read after the commit (Keys.Insert
	// only; zero when it could not be read: TokenErr).
	Token    Token
	TokenErr error
}

// Insert runs ins in a transaction of its own, with the tenant set.
func (k *Keys) Insert(ctx context.Context, ins Insert) (Inserted, error) {
	tx, err := k.db.BeginTx(ctx, k.txOpts)
	if err != nil {
		return Inserted{}, fmt.Errorf("idempotency: begin a transaction: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if err := SetTenant(ctx, tx, ins.Tenant); err != nil {
		return Inserted{}, err
	}
	out, err := InsertTx(ctx, tx, ins)
	if err != nil {
		return Inserted{}, err
	}
	if err := tx.Commit(ctx); err != nil {
		return Inserted{}, fmt.Errorf("idempotency: commit the insert of key %s (the outcome may be unknown: retry with the same key): %w", ins.Key, err)
	}
	out.Token, out.TokenErr = readToken(ctx, k.db)
	return out, nil
}

// InsertTx runs ins in tx, whose tenant the caller set (SetTenant), as a
// step of a larger transaction. A row with ins.Key already there (an
// earlier attempt committed it, or a concurrent one did: PostgreSQL makes
// this one wait) is returned as Replayed if it is the same tenant's and has
// the same fingerprint; otherwise nothing is written and the error is a
// *MismatchError. Another tenant's row is never returned, also without
// row-level security.
func InsertTx(ctx context.Context, tx pgx.Tx, ins Insert) (Inserted, error) {
	q, err := ins.normalize()
	if err != nil {
		return Inserted{}, err
	}
	insertSQL, selectSQL := q.statements()
	args := append([]any{q.Tenant, q.Key, q.Fingerprint[:]}, q.Values...)
	rows, err := tx.Query(ctx, insertSQL, args...)
	if err != nil {
		return Inserted{}, fmt.Errorf("idempotency: insert into %s: %w", q.Table, err)
	}
	vals, err := oneRow(rows)
	if err != nil {
		return Inserted{}, fmt.Errorf("idempotency: insert into %s: %w", q.Table, err)
	}
	if vals != nil {
		if len(q.Returning) == 0 {
			vals = nil // the RETURNING true that told it went in
		}
		return Inserted{Values: vals}, nil
	}
	// A new statement, so a new snapshot: it sees the row that made the
	// INSERT do nothing, even if committed after this transaction began.
	rows, err = tx.Query(ctx, selectSQL, q.Tenant, q.Key, q.Fingerprint[:])
	if err != nil {
		return Inserted{}, fmt.Errorf("idempotency: read the row of key %s in %s: %w", q.Key, q.Table, err)
	}
	vals, err = oneRow(rows)
	if err != nil {
		return Inserted{}, fmt.Errorf("idempotency: read the row of key %s in %s: %w", q.Key, q.Table, err)
	}
	if vals == nil {
		// Hidden by row-level security: another tenant's row.
		return Inserted{}, &MismatchError{Tenant: q.Tenant, Key: q.Key, Detail: "the key is taken in " + q.Table}
	}
	// NULL (a fingerprint column left empty by another writer) is not
	// the same.
	sameTenant, _ := vals[0].(bool)
	sameFP, _ := vals[1].(bool)
	switch {
	case !sameTenant:
		return Inserted{}, &MismatchError{Tenant: q.Tenant, Key: q.Key, Detail: "the key is taken in " + q.Table}
	case !sameFP:
		return Inserted{}, &MismatchError{Tenant: q.Tenant, Key: q.Key, Detail: "another row of " + q.Table + " has it"}
	}
	return Inserted{Values: vals[2:], Replayed: true}, nil
}

// oneRow returns the values of the only row of rows, nil when there is none.
func oneRow(rows pgx.Rows) ([]any, error) {
	defer rows.Close()
	var vals []any
	if rows.Next() {
		v, err := rows.Values()
		if err != nil {
			return nil, err
		}
		vals = v
		if vals == nil {
			vals = []any{}
		}
	}
	return vals, rows.Err()
}

// normalize fills in the defaults of ins and checks it.
func (ins Insert) normalize() (Insert, error) {
	var problems []error
	if ins.Table == "" {
		problems = append(problems, errors.New("Insert.Table is empty"))
	}
	if ins.Tenant == "" {
		problems = append(problems, ErrNoTenant)
	}
	if ins.Key.IsZero() {
		problems = append(problems, errors.New("Insert.Key is zero: make one with NewKey before the first attempt"))
	}
	if len(ins.Columns) != len(ins.Values) {
		problems = append(problems, fmt.Errorf("Insert has %d columns and %d values", len(ins.Columns), len(ins.Values)))
	}
	ins.TenantColumn = or(ins.TenantColumn, "tenant_id")
	ins.KeyColumn = or(ins.KeyColumn, "idempotency_key")
	ins.FingerprintColumn = or(ins.FingerprintColumn, "idempotency_fingerprint")
	if err := errors.Join(problems...); err != nil {
		return ins, fmt.Errorf("idempotency: %w", err)
	}
	if ins.Fingerprint == (Fingerprint{}) {
		req := make(map[string]any, len(ins.Columns))
		for i, c := range ins.Columns {
			req[c] = ins.Values[i]
		}
		fp, err := FingerprintOf("INSERT "+ins.Table, req)
		if err != nil {
			return ins, fmt.Errorf("idempotency: %w; give Insert.Fingerprint instead", err)
		}
		ins.Fingerprint = fp
	}
	return ins, nil
}

// statements returns the INSERT (parameters: tenant, key, fingerprint,
// then the values) and the SELECT of the row already there (tenant, key,
// fingerprint), which returns whether the row is the tenant's, whether
// its fingerprint matches, then the Returning columns.
func (ins Insert) statements() (insertSQL, selectSQL string) {
	t := quoteTable(ins.Table)
	cols := []string{quoteIdent(ins.TenantColumn), quoteIdent(ins.KeyColumn), quoteIdent(ins.FingerprintColumn)}
	params := []string{"$1", "$2", "$3"}
	for i, c := range ins.Columns {
		cols = append(cols, quoteIdent(c))
		params = append(params, fmt.Sprintf("$%d", i+4))
	}
	ret := make([]string, len(ins.Returning))
	for i, c := range ins.Returning {
		ret[i] = quoteIdent(c)
	}
	returning := ""
	if len(ret) > 0 {
		returning = " RETURNING " + strings.Join(ret, ", ")
	} else {
		returning = " RETURNING true" // a row tells that it went in
	}
	insertSQL = "INSERT INTO " + t + " (" + strings.Join(cols, ", ") + ") VALUES (" + strings.Join(params, ", ") +
		") ON CONFLICT (" + quoteIdent(ins.KeyColumn) + ") DO NOTHING" + returning
	sel := []string{cols[0] + " = $1", cols[2] + " = $3"}
	sel = append(sel, ret...)
	selectSQL = "SELECT " + strings.Join(sel, ", ") + " FROM " + t + " WHERE " + cols[1] + " = $2"
	return insertSQL, selectSQL
}

func quoteIdent(s string) string { return pgx.Identifier{s}.Sanitize() }

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
