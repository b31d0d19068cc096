package e2e

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"github.com/walhouse/walhouse/harness/testenv"
)

// TestIntegrationReadBackRefused runs a sink whose every read-back of
// unchanged TOAST values sends a query ClickHouse refuses
// (sink.readback=error: a parameter it cannot parse, as a date key was
// sent until it was fixed). The updates that leave a large value alone go
// to the dead letters with ClickHouse's refusal and the fix, and
// everything else of the same transaction loads (inserts, deletes, an
// update that sets the large value), as do the changes after: FINAL ends
// equal to PostgreSQL, those updates aside, and no row was inserted twice.
// Before, the insert failed on every retry and the table stalled.
func TestIntegrationReadBackRefused(t *testing.T) {
	p := newPipeline(t)
	table, qt := p.table("refused", `(tenant_id text, id int, big text, n int, PRIMARY KEY (tenant_id, id))`)
	p.exec(fmt.Sprintf(`ALTER TABLE %s ALTER COLUMN big SET STORAGE EXTERNAL`, qt))
	const bigValue = `(SELECT string_agg(md5(random()::text || g::text), '') FROM generate_series(1, 400) g)` // 12.8 KB, out of line
	p.exec(fmt.Sprintf(`INSERT INTO %s SELECT 't' || (i %% 2), i, %s, 0 FROM generate_series(1, 20) i`, qt, bigValue))
	capture := p.startCapture(table)
	env, err := exec.LookPath("env")
	if err != nil {
		t.Fatal(err)
	}
	sink := killAtEnd(t, testenv.Start(t, "sink (sink.readback=error)", env, append([]string{"WALHOUSE_FAILPOINTS=sink.readback=error", walhouseBin}, p.sinkArgs()...)...))

	// Copied first, so that the updates' unchanged values are read back
	// from ClickHouse (an earlier record of the same insert would give
	// them otherwise).
	pgQuery := fmt.Sprintf(`SELECT tenant_id, id::text, md5(big), n::text FROM %s AS t ORDER BY t.tenant_id, t.id`, qt)
	chQuery := fmt.Sprintf("SELECT tenant_id, toString(id), lower(hex(MD5(ifNull(big, '')))), toString(n) FROM `%s`.`%s` FINAL WHERE _is_deleted = 0 ORDER BY tenant_id, id", p.database, table)
	p.converge(pgQuery, chQuery, capture, sink)
	p.exec(fmt.Sprintf(`BEGIN;
		UPDATE %[1]s SET n = n + 1 WHERE id %% 5 = 0;
		UPDATE %[1]s SET big = %[2]s, n = n + 1 WHERE id IN (1, 2);
		INSERT INTO %[1]s SELECT 't' || (i %% 2), i, %[2]s, 0 FROM generate_series(21, 30) i;
		DELETE FROM %[1]s WHERE id IN (3, 4);
		COMMIT`, qt, bigValue))
	ls := p.waitDeadLetters(p.prefix+"-dlq", 4, capture, sink)
	for _, l := range ls {
		for _, part := range []string{"ClickHouse refused the query that reads back the unchanged TOAST values", table, "cannot be parsed as Date32", "walhouse dlq replay"} {
			if !strings.Contains(l.Error, part) {
				t.Errorf("dead letter %s: %s; want it to name %q", l.Key, l.Error, part)
			}
		}
	}

	// The stream goes on. The updated rows' n stays as it was in
	// ClickHouse.
	pgQuery = fmt.Sprintf(`SELECT tenant_id, id::text, md5(big), (CASE WHEN id %% 5 = 0 AND id <= 20 THEN n - 1 ELSE n END)::text FROM %s AS t ORDER BY t.tenant_id, t.id`, qt)
	p.exec(fmt.Sprintf(`INSERT INTO %s VALUES ('t1', 31, 'small', 7)`, qt))
	p.exec(fmt.Sprintf(`UPDATE %s SET big = 'changed', n = n + 1 WHERE id = 6`, qt))
	p.converge(pgQuery, chQuery, capture, sink)
	if d := p.chInt(fmt.Sprintf("SELECT count() - uniqExact(tuple(tenant_id, id, _version)) FROM `%s`.`%s`", p.database, table)); d != 0 {
		t.Errorf("%d rows were inserted twice (count() - uniqExact(key, _version) without FINAL)", d)
	}
}
