package e2e

import (
	"fmt"
	"testing"
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
// (bytea, bool, timestamptz) and a tenant with a backslash and a tab: the
// sink must still find the stored row to take the unchanged value from.
func TestIntegrationUnchangedToastWithUnusualKeys(t *testing.T) {
	p := newPipeline(t)
	table, qt := p.table("toastkeys", `(tenant_id text, k bytea, flag bool, at timestamptz, big text, n int, PRIMARY KEY (tenant_id, k, flag, at))`)
	p.exec(fmt.Sprintf(`ALTER TABLE %s ALTER COLUMN big SET STORAGE EXTERNAL`, qt))
	capture := p.startCapture(table)
	sink := p.startSink()

	const bigValue = `(SELECT string_agg(md5(random()::text || g::text), '') FROM generate_series(1, 400) g)`
	p.exec(fmt.Sprintf(`INSERT INTO %s SELECT E'a\\\\b\tc', decode(lpad(to_hex(i), 4, '0') || '00ff', 'hex'), i %% 2 = 0, '2024-05-01 12:00:00.123456+02'::timestamptz + i * interval '1 day', %s, 0 FROM generate_series(1, 10) i`, qt, bigValue))
	pgQuery := fmt.Sprintf(`SELECT tenant_id, encode(k, 'hex'), flag::text, md5(big), n::text FROM %s ORDER BY k`, qt)
	chQuery := fmt.Sprintf("SELECT tenant_id, lower(hex(k)), toString(flag), lower(hex(MD5(ifNull(big, '')))), toString(n) FROM `%s`.`%s` FINAL WHERE _is_deleted = 0 ORDER BY k", p.database, table)
	p.converge(pgQuery, chQuery, capture, sink)

	// Loaded in later batches: the unchanged value comes from ClickHouse.
	p.exec(fmt.Sprintf(`UPDATE %s SET n = n + 1`, qt))
	p.converge(pgQuery, chQuery, capture, sink)
}

// TestIntegrationUnchangedToastKeyChange changes rows' keys while their
// large values stay as they are. PostgreSQL sends the new row with those
// values "unchanged" and the old key; capture emits a delete of the old key
// and the update under the new one, possibly to another partition. The
// sink must take the value from the old key's last live version in
// ClickHouse, not from the new key, which has none, nor from the old key's
// tombstone (docs/limits.md: an old key whose row is loaded in the
// same flush from another partition is not covered).
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
