package erasure

import (
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walhouse/walhouse/record"
)

// The check reads PostgreSQL with the session settings capture uses
// (TimeZone UTC above all), whatever the eraser's connection defaults to:
// a live row whose primary key has a timestamptz (a time-partitioned
// table) is found live, and keeps its newest version; the subject's text,
// which the ledger hashes, is the one records carry.
func TestIntegrationEraseChecksInCapturesTimeZone(t *testing.T) {
	f := newFixture(t, 2*time.Minute, func(cfg *pgx.ConnConfig) {
		cfg.RuntimeParams["TimeZone"] = "Asia/Tokyo" // the role's or server's default, say
	})
	ctx, pg, conn, db := f.ctx, f.pg, f.ch, f.db
	f.createDatabase()
	// Event 1 at 10:00 UTC was alice's and is bob's now; event 2 was
	// alice's and is deleted.
	cols := []record.Column{{Name: "tenant_id", Type: "text", Key: true, TypMod: -1}, {Name: "at", Type: "timestamptz", Key: true, TypMod: -1},
		{Name: "id", Type: "int8", Key: true, TypMod: -1}, {Name: "owner", Type: "text", TypMod: -1}}
	tbl := f.table("events", "tenant_id text, at timestamptz, id bigint, owner text, PRIMARY KEY (tenant_id, at, id)", cols)
	f.pgExec(fmt.Sprintf(`INSERT INTO %s VALUES ('acme', '2024-01-01 10:00:00+00', 1, 'bob')`, pgx.Identifier{tbl.Source.Table}.Sanitize()))
	f.insert(tbl, "('acme', '2024-01-01 10:00:00', 1, 'alice', 10, 0, now64())")
	f.insert(tbl, "('acme', '2024-01-01 10:00:00', 1, 'bob', 11, 0, now64())")
	f.insert(tbl, "('acme', '2024-01-01 11:00:00', 2, 'alice', 10, 0, now64())")
	keys, _ := NewKeys([]byte("erasure key of the test, 32 bytes"))
	er, err := NewEraser(Config{PG: pg, Conn: conn, Database: db, Keys: keys, Settle: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	m, err := er.Erase(ctx, Request{Tenant: "acme", Column: "owner", Value: "alice", RequestedBy: "test"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	rows, err := conn.Query(ctx, "SELECT toString(id), owner FROM "+tbl.QualifiedName()+" ORDER BY id, _version")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id, owner string
		if err := rows.Scan(&id, &owner); err != nil {
			t.Fatal(err)
		}
		got = append(got, id+":"+owner)
	}
	rows.Close()
	if want := []string{"1:bob"}; fmt.Sprint(got) != fmt.Sprint(want) || len(m.Tables) != 1 || m.Tables[0].LiveRowsKept != 1 {
		t.Errorf("versions after the erasure %v, want %v (event 1 is live: only its alice version goes); manifest tables %+v", got, want, m.Tables)
	}
}
