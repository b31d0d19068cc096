package capture

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// PostgreSQL's logical decoding does not carry DDL, and a Relation message
// names columns without their catalog numbers, so a renamed column looks
// like a dropped one plus a new one. An event trigger closes the gap: after
// every ALTER TABLE it writes, in the same transaction, a logical message
// with the table's columns and their attnums. The message reaches capture
// in order with the rows, so the columns of the next Relation message are
// numbered exactly as they were when the rows were written.

// ddlPrefix marks walhouse's DDL messages in the WAL.
const ddlPrefix = "walhouse_ddl"

// ddlTriggerSQL installs the event trigger (needs superuser, as event
// triggers do) and the table of the message key (see messages.go). The
// function lives in schema walhouse; it runs as its owner (SECURITY
// DEFINER, with a fixed search_path) so that it can read the key, which no
// other role can.
var ddlTriggerSQL = []string{
	`CREATE SCHEMA IF NOT EXISTS walhouse`,
	`CREATE TABLE IF NOT EXISTS walhouse.message_key (
  singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
  key bytea NOT NULL CHECK (length(key) = ` + strconv.Itoa(messageKeyLen) + `))`,
	`REVOKE ALL ON walhouse.message_key FROM PUBLIC`,
	`CREATE OR REPLACE FUNCTION walhouse.ddl_notice() RETURNS event_trigger LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  r record;
  k bytea;
  content bytea;
BEGIN
  SELECT key INTO k FROM walhouse.message_key;
  IF k IS NULL THEN
    RETURN;
  END IF;
  FOR r IN SELECT DISTINCT objid FROM pg_event_trigger_ddl_commands()
           WHERE object_type IN ('table', 'table column') AND classid = 'pg_class'::regclass
  LOOP
    content := convert_to(json_build_object(
      'oid', r.objid::bigint,
      'columns', (SELECT coalesce(json_agg(json_build_array(a.attnum, a.attname,
                    CASE WHEN a.atthasmissing THEN (a.attmissingval::text::text[])[1] END) ORDER BY a.attnum), '[]')
                  FROM pg_attribute a WHERE a.attrelid = r.objid AND a.attnum > 0 AND NOT a.attisdropped))::text, 'UTF8');
    PERFORM pg_logical_emit_message(true, '` + ddlPrefix + `',
      convert_to(encode(sha256(k || sha256(content)), 'hex') || ' ', 'UTF8') || content);
  END LOOP;
END
$fn$`,
	`REVOKE ALL ON FUNCTION walhouse.ddl_notice() FROM PUBLIC`,
	`DROP EVENT TRIGGER IF EXISTS walhouse_ddl`,
	`CREATE EVENT TRIGGER walhouse_ddl ON ddl_command_end WHEN TAG IN ('ALTER TABLE') EXECUTE FUNCTION walhouse.ddl_notice()`,
	// A rewrite changes stored values without row changes (see
	// rewrite.go); PostgreSQL fires table_rewrite, under the command's
	// ACCESS EXCLUSIVE lock, for every table ALTER TABLE or ALTER TYPE
	// rewrites, a partition included (named with its root, which is what
	// publish_via_partition_root captures).
	`CREATE OR REPLACE FUNCTION walhouse.rewrite_notice() RETURNS event_trigger LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  k bytea;
  rel oid := pg_event_trigger_table_rewrite_oid();
  root oid := coalesce(pg_partition_root(pg_event_trigger_table_rewrite_oid()), pg_event_trigger_table_rewrite_oid());
  content bytea;
BEGIN
  SELECT key INTO k FROM walhouse.message_key;
  IF k IS NULL THEN
    RETURN;
  END IF;
  content := convert_to(json_build_object(
    'oid', rel::bigint,
    'table', (SELECT json_build_array(n.nspname, c.relname) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = rel),
    'root', (SELECT json_build_array(n.nspname, c.relname) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = root),
    'reason', pg_event_trigger_table_rewrite_reason())::text, 'UTF8');
  PERFORM pg_logical_emit_message(true, '` + rewritePrefix + `',
    convert_to(encode(sha256(k || sha256(content)), 'hex') || ' ', 'UTF8') || content);
END
$fn$`,
	`REVOKE ALL ON FUNCTION walhouse.rewrite_notice() FROM PUBLIC`,
	`DROP EVENT TRIGGER IF EXISTS walhouse_rewrite`,
	`CREATE EVENT TRIGGER walhouse_rewrite ON table_rewrite EXECUTE FUNCTION walhouse.rewrite_notice()`,
	// ALTER TYPE ... RENAME VALUE changes what every stored value of the
	// label reads as, in every table with a column of the enum, without a
	// rewrite, a row change or a table_rewrite event (see enumRenamed in
	// rewrite.go). ddl_command_end cannot tell a rename from ADD VALUE
	// (one command tag, no readable command), so walhouse_enum_labels
	// keeps every label by its pg_enum OID at ddl_command_start (in a
	// transaction-local setting) and walhouse_enum compares: a label OID
	// that reads otherwise now was renamed. It then writes a rewrite
	// notice, with the enum's name, for each table with a column of the
	// enum, of an array or domain of it, or of a composite or range type
	// holding it (the columns, and those of the enum itself); a partition
	// is named with its root, as table_rewrite names it. (A multirange over such a range is not followed: its
	// catalog columns differ by PostgreSQL version.) JIT is off: the
	// recursive query's estimate would make every ALTER TYPE compile it,
	// which took 1-2 s where the query takes milliseconds.
	`CREATE OR REPLACE FUNCTION walhouse.enum_labels() RETURNS event_trigger LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
  PERFORM set_config('walhouse.enum_labels', coalesce((SELECT json_object_agg(oid, enumlabel) FROM pg_enum)::text, '{}'), true);
END
$fn$`,
	`REVOKE ALL ON FUNCTION walhouse.enum_labels() FROM PUBLIC`,
	`CREATE OR REPLACE FUNCTION walhouse.enum_notice() RETURNS event_trigger LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog, pg_temp SET jit = off AS $fn$
DECLARE
  k bytea;
  before jsonb := nullif(current_setting('walhouse.enum_labels', true), '')::jsonb;
  r record;
  content bytea;
BEGIN
  PERFORM set_config('walhouse.enum_labels', '', true);
  SELECT key INTO k FROM walhouse.message_key;
  IF k IS NULL OR before IS NULL THEN
    RETURN;
  END IF;
  FOR r IN
    WITH RECURSIVE renamed AS (
      SELECT DISTINCT e.enumtypid AS typ FROM pg_event_trigger_ddl_commands() d JOIN pg_enum e ON e.enumtypid = d.objid
      WHERE d.classid = 'pg_type'::regclass AND before ? e.oid::text AND before->>e.oid::text IS DISTINCT FROM e.enumlabel::text
    ), uses(typ, enum) AS (
      SELECT typ, typ FROM renamed
      UNION
      SELECT t.oid, u.enum FROM uses u JOIN pg_type t ON
        (t.typelem = u.typ AND t.typcategory = 'A') OR (t.typtype = 'd' AND t.typbasetype = u.typ)
        OR (t.typtype = 'c' AND EXISTS (SELECT FROM pg_attribute a WHERE a.attrelid = t.typrelid AND a.atttypid = u.typ AND a.attnum > 0 AND NOT a.attisdropped))
        OR (t.typtype = 'r' AND EXISTS (SELECT FROM pg_range g WHERE g.rngtypid = t.oid AND g.rngsubtype = u.typ))
    )
    SELECT c.oid, json_build_array(n.nspname, c.relname) AS tab,
      (SELECT json_build_array(rn.nspname, rc.relname) FROM pg_class rc JOIN pg_namespace rn ON rn.oid = rc.relnamespace
       WHERE rc.oid = coalesce(pg_partition_root(c.oid), c.oid)) AS root,
      (SELECT json_build_array(tn.nspname, et.typname) FROM pg_type et JOIN pg_namespace tn ON tn.oid = et.typnamespace WHERE et.oid = min(u.enum)) AS enum,
      to_json(array_agg(DISTINCT a.attname::text)) AS cols,
      to_json(array_agg(DISTINCT a.attname::text) FILTER (WHERE a.atttypid = u.enum)) AS plain
    FROM uses u JOIN pg_attribute a ON a.atttypid = u.typ AND a.attnum > 0 AND NOT a.attisdropped
    JOIN pg_class c ON c.oid = a.attrelid AND c.relkind = 'r'
    JOIN pg_namespace n ON n.oid = c.relnamespace
    GROUP BY c.oid, n.nspname, c.relname
  LOOP
    content := convert_to(json_build_object('oid', r.oid::bigint, 'table', r.tab, 'root', r.root, 'reason', 0, 'enum', r.enum,
      'columns', r.cols, 'plain', coalesce(r.plain, '[]'))::text, 'UTF8');
    PERFORM pg_logical_emit_message(true, '` + rewritePrefix + `',
      convert_to(encode(sha256(k || sha256(content)), 'hex') || ' ', 'UTF8') || content);
  END LOOP;
END
$fn$`,
	`REVOKE ALL ON FUNCTION walhouse.enum_notice() FROM PUBLIC`,
	`DROP EVENT TRIGGER IF EXISTS walhouse_enum_labels`,
	`CREATE EVENT TRIGGER walhouse_enum_labels ON ddl_command_start WHEN TAG IN ('ALTER TYPE') EXECUTE FUNCTION walhouse.enum_labels()`,
	`DROP EVENT TRIGGER IF EXISTS walhouse_enum`,
	`CREATE EVENT TRIGGER walhouse_enum ON ddl_command_end WHEN TAG IN ('ALTER TYPE') EXECUTE FUNCTION walhouse.enum_notice()`,
}

// installDDLTrigger installs the event trigger and the message key if the
// user may; without it capture still works, but a column renamed while
// capture lags behind may reach ClickHouse as a new column (see docs/limits.md).
func installDDLTrigger(ctx context.Context, conn *pgx.Conn) error {
	var super bool
	if err := conn.QueryRow(ctx, "SELECT rolsuper FROM pg_roles WHERE rolname = current_user").Scan(&super); err != nil {
		return fmt.Errorf("check for superuser: %w", err)
	}
	if !super {
		return fmt.Errorf("user is not a superuser, which event triggers need")
	}
	key, err := newProcessKey()
	if err != nil {
		return err
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	for _, q := range ddlTriggerSQL {
		if _, err := tx.Exec(ctx, q); err != nil {
			return fmt.Errorf("install the DDL event trigger (%s): %w", strings.SplitN(q, "\n", 2)[0], err)
		}
	}
	// The first capture makes the key; later ones, and concurrent ones on
	// other slots, keep it.
	if _, err := tx.Exec(ctx, `INSERT INTO walhouse.message_key (key) VALUES ($1) ON CONFLICT DO NOTHING`, []byte(key)); err != nil {
		return fmt.Errorf("store the message key: %w", err)
	}
	return tx.Commit(ctx)
}

// loadMessageKey returns the shared message key, or a key of this process
// when capture's role cannot read it (see messages.go).
func loadMessageKey(ctx context.Context, conn *pgx.Conn, log *slog.Logger) (messageKey, error) {
	var key []byte
	err := conn.QueryRow(ctx, `SELECT key FROM walhouse.message_key`).Scan(&key)
	if err == nil && len(key) == messageKeyLen {
		return key, nil
	}
	var pgErr *pgconn.PgError
	if err != nil && !errors.Is(err, pgx.ErrNoRows) && !(errors.As(err, &pgErr) && (pgErr.Code == "42P01" || pgErr.Code == "3F000" || pgErr.Code == "42501")) {
		return nil, fmt.Errorf("read the message key: %w", err)
	}
	log.Info("heartbeats are signed with a key of this process: the shared key in walhouse.message_key is missing or not readable by this role (it is made when capture runs as a superuser)")
	return newProcessKey()
}

// ddlNotice is the content of a DDL message.
type ddlNotice struct {
	OID     uint32            `json:"oid"`
	Columns []json.RawMessage `json:"columns"`
}

// columnInfo is what capture knows of a column beyond the Relation message.
type columnInfo struct {
	attnum  int16
	missing *string // value of rows older than the column
}

// parseDDLNotice returns the relation and its columns by name.
func parseDDLNotice(content []byte) (uint32, map[string]columnInfo, error) {
	var n ddlNotice
	if err := json.Unmarshal(content, &n); err != nil {
		return 0, nil, fmt.Errorf("DDL message: %w", err)
	}
	out := make(map[string]columnInfo, len(n.Columns))
	for _, raw := range n.Columns {
		var triple [3]json.RawMessage
		if err := json.Unmarshal(raw, &triple); err != nil {
			return 0, nil, fmt.Errorf("DDL message column: %w", err)
		}
		var (
			info columnInfo
			name string
		)
		if err := json.Unmarshal(triple[0], &info.attnum); err != nil {
			return 0, nil, fmt.Errorf("DDL message column number: %w", err)
		}
		if err := json.Unmarshal(triple[1], &name); err != nil {
			return 0, nil, fmt.Errorf("DDL message column name: %w", err)
		}
		if len(triple[2]) > 0 {
			if err := json.Unmarshal(triple[2], &info.missing); err != nil {
				return 0, nil, fmt.Errorf("DDL message column default: %w", err)
			}
		}
		out[name] = info
	}
	return n.OID, out, nil
}
