package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/walhouse/walhouse/harness/testenv"
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

// TestIntegrationLayoutTypeOverrides loads a table whose layout overrides
// column types: LowCardinality(String) for a text and an enum column,
// Decimal(38, 4), String and Float64 for numeric ones. The columns have
// those types, their values equal PostgreSQL's (compared by value), and a
// value Decimal(38, 4) cannot hold exactly (six decimals) is never rounded:
// its record goes to the dead letters, and the stream goes on. A type
// change in PostgreSQL the override cannot follow then stops the table
// (without the stop, each of its records would go to the dead letters).
func TestIntegrationLayoutTypeOverrides(t *testing.T) {
	p := newPipeline(t)
	mood := testenv.Name("mood")
	p.exec(fmt.Sprintf(`CREATE TYPE %s AS ENUM ('sad', 'ok', 'happy')`, mood))
	t.Cleanup(func() { _, _ = p.pg.Exec(context.Background(), "DROP TYPE IF EXISTS "+mood+" CASCADE") })
	table, qt := p.table("override", fmt.Sprintf(`(tenant_id text, id int, status text, feel %s, amount numeric, price numeric(12,2), ratio numeric, PRIMARY KEY (tenant_id, id))`, mood))
	p.exec(fmt.Sprintf(`INSERT INTO %s SELECT 't' || (i %% 2), i, (ARRAY['new', 'paid', NULL])[1 + i %% 3], (ARRAY['sad', 'ok', 'happy'])[1 + i %% 3]::%s, i * 1.25, i * 0.5, i * 0.25 FROM generate_series(1, 60) i`, qt, mood))

	file := filepath.Join(t.TempDir(), "walhouse.yaml")
	cfg := fmt.Sprintf(`
layout:
  public.%s:
    columns:
      status: {type: "LowCardinality(String)"}
      feel: {type: "LowCardinality(String)"}
      amount: {type: "Decimal(38, 4)", on_overflow: dead_letter}
      price: {type: String}
      ratio: {type: Float64}
`, table)
	if err := os.WriteFile(file, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	capture := p.runCapture(append([]string{"--config", file}, p.captureArgs([]string{table})...))
	sink := testenv.Start(t, "sink", walhouseBin, append([]string{"--config", file}, p.sinkArgs()...)...)

	p.exec(fmt.Sprintf(`UPDATE %s SET status = 'sent', feel = 'happy', amount = amount + 0.0001, price = price + 1 WHERE id %% 4 = 0`, qt))
	p.exec(fmt.Sprintf(`INSERT INTO %s VALUES ('t0', 1000, 'sent', 'ok', 1.123456, 1, 1)`, qt)) // six decimals: a dead letter
	p.exec(fmt.Sprintf(`INSERT INTO %s VALUES ('t0', 1001, 'new', NULL, -99999999999999999999999999999999.9999, NULL, NULL)`, qt))
	ls := p.waitDeadLetters(p.prefix+"-dlq", 1, capture, sink)
	if !strings.Contains(ls[0].Error, "Decimal(38, 4)") || !strings.Contains(ls[0].Key, `"1000"`) {
		t.Errorf("dead letter %+v; want the row 1000 whose amount Decimal(38, 4) cannot hold", ls[0])
	}
	p.converge(fmt.Sprintf(`SELECT tenant_id, id::text, coalesce(status, 'NULL'), coalesce(feel::text, 'NULL'), coalesce(trim_scale(amount)::text, 'NULL'), coalesce(price::text, 'NULL'), coalesce(ratio::float8::text, 'NULL') FROM %s AS t WHERE id <> 1000 ORDER BY t.tenant_id, t.id`, qt),
		fmt.Sprintf("SELECT tenant_id, toString(id), ifNull(status, 'NULL'), ifNull(feel, 'NULL'), ifNull(toString(amount), 'NULL'), ifNull(price, 'NULL'), ifNull(toString(ratio), 'NULL') FROM `%s`.`%s` FINAL WHERE _is_deleted = 0 ORDER BY tenant_id, id", p.database, table),
		capture, sink)

	want := map[string]string{"status": "LowCardinality(Nullable(String))", "feel": "LowCardinality(Nullable(String))", "amount": "Nullable(Decimal(38, 4))", "price": "Nullable(String)", "ratio": "Nullable(Float64)"}
	rows, err := p.ch.Query(context.Background(), fmt.Sprintf("SELECT name, type FROM system.columns WHERE database = %s AND table = %s", schema.QuoteString(p.database), schema.QuoteString(table)))
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var name, typ string
		if err := rows.Scan(&name, &typ); err != nil {
			t.Fatal(err)
		}
		if w, ok := want[name]; ok && w != typ {
			t.Errorf("column %s is %s, want %s", name, typ, w)
		}
		delete(want, name)
	}
	if len(want) > 0 {
		t.Errorf("columns missing: %v", want)
	}

	// A PostgreSQL type change the override cannot follow stops the table
	// with the fix, as other changes the sink cannot take do, rather than
	// dead-lettering its records.
	p.exec(fmt.Sprintf(`ALTER TABLE %s ALTER COLUMN status TYPE int USING length(status)`, qt))
	p.exec(fmt.Sprintf(`UPDATE %s SET status = 7 WHERE id = 2`, qt))
	waitLog(t, sink, "stopped loading a table", table, "status is int4; LowCardinality(String) is for text and enum columns", "fix the table's layout")
}
