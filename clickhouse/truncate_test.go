package clickhouse

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"gotest.tools/v3/golden"

	"github.com/walhouse/walhouse/harness/testenv"
	"github.com/walhouse/walhouse/record"
	"github.com/walhouse/walhouse/schema"
	"github.com/walhouse/walhouse/sink"
)

func TestTombstonesSQL(t *testing.T) {
	ts := tombstones{Database: "walhouse", Table: "odd `name`", LSN: 0x16B3748, CommitTime: time.Date(2026, 1, 2, 3, 4, 5, 678901000, time.UTC)}
	golden.Assert(t, ts.SQL(), "tombstones.sql.golden")
}

// truncFixture loads records of public.items into a fresh database.
type truncFixture struct {
	t    *testing.T
	w    *Writer
	db   string
	cols []record.Column
}

func newTruncFixture(t *testing.T) *truncFixture {
	t.Helper()
	ctx := context.Background()
	conn := testConn(t)
	db := testenv.Name("trunc")
	w, err := NewWriter(ctx, conn, db, "created_on")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+schema.QuoteIdent(db)) })
	return &truncFixture{t: t, w: w, db: db, cols: []record.Column{
		{Name: "tenant_id", Type: "text", TypMod: -1, Key: true, Attnum: 1},
		{Name: "id", Type: "int8", TypMod: -1, Key: true, Attnum: 2},
		{Name: "created_on", Type: "date", TypMod: -1, Key: true, Attnum: 3},
		{Name: "tags", Type: "text", Array: true, TypMod: -1, Attnum: 4},
		{Name: "note", Type: "text", TypMod: -1, Attnum: 5},
	}}
}

// change is one row change: "a/1/2024-01-05" key, op, version, note.
type change struct {
	key     string
	op      record.Op
	version uint64
	note    string
}

func (f *truncFixture) load(token string, changes ...change) {
	f.t.Helper()
	b := sink.Batch{Source: record.Source{ID: "s", Schema: "public", Table: "items"}, Token: token}
	for _, c := range changes {
		k := strings.Split(c.key, "/")
		r := &record.Record{
			EventID: fmt.Sprintf("e-%s-%d", c.key, c.version), OccurredAt: time.Unix(1700000000+int64(c.version), 0).UTC(),
			TenantID: k[0], TenantColumn: "tenant_id", Source: b.Source,
			LSN: record.LSN(c.version), CommitLSN: record.LSN(c.version), Version: c.version, Op: c.op,
			Columns: f.cols, SchemaID: record.SchemaID("tenant_id", f.cols),
			Values: []record.Value{{Text: k[0]}, {Text: k[1]}, {Text: k[2]}, {Text: "{x,\"y z\"}"}, {Text: c.note, Null: c.op == record.Delete}},
		}
		b.Records = append(b.Records, r)
	}
	if err := f.w.Load(context.Background(), b); err != nil {
		f.t.Fatalf("load %s: %v", token, err)
	}
}

func (f *truncFixture) truncate(table string, lsn record.LSN, token string) {
	f.t.Helper()
	req := sink.TruncateRequest{Token: token, Truncate: record.Truncate{
		Source: record.Source{Schema: "public", Table: table}, LSN: lsn, CommitTime: time.Unix(1700000500, 0).UTC()}}
	if err := f.w.Truncate(context.Background(), req); err != nil {
		f.t.Fatalf("truncate %s at %s: %v", table, lsn, err)
	}
}

// rows returns the table as FINAL shows it, or every stored row.
func (f *truncFixture) rows(final bool) string {
	f.t.Helper()
	q := fmt.Sprintf("SELECT tenant_id, id, created_on, _version, _is_deleted, note, tags, _partition_id FROM %s.items ORDER BY tenant_id, id, _version", schema.QuoteIdent(f.db))
	if final {
		q = fmt.Sprintf("SELECT tenant_id, id, created_on, _version, note, tags FROM %s.items FINAL WHERE _is_deleted = 0 ORDER BY tenant_id, id", schema.QuoteIdent(f.db))
	}
	rows, err := f.w.conn.Query(context.Background(), "SELECT arrayStringConcat(groupArray(toString(tuple(*))), '\\n') FROM ("+q+")")
	if err != nil {
		f.t.Fatalf("%s: %v", q, err)
	}
	defer rows.Close()
	var out string
	for rows.Next() {
		if err := rows.Scan(&out); err != nil {
			f.t.Fatal(err)
		}
	}
	return out
}

// A TRUNCATE at LSN 20 removes exactly the rows whose latest version is
// below 20, in every partition, whenever and however often it is applied;
// rows written after it stay, and a pre-TRUNCATE copy loaded late stays
// deleted.
func TestIntegrationTruncateWritesTombstones(t *testing.T) {
	f := newTruncFixture(t)
	f.truncate("items", 5, "items/0/0/truncate") // no table yet: nothing to do
	f.load("items/0/1-7",
		change{"a/1/2024-01-05", record.Insert, 10, "a1"},
		change{"a/2/2024-02-05", record.Insert, 11, "a2"},
		change{"b/1/2024-01-05", record.Insert, 12, "b1"},
		change{"a/1/2024-01-05", record.Update, 13, "a1 updated"},
		change{"b/3/2024-03-05", record.Insert, 14, "b3"},
		change{"b/3/2024-03-05", record.Delete, 15, ""},
		// Written after the TRUNCATE, loaded before it is applied (another
		// partition may be ahead).
		change{"a/5/2024-01-05", record.Insert, 30, "a5 after"},
	)
	f.truncate("items", 20, "items/0/8/truncate")
	f.load("items/0/9-9", change{"a/2/2024-02-05", record.Insert, 31, "a2 again"})
	want := "('a',2,'2024-02-05',31,'a2 again',['x','y z'])\n('a',5,'2024-01-05',30,'a5 after',['x','y z'])"
	if got := f.rows(true); got != want {
		t.Fatalf("after the TRUNCATE, FINAL shows\n%s\nwant\n%s\nstored rows:\n%s", got, want, f.rows(false))
	}
	stored := f.rows(false)
	// Each tombstone is a copy of its row in the row's partition.
	for _, tomb := range []string{
		"('a',1,'2024-01-05',20,1,'a1 updated',['x','y z'],'202401')",
		"('a',2,'2024-02-05',20,1,'a2',['x','y z'],'202402')",
		"('b',1,'2024-01-05',20,1,'b1',['x','y z'],'202401')",
	} {
		if !strings.Contains(stored, tomb) {
			t.Errorf("no tombstone %s among the stored rows:\n%s", tomb, stored)
		}
	}
	if n := strings.Count(stored, ",20,1,"); n != 3 {
		t.Errorf("%d tombstones, want 3 (none for the deleted row b/3 or the rows written after):\n%s", n, stored)
	}

	// Applied again (a sink that crashed before committing the marker),
	// from another partition's marker, and after a late pre-TRUNCATE copy.
	f.truncate("items", 20, "items/0/8/truncate")
	f.truncate("items", 20, "items/1/4/truncate")
	f.load("items/2/0-0", change{"a/1/2024-01-05", record.Update, 13, "a1 updated"})
	f.truncate("items", 20, "items/2/1/truncate")
	if got := f.rows(true); got != want {
		t.Errorf("after repeating the TRUNCATE and a late copy, FINAL shows\n%s\nwant\n%s", got, want)
	}
	if n := strings.Count(f.rows(false), ",20,1,"); n != 3 {
		t.Errorf("%d tombstones after repeating the TRUNCATE, want still 3", n)
	}
}

// Cleanup removes every stored version of a deleted row and the
// superseded versions of the others in partitions whose tombstones are
// older than the horizon, leaves younger partitions alone, and never
// changes what FINAL shows. A version older than a cleaned tombstone that
// arrives afterwards brings its row back: the condition the horizon must
// guarantee (docs/operations.md).
func TestIntegrationCleanup(t *testing.T) {
	f := newTruncFixture(t)
	ctx := context.Background()
	// January: a row deleted, a row updated, a row left as it is.
	f.load("jan-1", change{"a/1/2024-01-05", record.Insert, 10, "gone"}, change{"a/2/2024-01-06", record.Insert, 11, "v1"}, change{"a/3/2024-01-07", record.Insert, 12, "kept"})
	f.load("jan-2", change{"a/1/2024-01-05", record.Delete, 20, ""}, change{"a/2/2024-01-06", record.Update, 21, "v2"})
	horizon := time.Now()
	// February: a tombstone younger than the horizon.
	f.load("feb-1", change{"a/4/2024-02-05", record.Insert, 30, "x"})
	f.load("feb-2", change{"a/4/2024-02-05", record.Delete, 31, ""})
	final := f.rows(true)
	stored := f.rows(false)

	cleaned, err := Cleanup(ctx, f.w.conn, CleanupRequest{Database: f.db, Before: horizon}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(cleaned) != 1 || cleaned[0].Partition != "202401" || cleaned[0].RowsBefore != 5 || cleaned[0].RowsAfter != 2 {
		t.Errorf("cleaned %+v; want partition 202401 from 5 rows to 2", cleaned)
	}
	if got := f.rows(true); got != final {
		t.Errorf("FINAL changed:\n%s\nwant\n%s", got, final)
	}
	after := f.rows(false)
	for _, gone := range []string{"'a',1,", "'a',2,'2024-01-06',11"} {
		if strings.Contains(after, gone) {
			t.Errorf("stored rows still hold %s:\n%s", gone, after)
		}
	}
	if !strings.Contains(after, "'a',4,'2024-02-05',31,1") || !strings.Contains(after, "'a',4,'2024-02-05',30,0") {
		t.Errorf("February (tombstone younger than the horizon) was cleaned:\n%s\nbefore:\n%s", after, stored)
	}

	// A version older than the cleaned tombstone, loaded late: the row
	// is back. The horizon exists to make this impossible.
	f.load("late", change{"a/1/2024-01-05", record.Update, 15, "late"})
	if got := f.rows(true); !strings.Contains(got, "'late'") {
		t.Errorf("a late older version after cleanup did not come back; if ClickHouse now refuses it, update docs/operations.md:\n%s", got)
	}
}
