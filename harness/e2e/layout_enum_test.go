package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/walhouse/walhouse/harness/testenv"
)

// TestIntegrationLayoutEnum stores a PostgreSQL enum column as a
// ClickHouse Enum8 (a layout's override): the copy, inserts and updates
// load by label; a label added mid-stream (ALTER TYPE ... ADD VALUE, one
// BEFORE an existing label and one at the end), used right after, widens
// the column with the labels numbered after the existing ones, whose
// numbers stay; FINAL ends equal to PostgreSQL by value, with no row set
// aside but the one whose label has a quote (left out of the Enum); a
// label renamed (RENAME VALUE) is renamed in ClickHouse, keeping its
// number.
func TestIntegrationLayoutEnum(t *testing.T) {
	p := newPipeline(t)
	mood := testenv.Name("mood")
	qmood := pgx.Identifier{mood}.Sanitize()
	p.exec(fmt.Sprintf(`CREATE TYPE %s AS ENUM ('sad', 'ok', 'so-so')`, qmood))
	t.Cleanup(func() { _, _ = p.pg.Exec(context.Background(), "DROP TYPE IF EXISTS "+qmood+" CASCADE") })
	table, qt := p.table("enum", fmt.Sprintf(`(tenant_id text, id int, mood %s, note text, PRIMARY KEY (tenant_id, id))`, qmood))
	p.exec(fmt.Sprintf(`INSERT INTO %s SELECT 't' || (i %% 2), i, (ARRAY['sad', 'ok', 'so-so', NULL])[i %% 4 + 1]::%s, 'n' || i FROM generate_series(1, 40) i`, qt, qmood)) // copied

	file := filepath.Join(t.TempDir(), "walhouse.yaml")
	cfg := fmt.Sprintf("layout:\n  public.%s:\n    columns:\n      mood: {type: Enum8}\n", table)
	if err := os.WriteFile(file, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	capture := p.runCapture(append([]string{"--config", file}, p.captureArgs([]string{table})...))
	sink := testenv.Start(t, "sink", walhouseBin, append([]string{"--config", file}, p.sinkArgs()...)...)

	pgQuery := fmt.Sprintf(`SELECT tenant_id, id::text, coalesce(mood::text, 'NULL'), note FROM %s AS t ORDER BY t.tenant_id, t.id`, qt)
	chQuery := fmt.Sprintf("SELECT tenant_id, toString(id), ifNull(toString(mood), 'NULL'), note FROM `%s`.`%s` FINAL WHERE _is_deleted = 0 ORDER BY tenant_id, id", p.database, table)
	p.exec(fmt.Sprintf(`UPDATE %s SET mood = 'ok', note = note || '+' WHERE id %% 5 = 0`, qt))
	p.exec(fmt.Sprintf(`INSERT INTO %s VALUES ('t0', 100, 'sad', 'new'), ('t1', 101, NULL, 'none')`, qt))
	p.exec(fmt.Sprintf(`DELETE FROM %s WHERE id = 3`, qt))
	p.converge(pgQuery, chQuery, capture, sink)
	p.checkColumnTypes(table, map[string]string{"mood": `Nullable(Enum8('sad' = 1, 'ok' = 2, 'so-so' = 3))`})

	// A label before an existing one, then one at the end, each used in
	// the next statement: no Relation message tells capture.
	p.exec(fmt.Sprintf(`ALTER TYPE %s ADD VALUE 'meh' BEFORE 'ok'`, qmood))
	p.exec(fmt.Sprintf(`INSERT INTO %s VALUES ('t0', 102, 'meh', 'added')`, qt))
	p.exec(fmt.Sprintf(`UPDATE %s SET mood = 'meh' WHERE id IN (1, 2)`, qt))
	p.exec(fmt.Sprintf(`ALTER TYPE %s ADD VALUE 'glad'`, qmood))
	p.exec(fmt.Sprintf(`UPDATE %s SET mood = 'glad' WHERE id IN (4, 100)`, qt))
	p.exec(fmt.Sprintf(`INSERT INTO %s VALUES ('t1', 103, 'glad', 'end')`, qt))
	// A label with a quote, which walhouse does not put in an Enum: its
	// row goes to the dead letters, naming the fix; the others load.
	p.exec(fmt.Sprintf(`ALTER TYPE %s ADD VALUE 'it''s'`, qmood))
	p.exec(fmt.Sprintf(`INSERT INTO %s VALUES ('t0', 104, 'it''s', 'quoted'), ('t1', 105, 'meh', 'after')`, qt))
	ls := p.waitDeadLetters(p.prefix+"-dlq", 1, capture, sink)
	if len(ls) != 1 || !strings.Contains(ls[0].Error, "LowCardinality(String)") || !strings.Contains(ls[0].Key, `"104"`) {
		t.Errorf("dead letters %+v; want the row 104 alone, naming LowCardinality(String)", ls)
	}
	p.converge(strings.Replace(pgQuery, "ORDER BY", "WHERE id <> 104 ORDER BY", 1), chQuery, capture, sink)
	p.checkColumnTypes(table, map[string]string{"mood": `Nullable(Enum8('sad' = 1, 'ok' = 2, 'so-so' = 3, 'meh' = 4, 'glad' = 5))`})
	// ClickHouse sorts by number: meh, added BEFORE ok, sorts after glad.
	order, err := chRows(context.Background(), p.ch, fmt.Sprintf("SELECT toString(mood) FROM (SELECT DISTINCT mood FROM `%s`.`%s` FINAL WHERE mood IS NOT NULL) ORDER BY mood", p.database, table), nil)
	if want := []string{"sad", "ok", "so-so", "meh", "glad"}; err != nil || strings.Join(order, ",") != strings.Join(want, ",") {
		t.Errorf("ORDER BY mood: %q (%v), want %q", order, err, want)
	}

	// RENAME VALUE: the label is renamed in ClickHouse too, keeping its
	// number, so the rows not changed since read the new name, as in
	// PostgreSQL.
	p.exec(fmt.Sprintf(`ALTER TYPE %s RENAME VALUE 'sad' TO 'blue'`, qmood))
	p.exec(fmt.Sprintf(`UPDATE %s SET mood = 'blue', note = note || '!' WHERE id = 100`, qt))
	p.converge(strings.Replace(pgQuery, "ORDER BY", "WHERE id <> 104 ORDER BY", 1), chQuery, capture, sink)
	p.checkColumnTypes(table, map[string]string{"mood": `Nullable(Enum8('blue' = 1, 'ok' = 2, 'so-so' = 3, 'meh' = 4, 'glad' = 5))`})
	if ls, err := p.deadLetters(context.Background(), p.prefix+"-dlq"); err != nil || len(ls) != 1 {
		t.Errorf("dead letters %+v (%v), want the row 104 alone", ls, err)
	}
}
