package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/walhouse/walhouse/harness/testenv"
)

// TestIntegrationLayoutDecimalClamp loads a numeric column overridden as
// Decimal(8, 2) with on_overflow clamp: values beyond the range, and
// infinities, are stored as ±999999.99 and counted
// (walhouse_sink_values_clamped_total); a value within the range with
// three decimals is never rounded: its record goes to the dead letters.
// FINAL ends equal to PostgreSQL with the values clamped there too.
func TestIntegrationLayoutDecimalClamp(t *testing.T) {
	p := newPipeline(t)
	table, qt := p.table("clamp", `(tenant_id text, id int, amount numeric, PRIMARY KEY (tenant_id, id))`)
	p.exec(fmt.Sprintf(`INSERT INTO %s SELECT 't' || (i %% 2), i, i * 1.25 FROM generate_series(1, 40) i`, qt))
	p.exec(fmt.Sprintf(`INSERT INTO %s VALUES ('t0', 100, 12345678.5), ('t1', 101, -1e20), ('t0', 102, NULL)`, qt)) // copied: two clamps

	file := filepath.Join(t.TempDir(), "walhouse.yaml")
	cfg := fmt.Sprintf("layout:\n  public.%s:\n    columns:\n      amount: {type: \"Decimal(8, 2)\", on_overflow: clamp}\n", table)
	if err := os.WriteFile(file, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	metrics := testenv.FreeAddr(t)
	capture := p.runCapture(append([]string{"--config", file}, p.captureArgs([]string{table})...))
	sink := testenv.Start(t, "sink", walhouseBin, append([]string{"--config", file}, p.sinkArgs("--metrics-addr", metrics)...)...)

	p.exec(fmt.Sprintf(`UPDATE %s SET amount = amount * 1000000 WHERE id %% 10 = 0`, qt))                                      // 10, 20, 30, 40: beyond
	p.exec(fmt.Sprintf(`INSERT INTO %s VALUES ('t1', 103, 'Infinity'), ('t0', 104, '-Infinity'), ('t1', 105, 999999.99)`, qt)) // two more clamps
	p.exec(fmt.Sprintf(`INSERT INTO %s VALUES ('t0', 106, 1.125)`, qt))                                                        // three decimals: a dead letter
	ls := p.waitDeadLetters(p.prefix+"-dlq", 1, capture, sink)
	if !strings.Contains(ls[0].Error, "never rounds") || !strings.Contains(ls[0].Key, `"106"`) {
		t.Errorf("dead letter %+v; want the row 106, whose decimals clamp does not round", ls[0])
	}
	p.converge(fmt.Sprintf(`SELECT tenant_id, id::text, CASE WHEN amount IS NULL THEN 'NULL' ELSE trim_scale(least(greatest(amount, -999999.99), 999999.99))::text END FROM %s AS t WHERE id <> 106 ORDER BY t.tenant_id, t.id`, qt),
		fmt.Sprintf("SELECT tenant_id, toString(id), ifNull(toString(amount), 'NULL') FROM `%s`.`%s` FINAL WHERE _is_deleted = 0 ORDER BY tenant_id, id", p.database, table),
		capture, sink)
	series := fmt.Sprintf(`walhouse_sink_values_clamped_total{column="amount",table="public.%s"}`, table)
	if v, ok := scrapeUntil(metrics, series, 20*time.Second, func(v float64) bool { return v >= 8 }); !ok {
		t.Errorf("%s = %v, want at least 8 (2 copied, 4 updated, 2 infinities)", series, v)
	}
}
