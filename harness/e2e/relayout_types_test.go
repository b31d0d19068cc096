package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/walhouse/walhouse/clickhouse"
	"github.com/walhouse/walhouse/harness/testenv"
	"github.com/walhouse/walhouse/schema"
)

// TestIntegrationRelayoutColumnTypes changes the column types of a
// table's layout after the sink created it (docs/shaping-tables.md#changing-a-layout):
// a numeric(12, 2) to String and a text to LowCardinality(String), and
// runs `walhouse relayout` while capture and a sink that keeps the old
// layout stream and load the table under a steady write load. First a
// layout that would narrow a column (Decimal(12, 2) to Decimal(12, 1)) is
// refused before anything is built, naming the column, both types and
// the fix. Then the relayout is held between its copy and its swap and
// right after the swap, so the sink loads into the old table through the
// forwarding view, and into the new one with the old types in its
// insert's description: that insert must fail on the type mismatch (the
// server would otherwise convert the decimal to text without
// PostgreSQL's trailing zeros) and its retry load the right text. FINAL is
// sampled throughout (every sample exact), ends equal to PostgreSQL text
// for text, and the columns have the new layout's types.
func TestIntegrationRelayoutColumnTypes(t *testing.T) {
	const rows = 5_000
	p := newPipeline(t)
	table, qt := p.table("relayouttypes", `(tenant_id text, id int, status text, price numeric(12, 2), amount int, PRIMARY KEY (tenant_id, id))`)
	// Prices in quarters: most have trailing zeros in PostgreSQL's text
	// (0.50, 3.00), which a decimal's text in ClickHouse drops.
	p.exec(fmt.Sprintf(`INSERT INTO %s SELECT 't' || (i %% 7), i, (ARRAY['new', 'paid', 'sent'])[1 + i %% 3], CASE WHEN i %% 13 = 0 THEN NULL ELSE (i %% 400) * 0.25 END, i FROM generate_series(1, %d) i`, qt, rows))
	p.exec(fmt.Sprintf(`DELETE FROM %s WHERE id %% 50 = 0`, qt))
	live := uint64(rows - rows/50)
	capture := p.runCapture(p.captureArgs([]string{table}))
	sink := p.sink()
	pgQuery := fmt.Sprintf(`SELECT tenant_id, id::text, coalesce(status, 'NULL'), coalesce(price::text, 'NULL'), coalesce(amount::text, 'NULL') FROM %s AS t ORDER BY t.tenant_id, t.id`, qt)
	chQuery := func(price string) string {
		return fmt.Sprintf("SELECT tenant_id, toString(id), ifNull(status, 'NULL'), ifNull(%s, 'NULL'), ifNull(toString(amount), 'NULL')"+
			" FROM `%s`.`%s` FINAL WHERE _is_deleted = 0 ORDER BY tenant_id, id", price, p.database, table)
	}
	p.convergeWithin(2*time.Minute, pgQuery, chQuery("toDecimalString(price, 2)"), capture, sink)
	p.checkColumnTypes(table, map[string]string{"status": "Nullable(String)", "price": "Nullable(Decimal(12, 2))"})

	stop := p.keepWriting(20*time.Millisecond, func(k int) string {
		return fmt.Sprintf(`UPDATE %s SET status = (ARRAY['new', 'paid', 'sent', 'held'])[1 + %d %% 4], price = price + 0.50, amount = amount + 1 WHERE id %% 97 = %d`, qt, k, k%97)
	})
	// The relayout takes the table's columns from its newest change.
	before := p.chInt(fmt.Sprintf("SELECT count() FROM `%s`.`%s`", p.database, table))
	if err := testenv.Eventually(context.Background(), time.Minute, func(context.Context) error {
		if n := p.chInt(fmt.Sprintf("SELECT count() FROM `%s`.`%s`", p.database, table)); n < before+200 {
			return fmt.Errorf("%d rows, waiting for %d", n, before+200)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	config := func(columns string) string {
		file := filepath.Join(t.TempDir(), "walhouse.yaml")
		cfg := fmt.Sprintf("layout:\n  public.%s:\n    columns:\n%s"+
			"kafka:\n  brokers: [%s]\nclickhouse:\n  url: %s\n  database: %s\ntopics:\n  prefix: %s\n", table, columns, p.env.Kafka, p.env.ClickHouse, p.database, p.prefix)
		if err := os.WriteFile(file, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		return file
	}
	relayout := func(file, env string, extra ...string) (*testenv.Proc, error) {
		args := append([]string{"--config", file, "relayout", "public." + table}, extra...)
		proc := testenv.Start(t, "relayout", "env", append([]string{env, walhouseBin}, args...)...)
		return proc, proc.Wait(3 * time.Minute)
	}
	building := fmt.Sprintf("SELECT count() FROM system.tables WHERE database = %s AND name IN (%s, %s)", schema.QuoteString(p.database),
		schema.QuoteString(clickhouse.RelayoutForwardName(table)), schema.QuoteString(clickhouse.RelayoutBuildName(table)))

	// A narrowing is refused up front.
	narrow, err := relayout(config("      price: {type: \"Decimal(12, 1)\"}\n"), "E2E_NOTHING=1")
	out := narrow.Output()
	if err == nil || !strings.Contains(out, "column price from Nullable(Decimal(12, 2)) to Nullable(Decimal(12, 1))") || !strings.Contains(out, "--resnapshot public."+table) {
		t.Errorf("a relayout to a narrower decimal: %v, want it refused naming the column, both types and the fix:\n%s", err, out)
	}
	if n := p.chInt(building); n != 0 {
		t.Errorf("a refused relayout built %d tables or views", n)
	}

	done := sampleFinal(t, p, table, live)
	file := config("      price: {type: String}\n      status: {type: \"LowCardinality(String)\"}\n")
	proc, err := relayout(file, "WALHOUSE_FAILPOINTS=relayout.copied=pause:3s,relayout.swapped=pause:2s")
	if err != nil {
		t.Fatalf("walhouse relayout: %v\n%s", err, proc.Output())
	}
	out = proc.Output()
	t.Logf("walhouse relayout:\n%s", out)
	if !strings.Contains(out, "with column status Nullable(String) to LowCardinality(Nullable(String)), column price Nullable(Decimal(12, 2)) to Nullable(String)") {
		t.Errorf("walhouse relayout did not say which column types it changed:\n%s", out)
	}
	time.Sleep(2 * time.Second)
	stop()
	p.convergeWithin(2*time.Minute, pgQuery, chQuery("price"), capture, sink)
	done()
	p.checkColumnTypes(table, map[string]string{"status": "LowCardinality(Nullable(String))", "price": "Nullable(String)"})
	if n := p.chInt(building); n != 0 {
		t.Errorf("the forwarding view or the building table is still there")
	}
	// The sink, still with the old types in its insert's description,
	// inserted into the new table: the server refused the block, and the
	// retry read the columns again.
	mismatch := ""
	for _, line := range strings.Split(sink.Output(), "\n") {
		if strings.Contains(line, "TYPE_MISMATCH") {
			mismatch = line
			break
		}
	}
	if mismatch == "" {
		t.Errorf("the sink never inserted with the old column types into the new table; the test proves nothing about sinks running across the swap")
	}
	t.Logf("the sink's insert with the old types: %s", mismatch)

	again, err := relayout(file, "E2E_NOTHING=1", "--drop-old")
	if err != nil || !strings.Contains(again.Output(), "already in its layout") {
		t.Errorf("a second relayout: %v, want it to find the layout in place:\n%s", err, again.Output())
	}
}
