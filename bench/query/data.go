package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"

	"github.com/walhouse/walhouse/record"
	"github.com/walhouse/walhouse/schema"
)

// tableName is the replicated table the dashboard reads.
const tableName = "orders"

// insertChunk is the most rows one INSERT … SELECT writes.
const insertChunk = 2_500_000

// syncPartitions is how many Kafka partitions _walhouse_sync records.
const syncPartitions = 6

// dataset describes what load wrote into one layout's table.
type dataset struct {
	layout     apiLayout
	current    uint64 // rows read FINAL
	stored     uint64 // rows stored, older versions and tombstones included
	parts      uint64 // active parts of the table when measuring started
	partitions uint64 // partitions those parts are in
	elapsed    time.Duration
}

// ordersColumns are the source columns of the orders table, as capture
// would describe them: the sink derives the ClickHouse table from them.
func ordersColumns() []record.Column {
	return []record.Column{
		{Name: "tenant_id", Type: "text", TypMod: -1, Key: true, Attnum: 1},
		{Name: "id", Type: "int8", TypMod: -1, Key: true, Attnum: 2},
		{Name: "customer_id", Type: "text", TypMod: -1, Attnum: 3},
		{Name: "status", Type: "text", TypMod: -1, Attnum: 4},
		{Name: "amount", Type: "numeric", TypMod: (12<<16 | 2) + 4, Attnum: 5},
		{Name: "created_at", Type: "timestamptz", TypMod: -1, Attnum: 6},
	}
}

// load creates the database, _walhouse_sync and one table per compared
// layout with the sink's DDL for it, each holding the same rows.
func (b *bench) load(ctx context.Context, layouts []apiLayout) ([]dataset, error) {
	db := schema.QuoteIdent(b.database)
	if err := b.conn.Exec(ctx, "CREATE DATABASE "+db); err != nil {
		return nil, fmt.Errorf("create database %s: %w", b.database, err)
	}
	b.created = true
	if err := b.conn.Exec(ctx, schema.SyncTableDDL(b.database)); err != nil {
		return nil, fmt.Errorf("create %s: %w", schema.SyncTable, err)
	}
	var out []dataset
	for _, l := range layouts {
		d, err := b.loadLayout(ctx, l)
		if err != nil {
			return nil, fmt.Errorf("layout %s: %w", l.name, err)
		}
		out = append(out, d)
	}
	return out, nil
}

// loadLayout creates l's table and loads -rows rows, -old-versions older
// versions and -tombstones tombstones into it, merges stopped unless
// -merges.
func (b *bench) loadLayout(ctx context.Context, l apiLayout) (dataset, error) {
	d := dataset{layout: l}
	start := time.Now()
	t, err := l.schemaTable(b.database)
	if err != nil {
		return d, fmt.Errorf("derive the %s table: %w", l.table, err)
	}
	ddl := t.CreateDDL(0x1000000)
	if b.o.settings != "" {
		const clause = "SETTINGS "
		i := strings.Index(ddl, clause)
		if i < 0 {
			return d, fmt.Errorf("-table-settings: the sink's DDL has no SETTINGS clause to add to:\n%s", ddl)
		}
		ddl = ddl[:i+len(clause)] + b.o.settings + ", " + ddl[i+len(clause):]
	}
	if err := b.conn.Exec(ctx, ddl); err != nil {
		return d, fmt.Errorf("create table %s: %w", t.QualifiedName(), err)
	}
	if !b.o.merges {
		if err := b.conn.Exec(ctx, "SYSTEM STOP MERGES "+t.QualifiedName()); err != nil {
			return d, fmt.Errorf("stop merges of %s (or pass -merges): %w", t.QualifiedName(), err)
		}
	}
	old, deleted := int(float64(b.o.rows)*b.o.oldVersions), int(float64(b.o.rows)*b.o.tombstones)
	fmt.Printf("loading %d rows, %d older versions and %d tombstones into %s (%s)...\n", b.o.rows, old, deleted, t.QualifiedName(), l.name)
	if err := b.insertVersions(ctx, t, b.o.rows, old, deleted); err != nil {
		return d, err
	}
	if l.mergeClosed {
		if err := b.mergeClosedPartitions(ctx, t); err != nil {
			return d, err
		}
	}
	if err := b.markSynced(ctx, l.table); err != nil {
		return d, err
	}
	d.elapsed = time.Since(start)

	q := fmt.Sprintf("SELECT (SELECT count() FROM %[1]s), (SELECT count() FROM %[1]s FINAL WHERE _is_deleted = 0)", t.QualifiedName())
	if err := b.conn.QueryRow(ctx, q).Scan(&d.stored, &d.current); err != nil {
		return d, fmt.Errorf("count the loaded rows: %w", err)
	}
	if d.parts, d.partitions, err = b.partsOf(ctx, t); err != nil {
		return d, err
	}
	return d, nil
}

// version is what one INSERT of insertSQL writes.
type version int

const (
	current   version = iota // the row as it is now
	older                    // an earlier version, replaced by current
	tombstone                // a later delete of the row
)

// insertVersions writes, into t, old older versions first, as the sink
// would have written them, then rows current rows, then deleted
// tombstones; each chunk is its own part.
func (b *bench) insertVersions(ctx context.Context, t *schema.Table, rows, old, deleted int) error {
	for _, step := range []struct {
		v version
		n int
	}{{older, old}, {current, rows}, {tombstone, deleted}} {
		for from := 0; from < step.n; from += insertChunk {
			n := min(insertChunk, step.n-from)
			if err := b.conn.Exec(ctx, b.insertSQL(t, rows, from, n, step.v)); err != nil {
				return fmt.Errorf("insert %s versions %d..%d into %s: %w", step.v, from, from+n, t.QualifiedName(), err)
			}
		}
	}
	return nil
}

func (v version) String() string {
	switch v {
	case current:
		return "current"
	case older:
		return "older"
	case tombstone:
		return "tombstone"
	default:
		return "version(" + strconv.Itoa(int(v)) + ")"
	}
}

// insertSQL writes versions from..from+n of a table of rows rows. Row i
// has id i and tenant i mod tenants; it was created up to 90 days before
// b.now. An older version of row k*P mod rows, for k in from..from+n (P a
// prime that does not divide rows, so the rows are distinct and spread over
// every tenant), has the same key and creation time, a lower _version, and
// status "new" with another amount: after FINAL it disappears. A tombstone
// of row k*Q mod rows (Q another such prime) has a higher _version and
// _is_deleted = 1: after FINAL the row is gone.
func (b *bench) insertSQL(t *schema.Table, rows, from, n int, v version) string {
	id := "number"
	ver := "16777216 + number * 256"
	status := "['new', 'paid', 'shipped', 'cancelled', 'refunded'][1 + cityHash64(number, 1) % 5]"
	amount := "(cityHash64(number, 2) % 100000) / 100"
	deleted := 0
	switch v {
	case older:
		id = fmt.Sprintf("number * %d %% %d", coprime(rows, 1_000_003, 999_983), rows)
		ver = "16777216 + (" + id + ") * 256 - 128"
		status = "'new'"
		amount = "(cityHash64(number, 4) % 100000) / 100"
	case tombstone:
		id = fmt.Sprintf("number * %d %% %d", coprime(rows, 2_000_003, 1_999_993), rows)
		ver = "16777216 + (" + id + ") * 256 + 128"
		deleted = 1
	}
	return fmt.Sprintf(`INSERT INTO %s (tenant_id, id, customer_id, status, amount, created_at, _version, _is_deleted, _commit_ts)
SELECT tenant, id, concat('cus_', toString(cityHash64(id, 3) %% 5000)), %s, toDecimal64(%s, 2), created, %s, %d, created
FROM (
    SELECT *, %s AS id,
        concat('tenant_', leftPad(toString(id %% %d), 3, '0')) AS tenant,
        toDateTime64('%s', 6, 'UTC') - toIntervalSecond(cityHash64(id, 5) %% (90 * 86400)) AS created
    FROM numbers(%d, %d)
)`, t.QualifiedName(), status, amount, ver, deleted, id, b.o.tenants, b.now.Format(time.DateTime), from, n)
}

// coprime returns the prime p, or q when p divides rows.
func coprime(rows, p, q int) int {
	if rows%p == 0 {
		return q
	}
	return p
}

// tenant returns the name of tenant i, as insertSQL writes it.
func tenant(i int) string { return fmt.Sprintf("tenant_%03d", i) }

// markSynced records, as the sink does, that every partition of table
// is loaded through a few seconds ago, so responses carry lastSyncAt.
func (b *bench) markSynced(ctx context.Context, table string) error {
	// With the topic's partition count, as the sink writes it: without it
	// lastSyncAt stays unknown.
	q := fmt.Sprintf(`INSERT INTO %s.%s (source_table, partition, loaded_through, lsn, updated_at, partitions)
SELECT {table:String}, toInt32(number), now64(6, 'UTC') - toIntervalMillisecond(500 * (number + 1)), 16777216 + {rows:UInt64} * 256, now64(6, 'UTC'), %d
FROM numbers(%d)`, schema.QuoteIdent(b.database), schema.QuoteIdent(schema.SyncTable), syncPartitions, syncPartitions)
	ctx = chParams(ctx, map[string]string{"table": table, "rows": fmt.Sprint(b.o.rows)})
	if err := b.conn.Exec(ctx, q); err != nil {
		return fmt.Errorf("record sync progress in %s: %w", schema.SyncTable, err)
	}
	return nil
}

// chParams attaches server-side parameters (plain values, no escaping
// needed) to ctx.
func chParams(ctx context.Context, params map[string]string) context.Context {
	return ch.Context(ctx, ch.WithParameters(ch.Parameters(params)))
}
