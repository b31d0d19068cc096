package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/walhouse/walhouse/harness/testenv"
)

// stopTable is a table of TestIntegrationIncompatibleChangeStopsOneTable
// with the queries that compare it; flag is text on both sides, whatever
// its type ("true"/"false" for a boolean, digits for an integer).
type stopTable struct {
	name, quoted     string
	pgQuery, chQuery string
}

func (p *pipeline) newStopTable(prefix string) stopTable {
	p.t.Helper()
	name, qt := p.table(prefix, `(tenant_id text NOT NULL, id int NOT NULL, flag boolean, note text, PRIMARY KEY (tenant_id, id))`)
	return stopTable{
		name: name, quoted: qt,
		pgQuery: fmt.Sprintf(`SELECT tenant_id, id::text, coalesce(flag::text, '<null>'), coalesce(note, '<null>') FROM %s AS t ORDER BY t.tenant_id, t.id`, qt),
		chQuery: fmt.Sprintf("SELECT tenant_id, toString(id), ifNull(toString(flag), '<null>'), ifNull(note, '<null>')"+
			" FROM `%s`.`%s` FINAL WHERE _is_deleted = 0 ORDER BY tenant_id, id", p.database, name),
	}
}

// TestIntegrationIncompatibleChangeStopsOneTable changes a column of one of
// two captured tables to a type its ClickHouse column cannot hold (boolean
// to integer). The sink must stop loading that table only, at the change,
// say so with the table's name and the recovery, and not dead-letter its
// records; the other table keeps loading. Then the documented recovery
// (drop the ClickHouse table, `walhouse capture --resnapshot`, restart the
// sink) must bring the table back equal to PostgreSQL.
//
// The sink is down while the change happens, so that it reads changes of
// the old shape, the change and changes of the new shape in one go: the
// recovery must cope with old-shape records that were never committed.
func TestIntegrationIncompatibleChangeStopsOneTable(t *testing.T) {
	p := newPipeline(t)
	ctx := context.Background()
	a, b := p.newStopTable("stopa"), p.newStopTable("goon")
	for _, tb := range []stopTable{a, b} {
		p.exec(fmt.Sprintf(`INSERT INTO %s SELECT 't' || (g %% 2), g, g %% 3 = 0, 'n' || g FROM generate_series(1, 20) g`, tb.quoted))
	}
	capture := p.startCapture(a.name, b.name)
	dlq := testenv.Name("dlq")
	sinkArgs := []string{"--dlq-topic", dlq}
	sink := p.sink(sinkArgs...)
	p.converge(a.pgQuery, a.chQuery, capture, sink)
	p.converge(b.pgQuery, b.chQuery, capture, sink)

	sink.Kill()
	p.exec(fmt.Sprintf(`UPDATE %s SET note = 'before ' || id WHERE id <= 5`, a.quoted))
	p.exec(fmt.Sprintf(`DELETE FROM %s WHERE id = 6`, a.quoted))
	before, err := pgRows(ctx, p.pg, a.pgQuery)
	if err != nil {
		t.Fatal(err)
	}
	p.exec(fmt.Sprintf(`ALTER TABLE %s ALTER COLUMN flag TYPE integer USING flag::int`, a.quoted))
	p.exec(fmt.Sprintf(`INSERT INTO %s SELECT 't' || (g %% 2), g, g, 'after' FROM generate_series(21, 30) g`, a.quoted))
	p.exec(fmt.Sprintf(`UPDATE %s SET flag = 7, note = 'after' WHERE id IN (1, 2)`, a.quoted))
	p.exec(fmt.Sprintf(`DELETE FROM %s WHERE id = 8`, a.quoted))
	for _, q := range []string{
		`INSERT INTO %s SELECT 't' || (g %% 2), g, true, 'after' FROM generate_series(21, 30) g`,
		`UPDATE %s SET note = 'after' WHERE id <= 5`,
		`DELETE FROM %s WHERE id = 6`,
	} {
		p.exec(fmt.Sprintf(q, b.quoted))
	}

	sink = p.sink(sinkArgs...)
	// The other table goes on.
	p.converge(b.pgQuery, b.chQuery, capture, sink)
	// The changed one stops with its name and the way out in the log.
	waitLog(t, sink, "stopped loading a table", "table=", a.name, "--resnapshot public."+a.name, "DROP TABLE")
	// ... exactly at the change: what came before it is there, nothing after.
	got, err := chRows(ctx, p.ch, a.chQuery, nil)
	if err != nil {
		t.Fatal(err)
	}
	if d := diff(before, got); d != "" {
		t.Fatalf("the stopped table is not as PostgreSQL was just before the change:\n%s", d)
	}
	// More changes to the other table still load while the first is stopped.
	p.exec(fmt.Sprintf(`UPDATE %s SET flag = false, note = 'later' WHERE id > 25`, b.quoted))
	p.converge(b.pgQuery, b.chQuery, capture, sink)
	if ls, err := p.deadLetters(ctx, dlq); err != nil || len(ls) != 0 {
		t.Fatalf("dead letters of a stopped table: %+v (%v); its records must wait in Kafka", ls, err)
	}

	// The recovery the log names: drop the ClickHouse table, copy the
	// table again, restart the sink.
	sink.Kill()
	capture.Stop()
	p.chExec(fmt.Sprintf("DROP TABLE `%s`.`%s`", p.database, a.name), nil)
	capture = testenv.Start(t, "capture --resnapshot", walhouseBin, p.captureArgs([]string{a.name, b.name}, "--resnapshot", "public."+a.name)...)
	sink = p.sink(sinkArgs...)
	p.exec(fmt.Sprintf(`UPDATE %s SET note = 'recovered' WHERE id = 3`, a.quoted))
	p.converge(a.pgQuery, a.chQuery, capture, sink)
	p.converge(b.pgQuery, b.chQuery, capture, sink)
	if out := sink.Output(); strings.Contains(out, "stopped loading a table") {
		t.Errorf("the sink stopped a table again after the recovery:\n%s", out)
	}
	if ls, err := p.deadLetters(ctx, dlq); err != nil || len(ls) != 0 {
		t.Errorf("dead letters after the recovery: %+v (%v)", ls, err)
	}
}
