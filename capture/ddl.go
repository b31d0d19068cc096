package capture

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
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
// triggers do). The function lives in schema walhouse.
var ddlTriggerSQL = []string{
	`CREATE SCHEMA IF NOT EXISTS walhouse`,
	`CREATE OR REPLACE FUNCTION walhouse.ddl_notice() RETURNS event_trigger LANGUAGE plpgsql AS $fn$
DECLARE
  r record;
BEGIN
  FOR r IN SELECT DISTINCT objid FROM pg_event_trigger_ddl_commands()
           WHERE object_type IN ('table', 'table column') AND classid = 'pg_class'::regclass
  LOOP
    PERFORM pg_logical_emit_message(true, '` + ddlPrefix + `', json_build_object(
      'oid', r.objid::bigint,
      'columns', (SELECT coalesce(json_agg(json_build_array(a.attnum, a.attname,
                    CASE WHEN a.atthasmissing THEN (a.attmissingval::text::text[])[1] END) ORDER BY a.attnum), '[]')
                  FROM pg_attribute a WHERE a.attrelid = r.objid AND a.attnum > 0 AND NOT a.attisdropped))::text);
  END LOOP;
END
$fn$`,
	`DROP EVENT TRIGGER IF EXISTS walhouse_ddl`,
	`CREATE EVENT TRIGGER walhouse_ddl ON ddl_command_end WHEN TAG IN ('ALTER TABLE') EXECUTE FUNCTION walhouse.ddl_notice()`,
}

// installDDLTrigger installs the event trigger if the user may; without it
// capture still works, but a column renamed while capture lags behind may
// reach ClickHouse as a new column (see README).
func installDDLTrigger(ctx context.Context, conn *pgx.Conn) error {
	var super bool
	if err := conn.QueryRow(ctx, "SELECT rolsuper FROM pg_roles WHERE rolname = current_user").Scan(&super); err != nil {
		return fmt.Errorf("check for superuser: %w", err)
	}
	if !super {
		return fmt.Errorf("user is not a superuser, which event triggers need")
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
	return tx.Commit(ctx)
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
