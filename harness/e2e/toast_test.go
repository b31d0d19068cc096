package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/jackc/pgx/v5"

	"github.com/walhouse/walhouse/harness/testenv"
	"github.com/walhouse/walhouse/verify"
)

// TestIntegrationUnchangedToastKeepsValue updates rows whose large values
// (> 8 KB, stored out of line by TOAST) do not change. PostgreSQL then sends
// those columns as "unchanged" without their value and without REPLICA
// IDENTITY FULL; ClickHouse must keep the stored value, never NULL or a
// placeholder, both when the row was loaded in an earlier batch and when
// the insert and the update arrive in one batch.
func TestIntegrationUnchangedToastKeepsValue(t *testing.T) {
	p := newPipeline(t)
	table, qt := p.table("toast", `(tenant_id text, id int, big text, doc jsonb, n int, PRIMARY KEY (tenant_id, id))`)
	// Incompressible values, so PostgreSQL moves them out of line.
	p.exec(fmt.Sprintf(`ALTER TABLE %s ALTER COLUMN big SET STORAGE EXTERNAL`, qt))
	capture := p.startCapture(table)
	sink := p.startSink()

	const bigValue = `(SELECT string_agg(md5(random()::text || g::text), '') FROM generate_series(1, 400) g)` // 12.8 KB
	p.exec(fmt.Sprintf(`INSERT INTO %s SELECT 't' || (i %% 2), i, %s, jsonb_build_object('blob', %s), 0 FROM generate_series(1, 20) i`, qt, bigValue, bigValue))
	pgQuery := fmt.Sprintf(`SELECT tenant_id, id::text, md5(big), length(big)::text, md5(doc::text), n::text FROM %s AS t ORDER BY t.tenant_id, t.id`, qt)
	chQuery := fmt.Sprintf("SELECT tenant_id, toString(id), lower(hex(MD5(ifNull(big, '')))), toString(length(ifNull(big, ''))), lower(hex(MD5(ifNull(doc, '')))), toString(n)"+
		" FROM `%s`.`%s` FINAL WHERE _is_deleted = 0 ORDER BY tenant_id, id", p.database, table)
	p.converge(pgQuery, chQuery, capture, sink)

	// Updates that leave the large values alone: loaded in later batches,
	// the unchanged values come from ClickHouse.
	p.exec(fmt.Sprintf(`UPDATE %s SET n = n + 1`, qt))
	p.exec(fmt.Sprintf(`UPDATE %s SET n = n + 1 WHERE id %% 2 = 0`, qt))
	// Insert and update in one transaction: the value comes from the same
	// batch.
	p.exec(fmt.Sprintf(`BEGIN; INSERT INTO %s VALUES ('t0', 100, %s, '{"x": 1}', 0); UPDATE %s SET n = 5 WHERE id = 100; COMMIT`, qt, bigValue, qt))
	p.converge(pgQuery, chQuery, capture, sink)
}

// TestIntegrationUnchangedToastWithUnusualKeys does the same for rows whose
// key holds types whose PostgreSQL text differs from what ClickHouse stores
// (bytea, bool, timestamptz, date) and a tenant with a backslash and a
// tab: the sink must still find the stored row to take the unchanged value
// from.
func TestIntegrationUnchangedToastWithUnusualKeys(t *testing.T) {
	p := newPipeline(t)
	table, qt := p.table("toastkeys", `(tenant_id text, k bytea, flag bool, at timestamptz, d date, big text, n int, PRIMARY KEY (tenant_id, k, flag, at, d))`)
	p.exec(fmt.Sprintf(`ALTER TABLE %s ALTER COLUMN big SET STORAGE EXTERNAL`, qt))
	capture := p.startCapture(table)
	sink := p.startSink()

	const bigValue = `(SELECT string_agg(md5(random()::text || g::text), '') FROM generate_series(1, 400) g)`
	p.exec(fmt.Sprintf(`INSERT INTO %s SELECT E'a\\\\b\tc', decode(lpad(to_hex(i), 4, '0') || '00ff', 'hex'), i %% 2 = 0, '2024-05-01 12:00:00.123456+02'::timestamptz + i * interval '1 day', date '1969-12-25' + i, %s, 0 FROM generate_series(1, 10) i`, qt, bigValue))
	pgQuery := fmt.Sprintf(`SELECT tenant_id, encode(k, 'hex'), flag::text, d::text, md5(big), n::text FROM %s ORDER BY k`, qt)
	chQuery := fmt.Sprintf("SELECT tenant_id, lower(hex(k)), toString(flag), toString(d), lower(hex(MD5(ifNull(big, '')))), toString(n) FROM `%s`.`%s` FINAL WHERE _is_deleted = 0 ORDER BY k", p.database, table)
	p.converge(pgQuery, chQuery, capture, sink)

	// Loaded in later batches: the unchanged value comes from ClickHouse.
	p.exec(fmt.Sprintf(`UPDATE %s SET n = n + 1`, qt))
	p.converge(pgQuery, chQuery, capture, sink)
}

// TestIntegrationUnchangedToastKeyChange changes rows' keys while their
// large values stay as they are. PostgreSQL sends the new row with those
// values "unchanged" and the old key; capture emits a delete of the old key
// and the update under the new one, possibly to another partition, with
// the values read from the source row (not from the new key in ClickHouse,
// which has none, nor from the old key's tombstone). Here the old keys'
// rows are loaded first; TestIntegrationUnchangedToastKeyChangeUnloaded
// loads both in one flush.
func TestIntegrationUnchangedToastKeyChange(t *testing.T) {
	p := newPipeline(t)
	table, qt := p.table("toastkey", `(tenant_id text, id int, big text, n int, PRIMARY KEY (tenant_id, id))`)
	p.exec(fmt.Sprintf(`ALTER TABLE %s ALTER COLUMN big SET STORAGE EXTERNAL`, qt))
	capture := p.startCapture(table)
	sink := p.startSink()

	const bigValue = `(SELECT string_agg(md5(random()::text || g::text), '') FROM generate_series(1, 400) g)`
	p.exec(fmt.Sprintf(`INSERT INTO %s SELECT 't' || (i %% 2), i, %s, 0 FROM generate_series(1, 20) i`, qt, bigValue))
	pgQuery := fmt.Sprintf(`SELECT tenant_id, id::text, md5(big), n::text FROM %s AS t ORDER BY t.tenant_id, t.id`, qt)
	chQuery := fmt.Sprintf("SELECT tenant_id, toString(id), lower(hex(MD5(ifNull(big, '')))), toString(n)"+
		" FROM `%s`.`%s` FINAL WHERE _is_deleted = 0 ORDER BY tenant_id, id", p.database, table)
	p.converge(pgQuery, chQuery, capture, sink)

	// New keys for loaded rows: the value comes from ClickHouse.
	p.exec(fmt.Sprintf(`UPDATE %s SET id = id + 1000`, qt))
	p.converge(pgQuery, chQuery, capture, sink)
	// A key changed again, with another column.
	p.exec(fmt.Sprintf(`UPDATE %s SET id = id + 1000, n = 1 WHERE id %% 3 = 0`, qt))
	p.converge(pgQuery, chQuery, capture, sink)
}

// TestIntegrationUnchangedToastKeyChangeUnloaded changes rows' keys before
// the sink has loaded them: their inserts and key changes wait in Kafka
// and reach the sink in one flush, the old keys' rows in other partitions
// than the updates that leave their large values unchanged. ClickHouse
// does not have the old keys' rows yet when such an update loads, so
// capture must read the values from the source row by the new key. The
// table's layout sorts by a column it updates as well (a move with the
// same primary key), and a row whose key changes twice in one transaction
// is gone under its middle key when capture reads it.
func TestIntegrationUnchangedToastKeyChangeUnloaded(t *testing.T) {
	p := newPipeline(t)
	table, qt := p.table("toastmove", `(tenant_id text, id int, status text NOT NULL, big text, n int, PRIMARY KEY (tenant_id, id))`)
	p.exec(fmt.Sprintf(`ALTER TABLE %s ALTER COLUMN big SET STORAGE EXTERNAL`, qt))
	// The layout's sorting column in the replica identity, without FULL:
	// the old row does not carry the large value.
	p.exec(fmt.Sprintf(`CREATE UNIQUE INDEX %s ON %s (tenant_id, status, id)`, pgx.Identifier{table + "_identity"}.Sanitize(), qt))
	p.exec(fmt.Sprintf(`ALTER TABLE %s REPLICA IDENTITY USING INDEX %s`, qt, pgx.Identifier{table + "_identity"}.Sanitize()))
	file := filepath.Join(t.TempDir(), "walhouse.yaml")
	if err := os.WriteFile(file, []byte(fmt.Sprintf("layout:\n  public.%s:\n    order_by: [tenant_id, status, id]\n", table)), 0o600); err != nil {
		t.Fatal(err)
	}
	capture := p.runCapture(append([]string{"--config", file}, p.captureArgs([]string{table})...))

	const rows = 60
	// A value of its own for each row (the subquery names i): a value
	// taken from another row shows.
	const bigValue = `(SELECT string_agg(md5(random()::text || g::text || i::text), '') FROM generate_series(1, 400) g)`
	p.exec(fmt.Sprintf(`INSERT INTO %s SELECT 't' || (i %% 2), i, 'new', %s, 0 FROM generate_series(1, %d) i`, qt, bigValue, rows))
	p.exec(fmt.Sprintf(`UPDATE %s SET id = id + 1000`, qt))
	p.exec(fmt.Sprintf(`UPDATE %s SET status = 'paid' WHERE id %% 3 = 0`, qt))
	p.exec(fmt.Sprintf(`BEGIN; UPDATE %[1]s SET id = id + 1000 WHERE id %% 5 = 0; UPDATE %[1]s SET id = id + 1000, n = 1 WHERE id > 2000; COMMIT`, qt))
	// An insert, a delete for every row moved (status and id), an update
	// for every change.
	p.waitProduced(p.prefix+".public."+table, rows+2*(rows+rows/3+2*(rows/5)))
	sink := testenv.Start(t, "sink", walhouseBin, append([]string{"--config", file}, p.sinkArgs()...)...)

	pgQuery := fmt.Sprintf(`SELECT tenant_id, id::text, status, md5(big), n::text FROM %s AS t ORDER BY t.tenant_id, t.id`, qt)
	chQuery := fmt.Sprintf("SELECT tenant_id, toString(id), status, lower(hex(MD5(ifNull(big, '')))), toString(n)"+
		" FROM `%s`.`%s` FINAL WHERE _is_deleted = 0 ORDER BY tenant_id, id", p.database, table)
	p.converge(pgQuery, chQuery, capture, sink)

	// Loaded rows: a status change and a key change, while the sink runs.
	p.exec(fmt.Sprintf(`UPDATE %s SET status = 'sent' WHERE id %% 2 = 0`, qt))
	p.exec(fmt.Sprintf(`UPDATE %s SET id = id + 10000 WHERE id %% 7 = 0`, qt))
	p.converge(pgQuery, chQuery, capture, sink)
}

// TestIntegrationUnchangedToastNaNKey updates rows keyed by a double
// precision (and a real) NaN whose large values do not change: the sink
// finds the stored row by its key to take them back, though a NaN equals
// nothing, and ClickHouse's IN tells NaNs apart by their bits (the stored
// NaN has the bits the server parses "nan" into). walhouse verify then
// finds nothing to report: PostgreSQL's one NaN key is ClickHouse's one
// (FINAL collapses NaN keys, whatever their bits), and finds a value
// changed behind its back in a row keyed by NaN or by finite floats.
func TestIntegrationUnchangedToastNaNKey(t *testing.T) {
	p := newPipeline(t)
	table, qt := p.table("toastnan", `(tenant_id text, k float8, r real, big text, n int, PRIMARY KEY (tenant_id, k, r))`)
	p.exec(fmt.Sprintf(`ALTER TABLE %s ALTER COLUMN big SET STORAGE EXTERNAL`, qt))
	capture := p.startCapture(table)
	sink := p.startSink()

	const bigValue = `(SELECT string_agg(md5(random()::text || g::text), '') FROM generate_series(1, 400) g)`
	p.exec(fmt.Sprintf(`INSERT INTO %s SELECT 't' || (i %% 2), CASE WHEN i < 4 THEN 'NaN' ELSE i + 0.5 END, CASE WHEN i %% 3 = 0 THEN 'NaN' ELSE 1.5 END, %s, 0 FROM generate_series(0, 9) i`, qt, bigValue))
	pgQuery := fmt.Sprintf(`SELECT tenant_id, lower(k::text), lower(r::text), md5(big), n::text FROM %s AS t ORDER BY t.tenant_id, t.k, t.r`, qt)
	chQuery := fmt.Sprintf("SELECT tenant_id, toString(k), toString(r), lower(hex(MD5(ifNull(big, '')))), toString(n)"+
		" FROM `%s`.`%s` FINAL WHERE _is_deleted = 0 ORDER BY tenant_id, isNaN(k), k, isNaN(r), r", p.database, table)
	p.converge(pgQuery, chQuery, capture, sink)

	// Loaded in a later batch: the unchanged value comes from ClickHouse,
	// found by the NaN key.
	p.exec(fmt.Sprintf(`UPDATE %s SET n = n + 1`, qt))
	p.converge(pgQuery, chQuery, capture, sink)
	p.exec(fmt.Sprintf(`UPDATE %s SET n = n + 1 WHERE k = 'NaN'`, qt))
	p.converge(pgQuery, chQuery, capture, sink)

	verifyRun := func(args ...string) ([]string, []byte, error) {
		report := filepath.Join(t.TempDir(), "report.json")
		out, err := exec.Command(walhouseBin, append([]string{"verify", "--pg", p.env.PG, "--clickhouse", p.env.ClickHouse, "--database", p.database,
			"--tables", "public." + table, "--load-wait", "60s", "--report", report}, args...)...).CombinedOutput()
		raw, rerr := os.ReadFile(report)
		if rerr != nil {
			t.Fatalf("walhouse verify: %v, no report (%v)\n%s", err, rerr, out)
		}
		var rep verify.Report
		if err := json.Unmarshal(raw, &rep); err != nil {
			t.Fatalf("verify report: %v\n%s", err, raw)
		}
		var found []string
		for _, tr := range rep.Tables {
			for _, m := range tr.Mismatches {
				key := []string{m.Tenant}
				for _, k := range m.Key {
					key = append(key, k.Value)
				}
				var cols []string
				for _, c := range m.Columns {
					cols = append(cols, c.Column)
				}
				found = append(found, m.Kind.String()+" "+strings.Join(key, "/")+" "+strings.Join(cols, ","))
			}
		}
		return found, out, err
	}
	if found, out, err := verifyRun(); err != nil || len(found) > 0 {
		t.Errorf("walhouse verify: %v, %q; want no difference\n%s", err, found, out)
	}
	// Values of a NaN-keyed row and of a row keyed by finite floats
	// changed in ClickHouse: verify's check of a differing key reads each
	// again by its key (a float's as its decimal text, NaN by isNaN, which
	// a merged part's statistics do not prune), reports the values, not
	// the row missing (nor an error: the bits' hex are no float text),
	// and --repair mends them.
	p.chExec(fmt.Sprintf("ALTER TABLE `%s`.`%s` UPDATE n = 99 WHERE tenant_id = 't0' AND (isNaN(k) AND isNaN(r) OR k = 4.5)", p.database, table), ch.Settings{"mutations_sync": 2})
	want := []string{"values_differ t0/4.5/1.5 n", "values_differ t0/NaN/NaN n"} // keys as readable text
	if found, out, err := verifyRun("--repair"); err != nil || !slices.Equal(found, want) {
		t.Errorf("walhouse verify --repair: %v, %q; want %q\n%s", err, found, want, out)
	}
	p.converge(pgQuery, chQuery, capture, sink)
	if found, out, err := verifyRun(); err != nil || len(found) > 0 {
		t.Errorf("walhouse verify after --repair: %v, %q; want no difference\n%s", err, found, out)
	}
}
