package verify

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/walhouse/walhouse/clickhouse"
	"github.com/walhouse/walhouse/harness/testenv"
	"github.com/walhouse/walhouse/record"
	"github.com/walhouse/walhouse/schema"
)

// TestIntegrationBucketBounds builds a table on both sides directly (as
// bench/verify does) with buckets of 7 rows, for a key of one integer
// column and for a key of two whose first column repeats across bucket
// cuts: every row is compared exactly once, and rows only in ClickHouse
// are found at a bucket's upper bound, inside a repeated first key value
// and beyond PostgreSQL's last key (the last bucket is unbounded above).
func TestIntegrationBucketBounds(t *testing.T) {
	env := testenv.Require(t, "pg", "clickhouse")
	ctx := context.Background()
	pool := testenv.PGPool(t, env.PG)
	conn, err := clickhouse.Open(ctx, env.ClickHouse)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	db := testenv.Name("verify_bounds")
	if err := conn.Exec(ctx, "CREATE DATABASE "+schema.QuoteIdent(db)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+schema.QuoteIdent(db)) })
	if err := conn.Exec(ctx, schema.SyncTableDDL(db)); err != nil {
		t.Fatal(err)
	}
	col := func(name, typ string, key bool, n int16) record.Column {
		return record.Column{Name: name, Type: typ, TypMod: -1, Key: key, Attnum: n}
	}
	for _, c := range []struct {
		name string
		// keys are the key columns after the tenant; rows are the
		// PostgreSQL rows' key values (each key column from its own
		// generate_series), both sides of each tenant t0 and t1.
		keys     []string
		series   string // the FROM of the rows: columns g1 (and g2)
		extra    []string
		want     []string
		wantRows int64
	}{
		{
			name: "one key column", keys: []string{"id"}, series: "generate_series(2, 60, 2) g1",
			// 14 is the first bucket's upper bound, 15 just past it; 61 lies
			// past the last key.
			extra:    []string{"('t0', 15, 'only')", "('t1', 61, 'only')"},
			want:     []string{"t0/15 only_in_clickhouse", "t1/61 only_in_clickhouse"},
			wantRows: 2 * 30,
		},
		{
			name: "two key columns, the first repeated", keys: []string{"a", "b"}, series: "generate_series(1, 6) g1, generate_series(1, 5) g2",
			// a = 2 spans the first cut (7 rows: a = 1 five times, a = 2
			// twice), a = 2, b = 9 lies beyond the cut inside it; 7 past
			// the last a.
			extra:    []string{"('t0', 2, 9, 'only')", "('t1', 7, 1, 'only')"},
			want:     []string{"t0/2 only_in_clickhouse", "t1/7 only_in_clickhouse"},
			wantRows: 2 * 30,
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			name := testenv.Name("bounds")
			qt := pgx.Identifier{name}.Sanitize()
			keyDefs, keyVals := "", ""
			cols := []record.Column{col("tenant_id", "text", true, 1)}
			for i, k := range c.keys {
				keyDefs += fmt.Sprintf("%s bigint NOT NULL, ", k)
				keyVals += fmt.Sprintf("g%d, ", i+1)
				cols = append(cols, col(k, "int8", true, int16(i+2)))
			}
			cols = append(cols, col("v", "text", false, int16(len(c.keys)+2)))
			pk := "tenant_id, " + strings.Join(c.keys, ", ")
			for _, sql := range []string{
				fmt.Sprintf("CREATE TABLE %s (tenant_id text NOT NULL, %sv text, PRIMARY KEY (%s))", qt, keyDefs, pk),
				fmt.Sprintf("INSERT INTO %s SELECT tn, %s'v' || g1 FROM (VALUES ('t0'), ('t1')) AS tns(tn), %s", qt, keyVals, c.series),
			} {
				if _, err := pool.Exec(ctx, sql); err != nil {
					t.Fatalf("%s: %v", sql, err)
				}
			}
			t.Cleanup(func() { _, _ = pool.Exec(context.Background(), "DROP TABLE IF EXISTS "+qt) })
			src := record.Source{Schema: "public", Table: name}
			st, err := schema.NewTable(src, "tenant_id", cols, schema.Options{Database: db})
			if err != nil {
				t.Fatal(err)
			}
			// ClickHouse gets PostgreSQL's rows, then the extra ones.
			var rows []string
			prows, err := pool.Query(ctx, fmt.Sprintf("SELECT format('(%%L, %s%%L)', tenant_id, %s v) FROM %s", strings.Repeat("%s, ", len(c.keys)), strings.Join(c.keys, ", ")+",", qt))
			if err != nil {
				t.Fatal(err)
			}
			for prows.Next() {
				var r string
				if err := prows.Scan(&r); err != nil {
					t.Fatal(err)
				}
				rows = append(rows, r)
			}
			if err := prows.Err(); err != nil {
				t.Fatal(err)
			}
			rows = append(rows, c.extra...)
			for i := range rows {
				rows[i] = strings.TrimSuffix(rows[i], ")") + ", 1, 0, now64(6))"
			}
			q := fmt.Sprintf("`%s`.`%s`", db, st.Name)
			for _, sql := range []string{
				st.CreateDDL(0),
				fmt.Sprintf("INSERT INTO %s (tenant_id, %s, v, _version, _is_deleted, _commit_ts) VALUES %s", q, strings.Join(c.keys, ", "), strings.Join(rows, ", ")),
				fmt.Sprintf("INSERT INTO `%s`.%s (source_table, partition, loaded_through, lsn, updated_at, partitions) VALUES ('%s', 0, now64(6), %d, now64(6), 1)",
					db, schema.SyncTable, st.Name, uint64(math.MaxInt64)),
			} {
				if err := conn.Exec(ctx, sql); err != nil {
					t.Fatalf("%.300s: %v", sql, err)
				}
			}
			v, err := New(env.PG, conn, WithDatabase(db), WithBucketRows(7))
			if err != nil {
				t.Fatal(err)
			}
			res, err := v.Verify(ctx, src)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, m := range res.Mismatches {
				got = append(got, fmt.Sprintf("%s/%s %s", m.Tenant, m.Key[0].Value, m.Kind))
			}
			slices.Sort(got)
			if !slices.Equal(got, c.want) || res.RowsChecked != c.wantRows {
				t.Errorf("found %q in %d rows checked (%d buckets); want %q in %d", got, res.RowsChecked, res.Buckets, c.want, c.wantRows)
			}
		})
	}
}
