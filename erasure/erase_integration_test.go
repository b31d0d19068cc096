package erasure

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walhouse/walhouse/record"
)

// An erasure removes every stored version of the subject's rows of its
// tenant, the key-only tombstones of those rows included, leaves the same
// value in another tenant and the tenant's other rows, records the rows'
// keys so that their replayed deletes are recognised, and signs a manifest
// that verifies.
func TestIntegrationEraseRemovesTombstonesByKey(t *testing.T) {
	f := newFixture(t, 2*time.Minute)
	ctx, pg, conn, db := f.ctx, f.pg, f.ch, f.db
	f.createDatabase()
	cols := keyedColumns("email", "text")
	tbl := f.table("accounts", "tenant_id text, id bigint, email text, PRIMARY KEY (tenant_id, id)", cols)
	name, src := tbl.Source.Table, tbl.Source
	// Two versions and a key-only tombstone of rows 1 and 2 (the
	// subject), row 3 of another subject, row 1 of another tenant with
	// the same e-mail address; each insert a part of its own.
	f.insert(tbl, "('acme', 1, 'ann@example.com', 10, 0, now64()), ('acme', 2, 'ann@example.com', 11, 0, now64()), ('acme', 3, 'bob@example.com', 12, 0, now64()), ('globex', 1, 'ann@example.com', 13, 0, now64())")
	f.insert(tbl, "('acme', 1, 'ann@example.com', 20, 0, now64())")
	f.insert(tbl, "('acme', 1, NULL, 30, 1, now64()), ('acme', 2, NULL, 31, 1, now64())")
	keys, _ := NewKeys([]byte("erasure key of the test, 32 bytes"))
	er, err := NewEraser(Config{PG: pg, Conn: conn, Database: db, Keys: keys, Settle: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	m, err := er.Erase(ctx, Request{Tenant: "acme", Column: "email", Value: "ann@example.com", RequestedBy: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Tables) != 1 || m.Tables[0].Removed != 5 || m.Tables[0].Left != 0 || !m.Verified {
		t.Errorf("manifest tables %+v verified %v; want 5 versions removed (4 of the subject, tombstones included), none left", m.Tables, m.Verified)
	}
	var left []string
	rows, err := conn.Query(ctx, "SELECT concat(tenant_id, '/', toString(id), '/', toString(_version)) FROM "+tbl.QualifiedName()+" ORDER BY 1")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var s string
		_ = rows.Scan(&s)
		left = append(left, s)
	}
	rows.Close()
	if fmt.Sprint(left) != "[acme/3/12 globex/1/13]" {
		t.Errorf("stored rows after the erasure: %v; want only acme/3 and globex/1", left)
	}
	if _, err := VerifyManifest(mustJSON(t, m), keys.PublicKey()); err != nil {
		t.Errorf("the manifest does not verify: %v", err)
	}

	// A sink's view: the replayed delete of row 2 (key only) and an
	// update of row 1 are dropped; the same from globex, or a new row of
	// the subject committed after the erasure, are not.
	l, err := NewLedger(LedgerConfig{Conn: conn, Database: db, Keys: &keys})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Load(ctx); err != nil {
		t.Fatal(err)
	}
	rec := func(tenant, id, email string, commit record.LSN) *record.Record {
		v := []record.Value{{Text: tenant}, {Text: id}, {Text: email, Null: email == ""}}
		return &record.Record{TenantID: tenant, TenantColumn: "tenant_id", Source: src, Columns: cols, Values: v, CommitLSN: commit}
	}
	for _, tc := range []struct {
		r    *record.Record
		want bool
	}{
		{rec("acme", "2", "", 31), true},
		{rec("acme", "1", "ann@example.com", 20), true},
		{rec("globex", "1", "ann@example.com", 13), false},
		{rec("acme", "3", "bob@example.com", 12), false},
		{rec("acme", "9", "ann@example.com", m.AsOfLSN+1), false},
	} {
		if got := l.Erased(tc.r); got != tc.want {
			t.Errorf("Erased(%s/%s %q at %s) = %v, want %v", tc.r.TenantID, tc.r.Values[1].Text, tc.r.Values[2].Text, tc.r.CommitLSN, got, tc.want)
		}
	}

	// Refused while PostgreSQL has a row of the subject.
	if _, err := pg.Exec(ctx, fmt.Sprintf(`INSERT INTO %s VALUES ('acme', 5, 'cy@example.com')`, pgx.Identifier{name}.Sanitize())); err != nil {
		t.Fatal(err)
	}
	_, err = er.Erase(ctx, Request{Tenant: "acme", Column: "email", Value: "cy@example.com"})
	if still, ok := errors.AsType[*StillInSourceError](err); !ok || still.Rows[`"public".`+pgx.Identifier{name}.Sanitize()] != 1 {
		t.Errorf("erase while PostgreSQL has the row: %v, want *StillInSourceError", err)
	}
}
