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
	"github.com/walhouse/walhouse/schema"
)

// TestIntegrationRelayout gives a loaded table another sorting key and
// partitions while rows keep changing (docs/shaping-tables.md#changing-a-layout):
// capture restarts with the new layout, the sink with --relayout, which
// builds the table beside the old one and swaps them. A reader sampling
// FINAL the whole time must see every row exactly once in every sample
// (the workload changes rows, never their number) and no change undone,
// and FINAL must end
// equal to PostgreSQL, in the new shape, with the old table kept.
func TestIntegrationRelayout(t *testing.T) {
	p := newPipeline(t)
	const rows = 20_000
	table, qt := p.table("relayout", `(tenant_id text, id int, status text NOT NULL, created_at timestamptz NOT NULL, amount int, PRIMARY KEY (tenant_id, id))`)
	p.exec(fmt.Sprintf(`ALTER TABLE %s REPLICA IDENTITY FULL`, qt))
	p.exec(fmt.Sprintf(`INSERT INTO %s SELECT 't' || (i %% 7), i, (ARRAY['new', 'paid', 'sent'])[1 + i %% 3], '2026-01-01 00:00:00+00'::timestamptz + (i %% 90) * interval '1 day', i FROM generate_series(1, %d) i`, qt, rows))
	capture := p.runCapture(p.captureArgs([]string{table}))
	sink := p.sink()
	pgQuery := fmt.Sprintf(`SELECT tenant_id, id::text, status, (extract(epoch FROM created_at) * 1000000)::bigint::text, coalesce(amount::text, 'NULL') FROM %s AS t ORDER BY t.tenant_id, t.id`, qt)
	chQuery := fmt.Sprintf("SELECT tenant_id, toString(id), status, toString(toUnixTimestamp64Micro(created_at)), ifNull(toString(amount), 'NULL')"+
		" FROM `%s`.`%s` FINAL WHERE _is_deleted = 0 ORDER BY tenant_id, id", p.database, table)
	// Deleted rows leave tombstones, which the relayout carries over.
	p.exec(fmt.Sprintf(`DELETE FROM %s WHERE id %% 50 = 0`, qt))
	const live, deleted = rows - rows/50, rows / 50
	p.converge(pgQuery, chQuery, capture, sink)

	// Status and creation-time changes: moves under the new layout.
	stop := p.keepWriting(20*time.Millisecond, func(k int) string {
		return fmt.Sprintf(`UPDATE %s SET status = (ARRAY['new', 'paid', 'sent', 'held'])[1 + %d %% 4], created_at = created_at + interval '17 days', amount = amount + 1 WHERE id %% 97 = %d`, qt, k, k%97)
	})

	// The new layout goes to capture first, and the sink loads what the
	// old capture wrote before it rebuilds the table: rows moved before
	// capture knew the layout have no tombstone at the new key.
	file := filepath.Join(t.TempDir(), "walhouse.yaml")
	cfg := fmt.Sprintf("layout:\n  public.%s:\n    order_by: [tenant_id, status, created_at, id]\n    partition_by: toYYYYMM(created_at)\n", table)
	if err := os.WriteFile(file, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	capture.Kill()
	p.caughtUp(p.group, p.prefix+".public."+table, sink)
	sink.Kill()
	capture = p.runCapture(append([]string{"--config", file}, p.captureArgs([]string{table})...))

	// A reader samples FINAL through the relayout.
	done := sampleFinal(t, p, table, live)
	relayout := p.sink("--config", file, "--relayout")
	waitLog(t, relayout, "relayout: the table has its new shape")
	// The tombstones came along: a stale version of a deleted row
	// replayed later (a dead letter, say) cannot bring it back.
	if n := p.chInt(fmt.Sprintf("SELECT uniqExact(id) FROM `%s`.`%s` WHERE _is_deleted = 1 AND id %% 50 = 0", p.database, table)); n != deleted {
		t.Errorf("the new table has tombstones of %d deleted rows, want %d", n, deleted)
	}
	time.Sleep(2 * time.Second)
	stop()
	p.convergeWithin(3*time.Minute, pgQuery, chQuery, capture, relayout)
	done()

	var sortingKey, partitionKey string
	q := fmt.Sprintf("SELECT sorting_key, partition_key FROM system.tables WHERE database = %s AND name = %s", schema.QuoteString(p.database), schema.QuoteString(table))
	if err := p.ch.QueryRow(context.Background(), q).Scan(&sortingKey, &partitionKey); err != nil {
		t.Fatal(err)
	}
	if sortingKey != "tenant_id, status, created_at, id" || partitionKey != "toYYYYMM(created_at)" {
		t.Errorf("sorting key %q, partition key %q; want the new layout's", sortingKey, partitionKey)
	}
	kept := clickhouse.RelayoutKeptName(table)
	if n := p.chInt(fmt.Sprintf("SELECT count() FROM `%s`.`%s` FINAL WHERE _is_deleted = 0", p.database, kept)); n != live {
		t.Errorf("the kept old table has %d rows, want %d", n, live)
	}

	// A restart with --relayout leaves the table as it is: its shape is
	// the layout's.
	relayout.Kill()
	again := p.sink("--config", file, "--relayout-drop-old", "--relayout")
	p.exec(fmt.Sprintf(`UPDATE %s SET status = 'done' WHERE id %% 10 = 0`, qt))
	p.converge(pgQuery, chQuery, capture, again)
	if out := again.Output(); strings.Contains(out, "relayout:") {
		t.Errorf("a sink restarted on a table in its layout relayouted it again:\n%s", out)
	}
}
