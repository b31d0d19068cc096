package e2e

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/walhouse/walhouse/harness/testenv"
	"github.com/walhouse/walhouse/record"
	"github.com/walhouse/walhouse/schema"
)

// TestIntegrationQuirkyIdentifiers replicates a table whose schema, name and
// columns need quoting everywhere: spaces, upper case, dots, quotes,
// backticks, non-ASCII letters and SQL keywords. Snapshot rows and streamed
// changes must land in ClickHouse equal to PostgreSQL.
func TestIntegrationQuirkyIdentifiers(t *testing.T) {
	p := newPipeline(t)
	schemaName := "Sales " + testenv.Name("Dépt")
	tableName := `Order "Items".v2`
	qschema := pgx.Identifier{schemaName}.Sanitize()
	qt := pgx.Identifier{schemaName, tableName}.Sanitize()
	p.exec(`CREATE SCHEMA ` + qschema)
	t.Cleanup(func() { _, _ = p.pg.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+qschema+" CASCADE") })
	p.exec(fmt.Sprintf("CREATE TABLE %s (\"Tenant ID\" text, \"select\" int, \"Mixed Case\" text, \"a.b\" numeric(8,2), \"ünï\" text, \"back`tick\" int, \"quo\"\"te\" bool, PRIMARY KEY (\"Tenant ID\", \"select\"))", qt))
	p.exec(fmt.Sprintf(`INSERT INTO %s VALUES ('t 1', 1, 'x', 1.5, 'ä', 1, true), ('t''2', 2, NULL, NULL, NULL, NULL, NULL)`, qt))

	// As users write it: quoted, since the table name holds a dot.
	full := qt
	proc := p.runCapture(p.captureArgs([]string{full}, "--tenant-column-for", full+"=Tenant ID"))
	sink := p.startSink()
	p.exec(fmt.Sprintf(`INSERT INTO %s VALUES ('t 1', 3, 'y', 2.25, 'ö', 3, false)`, qt))
	p.exec(fmt.Sprintf(`UPDATE %s SET "Mixed Case" = 'z', "ünï" = 'ü' WHERE "select" = 1`, qt))
	p.exec(fmt.Sprintf(`DELETE FROM %s WHERE "select" = 2`, qt))

	chTable := schema.QuoteIdent(p.database) + "." + schema.QuoteIdent(schema.TableName(record.Source{Schema: schemaName, Table: tableName}))
	pgQuery := fmt.Sprintf(`SELECT "Tenant ID", "select"::text, coalesce("Mixed Case", '-'), coalesce("a.b"::float8::text, '-'), coalesce("ünï", '-'), coalesce("back%stick"::text, '-'), coalesce("quo""te"::text, '-') FROM %s AS t ORDER BY 1, 2`, "`", qt)
	q := func(c string) string { return schema.QuoteIdent(c) }
	chQuery := fmt.Sprintf(`SELECT %s, toString(%s), ifNull(%s, '-'), ifNull(toString(%s), '-'), ifNull(%s, '-'), ifNull(toString(%s), '-'), ifNull(toString(%s), '-') FROM %s FINAL WHERE _is_deleted = 0 ORDER BY 1, %s`,
		q("Tenant ID"), q("select"), q("Mixed Case"), q("a.b"), q("ünï"), q("back`tick"), q(`quo"te`), chTable, q("select"))
	p.converge(pgQuery, chQuery, proc, sink)
}
