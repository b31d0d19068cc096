package erasure

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walhouse/walhouse/record"
	"github.com/walhouse/walhouse/schema"
)

// An erasure of a value that older versions of live rows carried removes
// the subject's own rows whole and of the live rows only the versions
// that carried the value: PostgreSQL is asked for every key the removal
// would take, in the snapshot of the subject check. A live row whose
// newest stored version still carries the value (its change not loaded
// yet) refuses the erasure, recording nothing; a table whose subject
// column was dropped in PostgreSQL is checked by key and named, also when
// it held nothing of the subject.
func TestIntegrationEraseKeepsLiveRows(t *testing.T) {
	f := newFixture(t, 2*time.Minute)
	ctx, pg, conn, db := f.ctx, f.pg, f.ch, f.db
	f.createDatabase()
	cols := keyedColumns("owner_email", "text")
	// tickets: rows 1 and 4 were alice's and are bob's now, row 5 is
	// dave's but ClickHouse has only its alice version so far, row 2 was
	// alice's and is deleted, row 3 never was hers.
	// notes: its owner_email column was dropped in PostgreSQL; row 7 is
	// live, row 8 (alice's) deleted.
	newTable := func(base string, ddl string, pgRows string) (*schema.Table, record.Source) {
		tbl := f.table(base, "tenant_id text, id bigint, owner_email text, PRIMARY KEY (tenant_id, id)", cols)
		qn := pgx.Identifier{tbl.Source.Table}.Sanitize()
		f.pgExec(fmt.Sprintf("INSERT INTO %s VALUES %s", qn, pgRows))
		if ddl != "" {
			f.pgExec(fmt.Sprintf(ddl, qn))
		}
		return tbl, tbl.Source
	}
	tickets, ticketsSrc := newTable("tickets", "", "('acme', 1, 'bob@example.com'), ('acme', 3, 'carol@example.com'), ('acme', 4, 'bob@example.com'), ('acme', 5, 'dave@example.com')")
	notes, notesSrc := newTable("notes", "ALTER TABLE %s DROP COLUMN owner_email", "('acme', 7, NULL)")
	// memos: its owner_email column was dropped too; acme has rows there,
	// none of the subject. Named, as its check was by key only.
	memos, memosSrc := newTable("memos", "ALTER TABLE %s DROP COLUMN owner_email", "('acme', 9, NULL)")
	f.insert(tickets, "('acme', 1, 'alice@example.com', 10, 0, now64()), ('acme', 2, 'alice@example.com', 11, 0, now64()), ('acme', 3, 'carol@example.com', 12, 0, now64()), ('acme', 4, 'alice@example.com', 13, 0, now64()), ('acme', 5, 'alice@example.com', 15, 0, now64()), ('globex', 1, 'alice@example.com', 14, 0, now64())")
	f.insert(tickets, "('acme', 1, 'bob@example.com', 20, 0, now64()), ('acme', 2, NULL, 21, 1, now64()), ('acme', 4, 'bob@example.com', 23, 0, now64())")
	f.insert(notes, "('acme', 7, 'alice@example.com', 10, 0, now64()), ('acme', 8, 'alice@example.com', 11, 0, now64())")
	f.insert(notes, "('acme', 7, NULL, 20, 0, now64())")
	f.insert(memos, "('acme', 9, 'zed@example.com', 10, 0, now64())")
	stored := func(tbl *schema.Table) string {
		t.Helper()
		rows, err := conn.Query(ctx, "SELECT concat(tenant_id, '/', toString(id), '/', toString(_version)) FROM "+tbl.QualifiedName()+" ORDER BY _version")
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var out []string
		for rows.Next() {
			var s string
			if err := rows.Scan(&s); err != nil {
				t.Fatal(err)
			}
			out = append(out, s)
		}
		return strings.Join(out, " ")
	}
	allTickets := stored(tickets)

	keys, _ := NewKeys([]byte("erasure key of the test, 32 bytes"))
	er, err := NewEraser(Config{PG: pg, Conn: conn, Database: db, Keys: keys, Settle: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	req := Request{Tenant: "acme", Column: "owner_email", Value: "alice@example.com", RequestedBy: "test"}

	// Row 5's change to dave is not loaded: removing its alice version
	// would leave a live row without its state. Refused, nothing recorded.
	_, err = er.Erase(ctx, req)
	if live, ok := errors.AsType[*LiveRowsError](err); !ok || live.Rows[tickets.Name] != 1 || len(live.Rows) != 1 {
		t.Fatalf("erase while a live row's newest version carries the subject: %v, want *LiveRowsError naming %s (1 row)", err, tickets.Name)
	}
	if got := stored(tickets); got != allTickets {
		t.Errorf("a refused erasure changed %s: %s, was %s", tickets.Name, got, allTickets)
	}
	l, err := NewLedger(LedgerConfig{Conn: conn, Database: db, Keys: &keys})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Load(ctx); err != nil {
		t.Fatal(err)
	}
	if n := l.Entries(); n != 0 {
		t.Errorf("a refused erasure recorded %d ledger entries", n)
	}

	// The change is loaded: the erasure goes ahead.
	f.insert(tickets, "('acme', 5, 'dave@example.com', 25, 0, now64())")
	m, err := er.Erase(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]TableResult{
		tickets.Name: {Table: tickets.Name, Source: "public." + ticketsSrc.Table, Removed: 5, SourceCheck: CheckSubjectAndKeys, LiveRowsKept: 3},
		notes.Name:   {Table: notes.Name, Source: "public." + notesSrc.Table, Removed: 2, SourceCheck: CheckKeysOnly, LiveRowsKept: 1},
		memos.Name:   {Table: memos.Name, Source: "public." + memosSrc.Table, SourceCheck: CheckKeysOnly},
	}
	if len(m.Tables) != len(want) || !m.Verified {
		t.Errorf("manifest tables %+v verified %v; want %+v", m.Tables, m.Verified, want)
	}
	for _, got := range m.Tables {
		if got != want[got.Table] {
			t.Errorf("manifest table %+v, want %+v", got, want[got.Table])
		}
	}
	if got, want := stored(tickets), "acme/3/12 globex/1/14 acme/1/20 acme/4/23 acme/5/25"; got != want {
		t.Errorf("%s after the erasure: %s, want %s (live rows' newest versions kept, row 2 gone)", tickets.Name, got, want)
	}
	if got, want := stored(notes), "acme/7/20"; got != want {
		t.Errorf("%s after the erasure: %s, want %s", notes.Name, got, want)
	}

	// The ledger names the deleted rows' keys only: a replayed change or
	// delete of a live row loads.
	if err := l.Load(ctx); err != nil {
		t.Fatal(err)
	}
	rec := func(src record.Source, id, email string, commit record.LSN) *record.Record {
		v := []record.Value{{Text: "acme"}, {Text: id}, {Text: email, Null: email == ""}}
		return &record.Record{TenantID: "acme", TenantColumn: "tenant_id", Source: src, Columns: cols, Values: v, CommitLSN: commit}
	}
	for _, tc := range []struct {
		r    *record.Record
		want bool
	}{
		{rec(ticketsSrc, "1", "bob@example.com", 20), false},
		{rec(ticketsSrc, "1", "", 30), false}, // a delete of a live row (key only)
		{rec(ticketsSrc, "2", "", 21), true},
		{rec(ticketsSrc, "4", "alice@example.com", 13), true},
		{rec(notesSrc, "7", "", 20), false},
		{rec(notesSrc, "8", "", 21), true},
	} {
		if got := l.Erased(tc.r); got != tc.want {
			t.Errorf("Erased(%s %s %q at %s) = %v, want %v", tc.r.Source.Table, tc.r.Values[1].Text, tc.r.Values[2].Text, tc.r.CommitLSN, got, tc.want)
		}
	}
}
