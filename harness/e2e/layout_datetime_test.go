package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/walhouse/walhouse/harness/testenv"
)

// TestIntegrationLayoutDateTimePrecision loads a timestamptz column
// overridden as DateTime64(3) and a timestamp column as DateTime64(0):
// their fractions are truncated to milliseconds and seconds (before 1970
// too, towards the earlier time), equal to PostgreSQL's date_trunc, through
// the copy, the stream and a change of the timestamp column to timestamptz,
// which keeps the override.
func TestIntegrationLayoutDateTimePrecision(t *testing.T) {
	p := newPipeline(t)
	table, qt := p.table("dt64", `(tenant_id text, id int, at timestamptz, day timestamp, PRIMARY KEY (tenant_id, id))`)
	p.exec(fmt.Sprintf(`INSERT INTO %s SELECT 't' || (i %% 2), i, '2024-01-15 10:00:00+00'::timestamptz + i * interval '1.234567 seconds', '1960-06-01 00:00:00'::timestamp + i * interval '0.999999 seconds' FROM generate_series(1, 40) i`, qt))

	file := filepath.Join(t.TempDir(), "walhouse.yaml")
	cfg := fmt.Sprintf("layout:\n  public.%s:\n    columns:\n      at: {type: \"DateTime64(3)\"}\n      day: {type: \"DateTime64(0, 'UTC')\"}\n", table)
	if err := os.WriteFile(file, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	capture := p.runCapture(append([]string{"--config", file}, p.captureArgs([]string{table})...))
	sink := testenv.Start(t, "sink", walhouseBin, append([]string{"--config", file}, p.sinkArgs()...)...)

	p.exec(fmt.Sprintf(`UPDATE %s SET at = at + interval '0.000999 seconds', day = NULL WHERE id %% 3 = 0`, qt))
	p.exec(fmt.Sprintf(`INSERT INTO %s VALUES ('t0', 100, '1969-12-31 23:59:59.999999+00', '1969-12-31 23:59:59.5')`, qt))
	pgQuery := fmt.Sprintf(`SELECT tenant_id, id::text, coalesce(to_char(date_trunc('milliseconds', at AT TIME ZONE 'UTC'), 'YYYY-MM-DD HH24:MI:SS.MS'), 'NULL'), coalesce(to_char(date_trunc('second', day), 'YYYY-MM-DD HH24:MI:SS'), 'NULL') FROM %s AS t ORDER BY t.tenant_id, t.id`, qt)
	chQuery := fmt.Sprintf("SELECT tenant_id, toString(id), ifNull(toString(at), 'NULL'), ifNull(toString(day), 'NULL') FROM `%s`.`%s` FINAL WHERE _is_deleted = 0 ORDER BY tenant_id, id", p.database, table)
	p.converge(pgQuery, chQuery, capture, sink)
	want := map[string]string{"at": "Nullable(DateTime64(3, 'UTC'))", "day": "Nullable(DateTime64(0, 'UTC'))"}
	p.checkColumnTypes(table, want)

	// timestamp to timestamptz (the session is UTC: the same instants).
	p.exec(fmt.Sprintf(`ALTER TABLE %s ALTER COLUMN day TYPE timestamptz USING day AT TIME ZONE 'UTC'`, qt))
	p.exec(fmt.Sprintf(`UPDATE %s SET day = '2030-01-01 12:34:56.789+00' WHERE id %% 4 = 0`, qt))
	p.converge(fmt.Sprintf(`SELECT tenant_id, id::text, coalesce(to_char(date_trunc('milliseconds', at AT TIME ZONE 'UTC'), 'YYYY-MM-DD HH24:MI:SS.MS'), 'NULL'), coalesce(to_char(date_trunc('second', day AT TIME ZONE 'UTC'), 'YYYY-MM-DD HH24:MI:SS'), 'NULL') FROM %s AS t ORDER BY t.tenant_id, t.id`, qt), chQuery, capture, sink)
	p.checkColumnTypes(table, want)
}
