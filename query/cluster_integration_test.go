package query

import (
	"context"
	"fmt"
	"net/http/httptest"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/walhouse/walhouse/clickhouse"
	"github.com/walhouse/walhouse/harness/testenv"
	"github.com/walhouse/walhouse/record"
	"github.com/walhouse/walhouse/schema"
	"github.com/walhouse/walhouse/sink"
)

// The sink and serve on a real cluster of two shards of two replicas: the
// statements the golden files hold run there (tables, Distributed tables,
// evolution, tombstones, _walhouse_sync, all ON CLUSTER); a batch loaded
// twice (a sink killed between insert and commit) is stored once on every
// shard; each tenant lives on one shard, replicas agree, and FINAL through
// the Distributed table equals the rows loaded, for the sink's TOAST and
// tombstone reads and for serve's reads and lastSyncAt.
func TestIntegrationCluster(t *testing.T) {
	cl := testenv.RequireClickHouseCluster(t, 2, 2)
	ctx := context.Background()
	conn, err := clickhouse.OpenCluster(ctx, cl.Hosts[0][0], testenv.ClusterName)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	db := testenv.Name("cluster")
	w, err := clickhouse.NewWriter(ctx, conn, db, "", clickhouse.OnCluster(testenv.ClusterName))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, d := range []string{db, schema.LocalDatabase(db)} {
			_ = conn.Exec(context.Background(), fmt.Sprintf("DROP DATABASE IF EXISTS %s ON CLUSTER %s SYNC", schema.QuoteIdent(d), schema.QuoteIdent(testenv.ClusterName)))
		}
	})
	hosts := map[string]driver.Conn{} // "s1r1" → a plain connection to that host
	for s, replicas := range cl.Hosts {
		for r, dsn := range replicas {
			c, err := clickhouse.Open(ctx, dsn)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			hosts[fmt.Sprintf("s%dr%d", s+1, r+1)] = c
		}
	}

	src := record.Source{ID: "s", Schema: "public", Table: "items"}
	cols := []record.Column{
		{Name: "tenant_id", Type: "text", TypMod: -1, Key: true, Attnum: 1},
		{Name: "id", Type: "int8", TypMod: -1, Key: true, Attnum: 2},
		{Name: "note", Type: "text", TypMod: -1, Attnum: 3},
	}
	rec := func(cols []record.Column, tenant string, id int, version uint64, op record.Op, values ...record.Value) *record.Record {
		return &record.Record{
			EventID: fmt.Sprintf("e-%s-%d-%d", tenant, id, version), OccurredAt: time.Unix(1700000000+int64(version), 0).UTC(),
			TenantID: tenant, TenantColumn: "tenant_id", Source: src, LSN: record.LSN(version), CommitLSN: record.LSN(version),
			Version: version, Op: op, Columns: cols, SchemaID: record.SchemaID("tenant_id", cols),
			Values: append([]record.Value{{Text: tenant}, {Text: fmt.Sprint(id)}}, values...),
		}
	}
	// 16 tenants (acme and globex among them, for the API's test keys), 3
	// rows each; then updates and deletes, one of them leaving a TOAST
	// value unchanged.
	tenants := []string{"acme", "globex"}
	for i := range 14 {
		tenants = append(tenants, fmt.Sprintf("t%02d", i))
	}
	var first []*record.Record
	version := uint64(10)
	for _, tn := range tenants {
		for id := 1; id <= 3; id++ {
			first = append(first, rec(cols, tn, id, version, record.Insert, record.Value{Text: fmt.Sprintf("%s-%d", tn, id)}))
			version++
		}
	}
	first = append(first,
		rec(cols, "acme", 2, 101, record.Update, record.Value{Text: "acme-2 updated"}),
		rec(cols, "globex", 3, 102, record.Delete, record.Value{Null: true}))
	load := func(token string, recs []*record.Record) {
		t.Helper()
		if err := w.Load(ctx, sink.Batch{Source: src, Token: token, Records: recs}); err != nil {
			t.Fatalf("load %s: %v", token, err)
		}
	}
	load("items/0/0-50", first)
	// Loaded again under the same token: a sink killed between the insert
	// and the offset commit repeats it, and every shard drops its part.
	load("items/0/0-50", first)

	// rows returns the rows of q as text, one a line, sorted (rows come
	// from several shards).
	rows := func(c driver.Conn, q string) string {
		t.Helper()
		r, err := c.Query(ctx, "SELECT arrayStringConcat(arraySort(groupArray(toString(tuple(*)))), '\\n') FROM ("+q+")")
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		defer r.Close()
		var out string
		for r.Next() {
			if err := r.Scan(&out); err != nil {
				t.Fatal(err)
			}
		}
		return out
	}
	dist := schema.QuoteIdent(db) + ".items"
	local := schema.QuoteIdent(schema.LocalDatabase(db)) + ".items"
	var want []string
	for _, r := range first {
		note := r.Values[2].Text
		if r.Values[2].Null {
			note = "NULL"
		} else {
			note = "'" + note + "'"
		}
		want = append(want, fmt.Sprintf("('%s',%s,%d,%s)", r.TenantID, r.Values[1].Text, r.Version, note))
	}
	sort.Strings(want)
	if got := rows(conn, "SELECT tenant_id, id, _version, note FROM "+dist); got != strings.Join(want, "\n") {
		t.Fatalf("stored rows after loading the batch twice:\n%s\nwant each record once:\n%s", got, strings.Join(want, "\n"))
	}

	// An update that leaves a TOAST value unchanged: the sink reads it
	// back through the Distributed table (FINAL, from the tenant's shard).
	load("items/0/51-51", []*record.Record{rec(cols, "acme", 1, 150, record.Update, record.Value{Unchanged: true})})
	if got := rows(conn, "SELECT _version, note FROM "+dist+" FINAL WHERE tenant_id = 'acme' AND id = 1"); got != "(150,'acme-1')" {
		t.Errorf("row after an update with an unchanged TOAST value: %s, want (150,'acme-1')", got)
	}

	// Each tenant on one shard, and both shards used.
	if got := rows(conn, "SELECT tenant_id FROM "+dist+" GROUP BY tenant_id HAVING uniqExact(_shard_num) > 1"); got != "" {
		t.Errorf("tenants on more than one shard: %s", got)
	}
	if got := rows(conn, "SELECT uniqExact(_shard_num) FROM "+dist); got != "(2)" {
		t.Errorf("shards holding rows: %s, want (2)", got)
	}
	// The replicas of each shard hold the same rows.
	for s := 1; s <= 2; s++ {
		var per []string
		for r := 1; r <= 2; r++ {
			h := hosts[fmt.Sprintf("s%dr%d", s, r)]
			if err := h.Exec(ctx, "SYSTEM SYNC REPLICA "+local); err != nil {
				t.Fatal(err)
			}
			per = append(per, rows(h, "SELECT tenant_id, id, _version FROM "+local))
		}
		if per[0] != per[1] || per[0] == "" {
			t.Errorf("shard %d: replicas differ or are empty:\n%s\n--\n%s", s, per[0], per[1])
		}
	}

	// A column added in PostgreSQL reaches the local tables and the
	// Distributed table on every host.
	cols2 := append(cols[:3:3], record.Column{Name: "extra", Type: "int4", TypMod: -1, Attnum: 4})
	load("items/0/52-52", []*record.Record{rec(cols2, "acme", 3, 200, record.Update, record.Value{Text: "acme-3 v2"}, record.Value{Text: "7"})})
	for name, h := range hosts {
		for _, d := range []string{db, schema.LocalDatabase(db)} {
			if got := rows(h, fmt.Sprintf("SELECT name, type FROM system.columns WHERE database = '%s' AND table = 'items' AND name = 'extra'", d)); got != "('extra','Nullable(Int32)')" {
				t.Errorf("host %s, %s.items: column extra is %q", name, d, got)
			}
		}
	}

	// TRUNCATE at 1000, then a row written after it.
	if err := w.Truncate(ctx, sink.TruncateRequest{Token: "items/0/53/truncate", Truncate: record.Truncate{Source: src, LSN: 1000, CommitTime: time.Unix(1700001000, 0).UTC()}}); err != nil {
		t.Fatal(err)
	}
	load("items/0/54-54", []*record.Record{rec(cols2, "acme", 9, 1001, record.Insert, record.Value{Text: "after"}, record.Value{Text: "1"})})
	if got, want := rows(conn, "SELECT tenant_id, id, note, extra FROM "+dist+" FINAL WHERE _is_deleted = 0"), "('acme',9,'after',1)"; got != want {
		t.Fatalf("after the TRUNCATE, FINAL through the Distributed table shows\n%s\nwant\n%s", got, want)
	}

	// A sink without --cluster refuses the cluster's database, and one
	// with it a database of plain tables.
	if _, err := clickhouse.NewWriter(ctx, hosts["s1r1"], db, ""); err == nil || !strings.Contains(err.Error(), "give this sink the same --cluster") {
		t.Errorf("a sink without --cluster on the cluster's database: %v", err)
	}
	plain := db + "_plain"
	if err := hosts["s1r1"].Exec(ctx, "CREATE DATABASE "+schema.QuoteIdent(plain)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = hosts["s1r1"].Exec(context.Background(), "DROP DATABASE IF EXISTS "+schema.QuoteIdent(plain))
	})
	if err := hosts["s1r1"].Exec(ctx, "CREATE TABLE "+schema.QuoteIdent(plain)+".t (a String) ENGINE = MergeTree ORDER BY a"); err != nil {
		t.Fatal(err)
	}
	if _, err := clickhouse.NewWriter(ctx, conn, plain, "", clickhouse.OnCluster(testenv.ClusterName)); err == nil || !strings.Contains(err.Error(), "MergeTree tables, not Distributed tables (t)") {
		t.Errorf("a sink with --cluster on a database of plain tables: %v", err)
	}

	// serve: lastSyncAt from _walhouse_sync and reads through the
	// Distributed table.
	through := time.Unix(1700002000, 0).UTC()
	if err := w.MarkLoaded(ctx, []sink.Watermark{{Source: src, Partition: 0, Through: through, LSN: 1001, Partitions: 1}}); err != nil {
		t.Fatal(err)
	}
	st, err := ReadSyncState(ctx, conn, db, "items")
	if err != nil {
		t.Fatal(err)
	}
	if st.LastSyncAt == nil || !st.LastSyncAt.Equal(through) {
		t.Errorf("lastSyncAt = %v, want %v", st.LastSyncAt, through)
	}
	api, err := NewServer(Config{Conn: conn, Database: db, Keys: testKeys(t), CursorSecret: []byte(testCursorSecret),
		Limits: Limits{MaxRows: 1000, MaxConcurrent: 2}, Registry: prometheus.NewRegistry(), CatalogTTL: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	f := &chFixture{conn: conn, db: db, api: api, srv: httptest.NewServer(api.HTTPServer().Handler)}
	t.Cleanup(f.srv.Close)
	out, code := f.query(t, keyAcme, "items", `{"columns":["tenant_id","id","note","extra"]}`)
	if code != 200 || len(out.Data) != 1 || out.Data[0]["note"] != "after" || out.Meta["lastSyncAt"] == nil {
		t.Fatalf("read through serve: status %d, %+v, meta %v, error %+v", code, out.Data, out.Meta, out.Error)
	}
}
