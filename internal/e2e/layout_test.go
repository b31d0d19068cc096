package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/walhouse/walhouse/internal/testenv"
	"github.com/walhouse/walhouse/record"
	"github.com/walhouse/walhouse/schema"
)

// TestIntegrationLayoutSortColumnUpdates loads a table whose layout (from
// the configuration file, given to capture and the sink) sorts by status
// and creation time and partitions by month, and updates those columns
// while streaming: a status change moves the row within its partition, a
// creation time in another month moves it to another partition. Capture
// must turn each such update into a delete of the old row, then the row
// (the table is REPLICA IDENTITY FULL, so the delete carries the old
// values): ReplacingMergeTree collapses versions only at one sorting key
// in one partition, so without it FINAL keeps the old version beside the
// new one. FINAL must end equal to PostgreSQL, row for row.
func TestIntegrationLayoutSortColumnUpdates(t *testing.T) {
	p := newPipeline(t)
	table, qt := p.table("layout", `(tenant_id text, id int, status text NOT NULL, created_at timestamptz NOT NULL, amount int, PRIMARY KEY (tenant_id, id))`)
	p.exec(fmt.Sprintf(`ALTER TABLE %s REPLICA IDENTITY FULL`, qt))
	p.exec(fmt.Sprintf(`INSERT INTO %s SELECT 't' || (i %% 3), i, (ARRAY['new', 'paid', 'sent'])[1 + i %% 3], '2026-01-01 00:00:00+00'::timestamptz + (i %% 90) * interval '1 day' + i * interval '1 second', i FROM generate_series(1, 300) i`, qt))

	file := filepath.Join(t.TempDir(), "walhouse.yaml")
	cfg := fmt.Sprintf(`
layout:
  public.%s:
    order_by: [tenant_id, status, created_at, id]
    partition_by: toYYYYMM(created_at)
    settings: {min_age_to_force_merge_seconds: 3600}
`, table)
	if err := os.WriteFile(file, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	capture := p.runCapture(append([]string{"--config", file}, p.captureArgs([]string{table})...))
	sink := testenv.Start(t, "sink", walhouseBin, append([]string{"--config", file}, p.sinkArgs()...)...)

	pgQuery := fmt.Sprintf(`SELECT tenant_id, id::text, status, (extract(epoch FROM created_at) * 1000000)::bigint::text, coalesce(amount::text, 'NULL') FROM %s AS t ORDER BY t.tenant_id, t.id`, qt)
	chQuery := fmt.Sprintf("SELECT tenant_id, toString(id), status, toString(toUnixTimestamp64Micro(created_at)), ifNull(toString(amount), 'NULL')"+
		" FROM `%s`.`%s` FINAL WHERE _is_deleted = 0 ORDER BY tenant_id, id", p.database, table)
	p.converge(pgQuery, chQuery, capture, sink)

	// The table has the layout's shape.
	var sortingKey, partitionKey string
	q := fmt.Sprintf("SELECT sorting_key, partition_key FROM system.tables WHERE database = %s AND name = %s", schema.QuoteString(p.database), schema.QuoteString(table))
	if err := p.ch.QueryRow(context.Background(), q).Scan(&sortingKey, &partitionKey); err != nil {
		t.Fatal(err)
	}
	if sortingKey != "tenant_id, status, created_at, id" || partitionKey != "toYYYYMM(created_at)" {
		t.Errorf("sorting key %q, partition key %q; want the layout's", sortingKey, partitionKey)
	}

	// Status changes (a move within the partition), creation times in
	// another month (another partition), both at once, other columns only,
	// deletes, and a row moved three times in one transaction.
	p.exec(fmt.Sprintf(`UPDATE %s SET status = 'shipped' WHERE id %% 3 = 0`, qt))
	p.exec(fmt.Sprintf(`UPDATE %s SET created_at = created_at + interval '40 days' WHERE id %% 5 = 0`, qt))
	p.exec(fmt.Sprintf(`UPDATE %s SET status = 'returned', created_at = created_at - interval '1 hour', amount = NULL WHERE id %% 7 = 0`, qt))
	p.exec(fmt.Sprintf(`UPDATE %s SET amount = amount * 2 WHERE id %% 4 = 0`, qt))
	p.exec(fmt.Sprintf(`DELETE FROM %s WHERE id %% 11 = 0`, qt))
	p.exec(fmt.Sprintf(`BEGIN; UPDATE %[1]s SET status = 'a' WHERE id = 1; UPDATE %[1]s SET status = 'b' WHERE id = 1; UPDATE %[1]s SET status = 'c', created_at = '2026-06-30 23:59:59+00' WHERE id = 1; COMMIT`, qt))
	p.exec(fmt.Sprintf(`INSERT INTO %s VALUES ('t0', 1000, 'new', '2026-02-01 00:00:00+00', 1)`, qt))
	p.exec(fmt.Sprintf(`UPDATE %s SET status = 'paid' WHERE id = 1000`, qt))
	p.converge(pgQuery, chQuery, capture, sink)
}

// TestIntegrationLayoutExcludedColumns excludes a column with personal
// data by the table's layout: the initial copy does not read it, the
// stream drops it before encoding, so no record in Kafka holds its values,
// and the ClickHouse table has no such column; every other column ends
// equal to PostgreSQL, row for row.
func TestIntegrationLayoutExcludedColumns(t *testing.T) {
	p := newPipeline(t)
	table, qt := p.table("exclude", `(tenant_id text, id int, email text, card_number text, note text, PRIMARY KEY (tenant_id, id))`)
	p.exec(fmt.Sprintf(`INSERT INTO %s SELECT 't' || (i %% 2), i, 'u' || i || '@example.com', 'CARD-SECRET-' || i, 'n' || i FROM generate_series(1, 100) i`, qt))

	file := filepath.Join(t.TempDir(), "walhouse.yaml")
	if err := os.WriteFile(file, []byte(fmt.Sprintf("layout:\n  public.%s: {exclude_columns: [card_number]}\n", table)), 0o600); err != nil {
		t.Fatal(err)
	}
	capture := p.runCapture(append([]string{"--config", file}, p.captureArgs([]string{table})...))
	sink := testenv.Start(t, "sink", walhouseBin, append([]string{"--config", file}, p.sinkArgs()...)...)

	p.exec(fmt.Sprintf(`INSERT INTO %s SELECT 't' || (i %% 2), i, 'u' || i || '@example.com', 'CARD-SECRET-' || i, NULL FROM generate_series(101, 150) i`, qt))
	p.exec(fmt.Sprintf(`UPDATE %s SET card_number = 'CARD-SECRET-NEW-' || id, note = 'changed' WHERE id %% 3 = 0`, qt))
	p.exec(fmt.Sprintf(`UPDATE %s SET card_number = 'CARD-SECRET-ONLY-' || id WHERE id %% 5 = 0`, qt))
	p.exec(fmt.Sprintf(`UPDATE %s SET id = id + 1000 WHERE id %% 7 = 0`, qt))
	p.exec(fmt.Sprintf(`DELETE FROM %s WHERE id %% 11 = 0`, qt))
	p.converge(fmt.Sprintf(`SELECT tenant_id, id::text, email, coalesce(note, 'NULL') FROM %s AS t ORDER BY t.tenant_id, t.id`, qt),
		fmt.Sprintf("SELECT tenant_id, toString(id), email, ifNull(note, 'NULL') FROM `%s`.`%s` FINAL WHERE _is_deleted = 0 ORDER BY tenant_id, id", p.database, table),
		capture, sink)

	var n uint64
	q := fmt.Sprintf("SELECT count() FROM system.columns WHERE database = %s AND table = %s AND name = 'card_number'", schema.QuoteString(p.database), schema.QuoteString(table))
	if err := p.ch.QueryRow(context.Background(), q).Scan(&n); err != nil || n != 0 {
		t.Errorf("ClickHouse table %s has %d columns card_number (%v); want none", table, n, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, topic := range []string{record.TopicName(p.prefix, "public", table), p.prefix + "-dlq"} {
		rs, err := p.topicRecords(ctx, topic)
		if err != nil {
			t.Fatalf("read %s: %v", topic, err)
		}
		if topic != p.prefix+"-dlq" && len(rs) == 0 {
			t.Fatalf("no records in %s", topic)
		}
		for _, r := range rs {
			if bytes.Contains(r.Value, []byte("CARD-SECRET")) || bytes.Contains(r.Key, []byte("CARD-SECRET")) {
				t.Fatalf("a record of %s holds an excluded value: %s", topic, r.Value)
			}
		}
	}
}
