package query

import (
	"context"
	"fmt"
	"slices"
	"testing"

	ch "github.com/ClickHouse/clickhouse-go/v2"

	"github.com/walhouse/walhouse/record"
	"github.com/walhouse/walhouse/schema"
)

// TestIntegrationFinalPartitionsWithMoves checks that FINAL within
// partitions (do_not_merge_across_partitions_select_final, which the API
// sets) returns what FINAL across partitions returns on a table with a
// walhouse layout whose partition column changes: rows moved between
// months by a tombstone at the old position and the row at the new one,
// as capture writes them, every version in a part of its own. A control
// table partitioned on a column outside its sorting key, with a row whose
// versions sit in two partitions, shows what the comparison catches: there
// the setting returns both versions, and the API must not set it.
func TestIntegrationFinalPartitionsWithMoves(t *testing.T) {
	f := newCHFixture(t)
	ctx := context.Background()
	db := schema.QuoteIdent(f.db)

	cols := []record.Column{
		{Name: "tenant_id", Type: "text", TypMod: -1, Key: true, Attnum: 1},
		{Name: "id", Type: "int8", TypMod: -1, Key: true, Attnum: 2},
		{Name: "status", Type: "text", TypMod: -1, Attnum: 3},
		{Name: "created_at", Type: "timestamptz", TypMod: -1, Attnum: 4},
	}
	src := record.Source{ID: "test", Schema: "public", Table: "moves"}
	layout := schema.Layout{OrderBy: []string{"tenant_id", "created_at", "id"}, PartitionBy: "toYYYYMM(created_at)"}
	st, err := schema.NewTable(src, "tenant_id", cols, schema.Options{Database: f.db, Layouts: map[string]schema.Layout{"public.moves": layout}})
	if err != nil {
		t.Fatal(err)
	}
	f.exec(t, st.CreateDDL(0x1000000))
	f.exec(t, "SYSTEM STOP MERGES "+st.QualifiedName())
	// Each change as the sink writes it, one insert (one part) each. A
	// move is a tombstone at the old position (old created_at, so the old
	// partition) and the row at the new one, at the change's version.
	insert := func(table string, id, version int, status, created string, deleted int) {
		t.Helper()
		f.exec(t, fmt.Sprintf(`INSERT INTO %s.%s (tenant_id, id, status, created_at, _version, _is_deleted, _commit_ts) VALUES ('acme', %d, '%s', '%s', %d, %d, now64(6))`,
			db, schema.QuoteIdent(table), id, status, created, version, deleted))
	}
	const nov, dec = "2026-11-20 10:00:00", "2026-12-02 10:00:00"
	// 1: moved from November to December.
	insert("moves", 1, 100, "new", nov, 0)
	insert("moves", 1, 200, "new", nov, 1)
	insert("moves", 1, 200, "moved", dec, 0)
	// 2: moved to December and back to November.
	insert("moves", 2, 100, "new", nov, 0)
	insert("moves", 2, 200, "new", nov, 1)
	insert("moves", 2, 200, "there", dec, 0)
	insert("moves", 2, 300, "there", dec, 1)
	insert("moves", 2, 300, "back", nov, 0)
	// 3: updated in place twice, never moved.
	insert("moves", 3, 100, "new", dec, 0)
	insert("moves", 3, 200, "paid", dec, 0)
	insert("moves", 3, 300, "shipped", dec, 0)
	// 4: moved to December, then deleted there.
	insert("moves", 4, 100, "new", nov, 0)
	insert("moves", 4, 200, "new", nov, 1)
	insert("moves", 4, 200, "moved", dec, 0)
	insert("moves", 4, 300, "moved", dec, 1)
	want := []string{"1:moved", "2:back", "3:shipped"}

	// The control: partitioned on created_at, sorted by (tenant_id, id),
	// as no walhouse layout may be; row 1's update moved it to December
	// without a tombstone in November.
	f.exec(t, fmt.Sprintf(`CREATE TABLE %s.control (tenant_id String, id Int64, status Nullable(String), created_at DateTime64(6, 'UTC'),
		_version UInt64, _is_deleted UInt8, _commit_ts DateTime64(6, 'UTC'), _synced_at DateTime64(6, 'UTC') DEFAULT now64(6))
		ENGINE = ReplacingMergeTree(_version, _is_deleted) PARTITION BY toYYYYMM(created_at) ORDER BY (tenant_id, id)`, db))
	f.exec(t, "SYSTEM STOP MERGES "+db+".control")
	insert("control", 1, 100, "new", nov, 0)
	insert("control", 1, 200, "moved", dec, 0)
	insert("control", 3, 100, "new", dec, 0)
	insert("control", 3, 200, "shipped", dec, 0)
	wantControl := []string{"1:moved", "3:shipped"}

	direct := func(table string, perPartition int) []string {
		t.Helper()
		qctx := ch.Context(ctx, ch.WithSettings(ch.Settings{
			"do_not_merge_across_partitions_select_final":                       perPartition,
			"enable_automatic_decision_for_merging_across_partitions_for_final": 0,
		}))
		rows, err := f.conn.Query(qctx, fmt.Sprintf("SELECT toString(id), status FROM %s.%s FINAL WHERE tenant_id = 'acme' AND _is_deleted = 0 ORDER BY id, status", db, schema.QuoteIdent(table)))
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var out []string
		for rows.Next() {
			var id string
			var status *string
			if err := rows.Scan(&id, &status); err != nil {
				t.Fatal(err)
			}
			out = append(out, id+":"+*status)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return out
	}
	api := func(table string) []string {
		t.Helper()
		out, code := f.query(t, keyAcme, table, `{"columns":["id","status"],"orderBy":[{"column":"id"}]}`)
		if code != 200 || out.Meta["consistency"] != "final" {
			t.Fatalf("%s through the API: %d %v %v", table, code, out.Meta, out.Error)
		}
		var got []string
		for _, r := range out.Data {
			got = append(got, fmt.Sprintf("%v:%v", r["id"], r["status"]))
		}
		return got
	}

	if got := direct("moves", 0); !slices.Equal(got, want) {
		t.Errorf("moves, FINAL across partitions: %v, want %v", got, want)
	}
	if got := direct("moves", 1); !slices.Equal(got, want) {
		t.Errorf("moves, FINAL within partitions: %v, want %v (a version of a row in another partition than its successor)", got, want)
	}
	if got := api("moves"); !slices.Equal(got, want) {
		t.Errorf("moves through the API: %v, want %v", got, want)
	}

	if got := direct("control", 0); !slices.Equal(got, wantControl) {
		t.Errorf("control, FINAL across partitions: %v, want %v", got, wantControl)
	}
	if got := direct("control", 1); slices.Equal(got, wantControl) {
		t.Errorf("control, FINAL within partitions: %v; want row 1 twice (else this test cannot tell)", got)
	}
	if got := api("control"); !slices.Equal(got, wantControl) {
		t.Errorf("control through the API: %v, want %v (FINAL must merge across partitions here)", got, wantControl)
	}
}
