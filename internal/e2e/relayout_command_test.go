package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/walhouse/walhouse/clickhouse"
	"github.com/walhouse/walhouse/internal/testenv"
	"github.com/walhouse/walhouse/schema"
)

// TestIntegrationRelayoutCommand runs `walhouse relayout` as a process of
// its own while capture and a sink keep streaming and loading the table
// under a steady write load (docs/shaping-tables.md#changing-a-layout).
// The sink inserts into the old table during the copy and the swap: a
// reader sampling FINAL the whole time must see every row exactly once in
// every sample (the workload changes rows, never their number) and never
// an older version of a row than it saw before (every change raises an
// amount, so their sum under FINAL never falls; an insert into the old
// table between the copy and the swap, missing from the new table, would
// lower it), the
// command must exit 0 with the table in its new shape, and FINAL must end
// equal to PostgreSQL. A second run finds the layout in place and says so.
func TestIntegrationRelayoutCommand(t *testing.T) {
	p := newPipeline(t)
	const rows = 20_000
	table, qt := p.table("relayoutcmd", `(tenant_id text, id int, status text NOT NULL, created_at timestamptz NOT NULL, amount int, PRIMARY KEY (tenant_id, id))`)
	p.exec(fmt.Sprintf(`ALTER TABLE %s REPLICA IDENTITY FULL`, qt))
	p.exec(fmt.Sprintf(`INSERT INTO %s SELECT 't' || (i %% 7), i, (ARRAY['new', 'paid', 'sent'])[1 + i %% 3], '2026-01-01 00:00:00+00'::timestamptz + (i %% 90) * interval '1 day', i FROM generate_series(1, %d) i`, qt, rows))
	capture := p.runCapture(p.captureArgs([]string{table}))
	sink := p.sink()
	pgQuery := fmt.Sprintf(`SELECT tenant_id, id::text, status, (extract(epoch FROM created_at) * 1000000)::bigint::text, coalesce(amount::text, 'NULL') FROM %s AS t ORDER BY t.tenant_id, t.id`, qt)
	chQuery := fmt.Sprintf("SELECT tenant_id, toString(id), status, toString(toUnixTimestamp64Micro(created_at)), ifNull(toString(amount), 'NULL')"+
		" FROM `%s`.`%s` FINAL WHERE _is_deleted = 0 ORDER BY tenant_id, id", p.database, table)
	p.exec(fmt.Sprintf(`DELETE FROM %s WHERE id %% 50 = 0`, qt))
	const live = rows - rows/50
	p.converge(pgQuery, chQuery, capture, sink)

	// Status and creation-time changes: moves under the new layout, which
	// the sink loads into the old table while the relayout copies it.
	stop := p.keepWriting(20*time.Millisecond, func(k int) string {
		return fmt.Sprintf(`UPDATE %s SET status = (ARRAY['new', 'paid', 'sent', 'held'])[1 + %d %% 4], created_at = created_at + interval '17 days', amount = amount + 1 WHERE id %% 97 = %d`, qt, k, k%97)
	})
	defer stop()

	// The operator's order: the layout to capture first, and the
	// relayout once the sink loaded what the old capture wrote (rows it
	// moved have no tombstone at the new key). The sink keeps running.
	file := filepath.Join(t.TempDir(), "walhouse.yaml")
	cfg := fmt.Sprintf("layout:\n  public.%s:\n    order_by: [tenant_id, status, created_at, id]\n    partition_by: toYYYYMM(created_at)\n"+
		"kafka:\n  brokers: [%s]\nclickhouse:\n  url: %s\n  database: %s\ntopics:\n  prefix: %s\n", table, p.env.Kafka, p.env.ClickHouse, p.database, p.prefix)
	if err := os.WriteFile(file, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	capture.Kill()
	p.caughtUp(p.group, p.prefix+".public."+table, sink)
	capture = p.runCapture(append([]string{"--config", file}, p.captureArgs([]string{table})...))
	// The sink loads what the new capture streams before the relayout.
	before := p.chInt(fmt.Sprintf("SELECT count() FROM `%s`.`%s`", p.database, table))
	if err := testenv.Eventually(context.Background(), 60*time.Second, func(context.Context) error {
		if n := p.chInt(fmt.Sprintf("SELECT count() FROM `%s`.`%s`", p.database, table)); n < before+1000 {
			return fmt.Errorf("%d rows, waiting for %d", n, before+1000)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	var (
		wg      sync.WaitGroup
		samples int
		bad     []string
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		q := fmt.Sprintf("SELECT count(), uniqExact(tenant_id, id), toInt64(sum(ifNull(amount, 0))) FROM `%s`.`%s` FINAL WHERE _is_deleted = 0", p.database, table)
		var last int64
		for ctx.Err() == nil {
			var n, distinct uint64
			var sum int64
			err := p.ch.QueryRow(ctx, q).Scan(&n, &distinct, &sum)
			switch {
			case ctx.Err() != nil:
			case err != nil:
				bad = append(bad, time.Now().UTC().Format("15:04:05.000 ")+err.Error())
			case n != live || distinct != live:
				bad = append(bad, time.Now().UTC().Format("15:04:05.000 ")+fmt.Sprintf("%d rows, %d distinct", n, distinct))
			case sum < last:
				bad = append(bad, time.Now().UTC().Format("15:04:05.000 ")+fmt.Sprintf("sum of amounts fell from %d to %d: changes seen before are gone", last, sum))
			default:
				last = sum
				samples++
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	loadedBefore := p.chInt(fmt.Sprintf("SELECT count() FROM `%s`.`%s`", p.database, table))
	relayout := testenv.Start(t, "relayout", walhouseBin, "--config", file, "relayout", "public."+table)
	if err := relayout.Wait(3 * time.Minute); err != nil {
		t.Fatalf("walhouse relayout: %v\n%s", err, relayout.Output())
	}
	out := relayout.Output()
	t.Logf("walhouse relayout:\n%s", out)
	if !strings.Contains(out, "relayouted from ORDER BY tenant_id, id, PARTITION BY (none) to ORDER BY tenant_id, status, created_at, id, PARTITION BY toYYYYMM(`created_at`)") {
		t.Errorf("walhouse relayout did not say what it did:\n%s", out)
	}
	// The sink loaded into the table while the relayout ran: the old
	// table got rows the copy had not read.
	kept := clickhouse.RelayoutKeptName(table)
	if n := p.chInt(fmt.Sprintf("SELECT count() FROM `%s`.`%s`", p.database, kept)); n <= loadedBefore {
		t.Errorf("the old table has %d rows, as many as before the relayout (%d): the sink did not load during it, the test proves nothing", n, loadedBefore)
	}
	time.Sleep(2 * time.Second)
	stop()
	p.convergeWithin(3*time.Minute, pgQuery, chQuery, capture, sink)
	cancel()
	wg.Wait()
	t.Logf("%d samples of FINAL during the relayout", samples)
	if len(bad) > 0 {
		t.Errorf("%d samples were wrong: %s", len(bad), strings.Join(bad, "; "))
	}
	if samples == 0 {
		t.Error("no sample of FINAL succeeded")
	}
	var sortingKey, partitionKey string
	q := fmt.Sprintf("SELECT sorting_key, partition_key FROM system.tables WHERE database = %s AND name = %s", schema.QuoteString(p.database), schema.QuoteString(table))
	if err := p.ch.QueryRow(context.Background(), q).Scan(&sortingKey, &partitionKey); err != nil {
		t.Fatal(err)
	}
	if sortingKey != "tenant_id, status, created_at, id" || partitionKey != "toYYYYMM(created_at)" {
		t.Errorf("sorting key %q, partition key %q; want the new layout's", sortingKey, partitionKey)
	}
	if n := p.chInt(fmt.Sprintf("SELECT count() FROM system.tables WHERE database = %s AND name = %s", schema.QuoteString(p.database), schema.QuoteString(clickhouse.RelayoutForwardName(table)))); n != 0 {
		t.Errorf("the forwarding view is still there")
	}

	// Again: the layout is in place, exit 0.
	again := testenv.Start(t, "relayout again", walhouseBin, "--config", file, "relayout", "public."+table, "--drop-old")
	if err := again.Wait(time.Minute); err != nil {
		t.Fatalf("walhouse relayout again: %v\n%s", err, again.Output())
	}
	if !strings.Contains(again.Output(), "already in its layout") {
		t.Errorf("a second relayout did not say the table has its layout:\n%s", again.Output())
	}
	// A table walhouse does not know, and one ClickHouse does not have.
	unknown := testenv.Start(t, "relayout unknown", walhouseBin, "--config", file, "relayout", "public.no_such_table_"+table)
	if err := unknown.Wait(time.Minute); err == nil || !strings.Contains(unknown.Output(), "unknown to walhouse") {
		t.Errorf("walhouse relayout of an unknown table: %v\n%s", err, unknown.Output())
	}
}
