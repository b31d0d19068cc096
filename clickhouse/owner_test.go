package clickhouse

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/walhouse/walhouse/record"
	"github.com/walhouse/walhouse/schema"
	"github.com/walhouse/walhouse/sink"
)

// The sink loads into a ClickHouse table only when its comment names the
// record's source table (or names none, for tables older walhouses made),
// and stops that table otherwise, with a fix; rows of another source table
// never land in it.
func TestIntegrationTableOwner(t *testing.T) {
	f := newTruncFixture(t)
	ctx := context.Background()
	items := record.Source{ID: "s", Schema: "public", Table: "items"}
	// A fresh Writer, as a restarted sink: it checks a table at first use.
	fresh := func() *Writer {
		w, err := NewWriter(ctx, f.w.conn, f.db, "created_on")
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	load := func(w *Writer, src record.Source, note string) error {
		r := &record.Record{
			EventID: "e-" + note, OccurredAt: time.Unix(1700000000, 0).UTC(), TenantID: "a", TenantColumn: "tenant_id", Source: src,
			LSN: 10, CommitLSN: 10, Version: 10, Op: record.Insert, Columns: f.cols, SchemaID: record.SchemaID("tenant_id", f.cols),
			Values: []record.Value{{Text: "a"}, {Text: "1"}, {Text: "2024-01-05"}, {Text: "{}"}, {Text: note}},
		}
		return w.Load(ctx, sink.Batch{Source: src, Token: "t-" + note, Records: []*record.Record{r}})
	}
	comment := func(name string) string {
		_, c, err := f.w.tableComment(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	setComment := func(name, c string) {
		if err := f.w.conn.Exec(ctx, "ALTER TABLE "+schema.QuoteIdent(f.db)+"."+schema.QuoteIdent(name)+" MODIFY COMMENT "+schema.QuoteString(c)); err != nil {
			t.Fatal(err)
		}
	}
	wantStop := func(err error, fix string) {
		t.Helper()
		var te *sink.TableError
		if !errors.As(err, &te) || !strings.Contains(te.Fix, fix) {
			t.Fatalf("got %v, want a TableError whose fix says %q", err, fix)
		}
	}

	if err := load(fresh(), items, "first"); err != nil {
		t.Fatal(err)
	}
	if got, want := comment("items"), schema.SourceComment(items); got != want {
		t.Fatalf("comment of the new table = %q, want %q", got, want)
	}

	// Another source table's table: never loaded into, never truncated.
	setComment("items", schema.SourceComment(record.Source{Schema: "other", Table: "items"}))
	wantStop(load(fresh(), items, "mixed"), "DROP TABLE")
	wantStop(fresh().Truncate(ctx, sink.TruncateRequest{Token: "tr", Truncate: record.Truncate{Source: items, LSN: 50}}), "DROP TABLE")
	if got, want := f.rows(true), "('a',1,'2024-01-05',10,'first',[])"; got != want {
		t.Fatalf("rows after the refused load and truncate:\n%s\nwant\n%s", got, want)
	}

	// A table an older walhouse made, without a comment: taken as the
	// source table whose name it has.
	setComment("items", "")
	if err := load(fresh(), items, "adopted"); err != nil {
		t.Fatal(err)
	}
	if got, want := comment("items"), schema.SourceComment(items); got != want {
		t.Fatalf("comment of the adopted table = %q, want %q", got, want)
	}

	// public."x__y" has a hashed name now; an older walhouse named its table
	// x__y. Until an operator says whose rows that table holds, nothing loads.
	xy := record.Source{ID: "s", Schema: "public", Table: "x__y"}
	if err := load(fresh(), record.Source{ID: "s", Schema: "x", Table: "y"}, "legacy"); err != nil {
		t.Fatal(err)
	}
	setComment("x__y", "") // as an older walhouse left it
	wantStop(load(fresh(), xy, "after upgrade"), "RENAME TABLE")
	if err := f.w.conn.Exec(ctx, "RENAME TABLE "+schema.QuoteIdent(f.db)+".x__y TO "+schema.QuoteIdent(f.db)+"."+schema.QuoteIdent(schema.TableName(xy))); err != nil {
		t.Fatal(err)
	}
	if err := load(fresh(), xy, "renamed"); err != nil {
		t.Fatal(err)
	}
	if got, want := comment(schema.TableName(xy)), schema.SourceComment(xy); got != want {
		t.Fatalf("comment of the renamed table = %q, want %q", got, want)
	}
}
