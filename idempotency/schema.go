package idempotency

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// migrateLock is the advisory lock that makes concurrent Migrate calls
// take turns (CREATE … IF NOT EXISTS races with itself).
const migrateLock = 0x77616c6b657973 // "walkeys"

// RowLevelSecurity returns the statements that keep tenants apart in
// table ("schema.table" or "table"): row-level security enabled and forced
// (so the table's owner is held to it too; superusers and roles with
// BYPASSRLS never are), and a policy that shows and accepts only rows whose
// tenantColumn equals TenantSetting. Run them once, when the table is
// made; the policy is named walhouse_tenant. Transactions then set the
// tenant with SetTenant (attempts do it themselves); a transaction that
// sets none sees no row.
func RowLevelSecurity(table, tenantColumn string) []string {
	t, col := quoteTable(table), pgx.Identifier{tenantColumn}.Sanitize()
	match := fmt.Sprintf("%s = NULLIF(current_setting('%s', true), '')", col, TenantSetting)
	return []string{
		"ALTER TABLE " + t + " ENABLE ROW LEVEL SECURITY",
		"ALTER TABLE " + t + " FORCE ROW LEVEL SECURITY",
		"DROP POLICY IF EXISTS walhouse_tenant ON " + t,
		"CREATE POLICY walhouse_tenant ON " + t + " USING (" + match + ") WITH CHECK (" + match + ")",
	}
}

// keyTableDDL creates the key table. result is the first attempt's result;
// a row is only ever visible committed, with it. Pruning crosses tenants,
// which walhouse_tenant forbids: the retention policies let only members of
// PrunerRole delete keys older than a day, of every tenant. Their read
// policy exists because a DELETE whose WHERE names a column needs one; the
// role's column grants keep that read to the key's identity and age, never
// its fingerprint or stored response, and it may write nothing. (These
// policies once turned on with a setting, walhouse.idempotency_prune, that
// any role can SET: it exposed every tenant's keys and responses.)
func keyTableDDL() []string {
	role := pgx.Identifier{PrunerRole}.Sanitize()
	expired := `created_at < now() - interval '1 day'`
	stmts := []string{
		`CREATE SCHEMA IF NOT EXISTS walhouse`,
		`CREATE TABLE IF NOT EXISTS ` + KeyTable + ` (
			tenant_id       text        NOT NULL CHECK (tenant_id <> ''),
			idempotency_key uuid        NOT NULL,
			fingerprint     bytea       NOT NULL CHECK (octet_length(fingerprint) = 32),
			result          bytea       NOT NULL DEFAULT ''::bytea,
			created_at      timestamptz NOT NULL DEFAULT now(),
			PRIMARY KEY (tenant_id, idempotency_key))`,
		`CREATE INDEX IF NOT EXISTS idempotency_keys_created_at ON ` + KeyTable + ` (created_at)`,
		`COMMENT ON TABLE ` + KeyTable + ` IS 'walhouse Layer 1: idempotency keys, their request fingerprints and results (idempotency package); pruned after the retention period; not captured unless asked'`,
		// Roles are the cluster's, so two databases may race to create
		// it: the loser finds it there.
		`DO $$ BEGIN
			IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = '` + PrunerRole + `') THEN
				CREATE ROLE ` + role + ` NOLOGIN;
			END IF;
		EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
		END $$`,
	}
	stmts = append(stmts, RowLevelSecurity(KeyTable, "tenant_id")...)
	return append(stmts,
		`REVOKE ALL ON `+KeyTable+` FROM `+role,
		`GRANT USAGE ON SCHEMA walhouse TO `+role,
		`GRANT SELECT (tenant_id, idempotency_key, created_at), DELETE ON `+KeyTable+` TO `+role,
		`DROP POLICY IF EXISTS walhouse_retention ON `+KeyTable,
		`CREATE POLICY walhouse_retention ON `+KeyTable+` FOR DELETE TO `+role+` USING (`+expired+`)`,
		`DROP POLICY IF EXISTS walhouse_retention_read ON `+KeyTable,
		`CREATE POLICY walhouse_retention_read ON `+KeyTable+` FOR SELECT TO `+role+` USING (`+expired+`)`)
}

// Migrate creates the key table, its index and its row-level security
// policies, or brings them up to date; it is safe to run at every start
// and from several processes at once. When they are there it only looks,
// so an application role without DDL rights may call it too, and running
// traffic is not blocked. Creating them needs CREATE on the database (for
// the walhouse schema) or on the schema; grant the application's role
// USAGE on schema walhouse and SELECT, INSERT, UPDATE, DELETE on the table
// when it is another role. The first Migrate also creates the cluster's
// role PrunerRole, which needs CREATEROLE; without it, have an
// administrator run CREATE ROLE walhouse_idempotency_pruner NOLOGIN first.
func Migrate(ctx context.Context, db DB) error {
	if ok, err := migrated(ctx, db); err != nil || ok {
		return err
	}
	tx, err := db.BeginTx(ctx, pgx.TxOptions{})
	if err != nil {
		return fmt.Errorf("idempotency: create the key table: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(migrateLock)); err != nil {
		return fmt.Errorf("idempotency: create the key table: %w", err)
	}
	for _, s := range keyTableDDL() {
		if _, err := tx.Exec(ctx, s); err != nil {
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) && pgErr.Code == "42501" { // insufficient_privilege
				return fmt.Errorf("idempotency: the key table %s is missing or out of date (a key table of an older walhouse lets any role that sets walhouse.idempotency_prune read every tenant's keys), and this role may not change it: run idempotency.Migrate once as the table's owner, with CREATEROLE or after CREATE ROLE %s NOLOGIN (%s): %w", KeyTable, PrunerRole, firstLine(s), err)
			}
			return fmt.Errorf("idempotency: create the key table (%s): %w", firstLine(s), err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("idempotency: create the key table: %w", err)
	}
	return nil
}

// migrated reports whether the key table is there with row-level security
// forced, the tenant policy and the retention policies of PrunerRole
// (a key table of an older walhouse, whose retention policy turned on with
// a setting, is brought up to date).
func migrated(ctx context.Context, db DB) (bool, error) {
	tx, err := db.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
	if err != nil {
		return false, fmt.Errorf("idempotency: look for the key table: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	var ok bool
	err = tx.QueryRow(ctx, `SELECT c.relrowsecurity AND c.relforcerowsecurity
			AND (SELECT count(*) FROM pg_catalog.pg_policy p WHERE p.polrelid = c.oid AND (
				p.polname = 'walhouse_tenant'
				OR (p.polname, p.polcmd) IN (('walhouse_retention', 'd'), ('walhouse_retention_read', 'r'))
					AND p.polroles = ARRAY[(SELECT oid FROM pg_catalog.pg_roles WHERE rolname = $2)]::oid[])) = 3
		FROM pg_catalog.pg_class c WHERE c.oid = to_regclass($1)`, KeyTable, PrunerRole).Scan(&ok)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("idempotency: look for the key table: %w", err)
	}
	return ok, nil
}

// quoteTable quotes "schema.table" (or "table") as an identifier.
func quoteTable(table string) string {
	if schema, name, ok := strings.Cut(table, "."); ok {
		return pgx.Identifier{schema, name}.Sanitize()
	}
	return pgx.Identifier{table}.Sanitize()
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}
