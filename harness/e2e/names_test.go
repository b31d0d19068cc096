package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/jackc/pgx/v5"

	"github.com/walhouse/walhouse/harness/testenv"
	"github.com/walhouse/walhouse/record"
	"github.com/walhouse/walhouse/schema"
)

// TestIntegrationCollidingNames captures source tables whose ClickHouse
// names collided under walhouse's earlier rule ("<schema>__<table>", the
// bare name in public): public."X__b" and X.b, both with the same keys; a
// table named like walhouse's own _walhouse_sync; and a table whose name
// and columns hold a tab, a newline, a backslash, a quote and a backtick.
// Each must land in a ClickHouse table of its own, FINAL equal to
// PostgreSQL after a snapshot and streamed changes, and each ClickHouse
// table's comment must name its source table.
func TestIntegrationCollidingNames(t *testing.T) {
	p := newPipeline(t)
	sch := testenv.Name("a") // "a_<hex>": ordinary, so X.b keeps the name X__b
	weird := "tab\there\nnew\\line \"q\" `b`"
	sources := []record.Source{
		{Schema: "public", Table: sch + "__b"},
		{Schema: sch, Table: "b"},
		{Schema: "public", Table: "_walhouse_sync"},
		{Schema: "public", Table: weird},
	}
	// The weird table's columns: a tab, a newline, a backslash, a quote
	// and a backtick in their names.
	cols := []string{"col\tone", "col\ntwo", `col\three`, "col'\"`four"}
	p.exec("CREATE SCHEMA " + pgx.Identifier{sch}.Sanitize())
	t.Cleanup(func() {
		_, _ = p.pg.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{sch}.Sanitize()+" CASCADE")
		for _, s := range sources {
			_, _ = p.pg.Exec(context.Background(), "DROP TABLE IF EXISTS "+pgx.Identifier{s.Schema, s.Table}.Sanitize())
		}
	})
	quoted := make([]string, len(sources))
	for i, s := range sources {
		quoted[i] = pgx.Identifier{s.Schema, s.Table}.Sanitize()
		extra := ""
		for _, c := range cols {
			extra += ", " + pgx.Identifier{c}.Sanitize() + " text"
		}
		p.exec(fmt.Sprintf("CREATE TABLE %s (tenant_id text, id int, v text%s, PRIMARY KEY (tenant_id, id))", quoted[i], extra))
	}
	// The same keys in every table, each table's own values: rows of two
	// tables in one ClickHouse table would replace each other.
	write := func(step string) {
		for i, qt := range quoted {
			own := fmt.Sprintf("%d-%s", i, step)
			p.exec(fmt.Sprintf(`INSERT INTO %s SELECT 't' || (g %% 2), g, $1 || g, $1 || E'\t' || g, $1 || E'\n' || g, $1 || E'\\' || g, $1 || '''"`+"`"+`' || g
				FROM generate_series($2::int, $2::int + 9) g`, qt), own, len(step)*10)
			p.exec(fmt.Sprintf(`UPDATE %s SET v = $1 || '-updated' WHERE id %% 3 = 0`, qt), own)
			p.exec(fmt.Sprintf(`DELETE FROM %s WHERE id %% 5 = 0`, qt))
		}
	}
	write("s") // copied by the snapshot

	pub := pgx.Identifier{p.pub}.Sanitize()
	p.exec(fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s WITH (publish_via_partition_root = true)", pub, strings.Join(quoted, ", ")))
	args := p.captureArgs(nil)
	i := slices.Index(args, "--tables")
	args = slices.Delete(args, i, i+2) // the publication's tables: names with commas or newlines cannot be listed
	proc := p.runCapture(args)
	sink := p.startSink()
	write("stream")

	names := map[string]record.Source{}
	for i, s := range sources {
		name := schema.TableName(s)
		if other, ok := names[name]; ok {
			t.Fatalf("%q.%q and %q.%q both map to ClickHouse table %q", other.Schema, other.Table, s.Schema, s.Table, name)
		}
		names[name] = s
		var pgCols, chCols []string
		for _, c := range append([]string{"tenant_id", "id", "v"}, cols...) {
			pgCols = append(pgCols, "coalesce("+pgx.Identifier{c}.Sanitize()+"::text, '<null>')")
			chCols = append(chCols, "ifNull(toString("+schema.QuoteIdent(c)+"), '<null>')")
		}
		chTable := schema.QuoteIdent(p.database) + "." + schema.QuoteIdent(name)
		p.converge(
			fmt.Sprintf("SELECT %s FROM %s ORDER BY tenant_id, id", strings.Join(pgCols, ", "), quoted[i]),
			fmt.Sprintf("SELECT %s FROM %s FINAL WHERE _is_deleted = 0 ORDER BY tenant_id, id", strings.Join(chCols, ", "), chTable),
			proc, sink)
		got, err := chRows(context.Background(), p.ch, "SELECT comment FROM system.tables WHERE database = {db:String} AND name = {tbl:String}", ch.Parameters{"db": p.database, "tbl": name})
		if err != nil {
			t.Fatal(err)
		}
		if want := []string{schema.SourceComment(s)}; !slices.Equal(got, want) {
			t.Errorf("comment of ClickHouse table %q = %q, want %q", name, got, want)
		}
	}
}
