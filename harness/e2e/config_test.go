package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walhouse/walhouse/harness/testenv"
)

// TestIntegrationConfigFile runs capture and the sink from one
// configuration file, given by --config to one and by WALHOUSE_CONFIG to
// the other, with nothing on their command lines: a multi-tenant table, a
// table whose tenant column is named per table, and a single-tenant table
// (no tenant column) that --default-tenant's key alone maps to one tenant.
// ClickHouse must end up equal to PostgreSQL, value for value.
func TestIntegrationConfigFile(t *testing.T) {
	p := newPipeline(t)
	orders, accounts, countries := testenv.Name("orders"), testenv.Name("accounts"), testenv.Name("countries")
	p.exec(fmt.Sprintf(`CREATE TABLE %s (tenant_id text NOT NULL, id bigint NOT NULL, amount numeric(12,2), PRIMARY KEY (tenant_id, id))`, pgx.Identifier{orders}.Sanitize()))
	p.exec(fmt.Sprintf(`CREATE TABLE %s (org text NOT NULL, id bigint NOT NULL, name text, PRIMARY KEY (org, id))`, pgx.Identifier{accounts}.Sanitize()))
	p.exec(fmt.Sprintf(`CREATE TABLE %s (code text PRIMARY KEY, name text NOT NULL)`, pgx.Identifier{countries}.Sanitize()))
	p.exec(fmt.Sprintf(`INSERT INTO %s SELECT 't' || (i %% 3), i, i * 1.5 FROM generate_series(1, 200) i`, pgx.Identifier{orders}.Sanitize()))
	p.exec(fmt.Sprintf(`INSERT INTO %s SELECT 'org' || (i %% 2), i, 'acct ' || i FROM generate_series(1, 50) i`, pgx.Identifier{accounts}.Sanitize()))
	p.exec(fmt.Sprintf(`INSERT INTO %s VALUES ('DE', 'Germany'), ('FR', 'France'), ('NL', 'Netherlands')`, pgx.Identifier{countries}.Sanitize()))

	file := filepath.Join(t.TempDir(), "walhouse.yaml")
	cfg := fmt.Sprintf(`
source:
  postgres: {url: %q}
  slot: %s
  publication: %s
  tables: [public.%s, public.%s, public.%s]
  tenant_columns:
    public.%s: org
  default_tenant: shared
capture:
  status_interval: 1s
  heartbeat_interval: 1s
kafka: {brokers: [%q]}
topics: {prefix: %s, partitions: 3}
sink: {group: %s, max_wait: 200ms}
dedup: {addr: "off"}
clickhouse: {url: %q, database: %s}
log: {level: info, format: json}
`, p.env.PG, p.slot, p.pub, orders, accounts, countries, accounts, p.env.Kafka, p.prefix, p.group, p.env.ClickHouse, p.database)
	if err := os.WriteFile(file, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	// The tests' own environment must not override the file.
	for _, v := range []string{"WALHOUSE_PG_URL", "WALHOUSE_KAFKA_BROKERS", "WALHOUSE_CLICKHOUSE_URL", "WALHOUSE_REDIS_ADDR", "WALHOUSE_CLICKHOUSE_DATABASE", "WALHOUSE_TOPIC_PREFIX", "WALHOUSE_SLOT"} {
		t.Setenv(v, "")
	}
	capture := testenv.Start(t, "capture", walhouseBin, "--config", file, "capture")
	waitLog(t, capture, `"msg":"streaming"`)
	t.Setenv("WALHOUSE_CONFIG", file)
	sink := testenv.Start(t, "sink", walhouseBin, "sink")

	p.exec(fmt.Sprintf(`UPDATE %s SET amount = amount + 1 WHERE id %% 7 = 0`, pgx.Identifier{orders}.Sanitize()))
	p.exec(fmt.Sprintf(`DELETE FROM %s WHERE id %% 10 = 0`, pgx.Identifier{accounts}.Sanitize()))
	p.exec(fmt.Sprintf(`INSERT INTO %s VALUES ('JP', 'Japan')`, pgx.Identifier{countries}.Sanitize()))
	p.exec(fmt.Sprintf(`UPDATE %s SET name = 'Deutschland' WHERE code = 'DE'`, pgx.Identifier{countries}.Sanitize()))
	p.exec(fmt.Sprintf(`DELETE FROM %s WHERE code = 'FR'`, pgx.Identifier{countries}.Sanitize()))

	p.converge(fmt.Sprintf(`SELECT tenant_id, id::text, trim_scale(amount)::text FROM %s AS t ORDER BY t.tenant_id, t.id`, pgx.Identifier{orders}.Sanitize()),
		fmt.Sprintf("SELECT tenant_id, toString(id), toString(amount) FROM `%s`.`%s` FINAL WHERE _is_deleted = 0 ORDER BY tenant_id, id", p.database, orders), capture, sink)
	p.converge(fmt.Sprintf(`SELECT org, id::text, name FROM %s AS t ORDER BY t.org, t.id`, pgx.Identifier{accounts}.Sanitize()),
		fmt.Sprintf("SELECT org, toString(id), name FROM `%s`.`%s` FINAL WHERE _is_deleted = 0 ORDER BY org, id", p.database, accounts), capture, sink)
	// The single-tenant table: every row under the default tenant.
	p.converge(fmt.Sprintf(`SELECT 'shared', code, name FROM %s ORDER BY code`, pgx.Identifier{countries}.Sanitize()),
		fmt.Sprintf("SELECT tenant_id, code, name FROM `%s`.`%s` FINAL WHERE _is_deleted = 0 ORDER BY code", p.database, countries), capture, sink)
	sink.Stop()
	capture.Stop()
	if err := capture.Wait(30 * time.Second); err != nil {
		t.Errorf("capture did not stop cleanly: %v\n%s", err, capture.Output())
	}
}
