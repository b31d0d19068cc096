package capture_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/walhouse/walhouse/capture"
	"github.com/walhouse/walhouse/harness/testenv"
	"github.com/walhouse/walhouse/record"
)

// memState is an in-memory StateStore.
type memState struct {
	mu sync.Mutex
	m  map[string][]byte
}

func (s *memState) Load(_ context.Context, key string) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[key], nil
}

func (s *memState) Save(_ context.Context, key string, v []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[key] = append([]byte(nil), v...)
	return nil
}

type snapEnv struct {
	env               testenv.Env
	pg                *pgx.Conn
	table, slot, pub  string
	prefix, qualified string
	rows              int
}

func newSnapEnv(t *testing.T, rows int) *snapEnv {
	t.Helper()
	env, pg := connectPG(t)
	ctx := context.Background()
	e := &snapEnv{env: env, pg: pg, table: testenv.Name("snap"), slot: testenv.Name("slot"), pub: testenv.Name("pub"), prefix: testenv.Name("sn"), rows: rows}
	e.qualified = "public." + e.table
	for _, q := range []string{
		fmt.Sprintf("CREATE TABLE %s (tenant_id text, id int, note text, PRIMARY KEY (tenant_id, id))", e.table),
		fmt.Sprintf("INSERT INTO %s SELECT 't' || (g %% 4), g, repeat('x', 200) FROM generate_series(1, %d) g", e.table, rows),
	} {
		if _, err := pg.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	dropAfter(t, pg, []string{e.slot}, e.pub, e.table)
	return e
}

func TestIntegrationSnapshotParallelChunks(t *testing.T) {
	e := newSnapEnv(t, 20_000)
	state := &memState{m: map[string][]byte{}}
	stop := run(t, e.env, e.prefix, capture.WithSlot(e.slot), capture.WithPublication(e.pub), capture.WithTables(e.table),
		capture.WithStateStore(state), capture.WithSnapshotWorkers(3), capture.WithSnapshotChunkPages(16))
	if _, err := e.pg.Exec(context.Background(), fmt.Sprintf("UPDATE %s SET note = 'after' WHERE id = 7", e.table)); err != nil {
		t.Fatal(err)
	}
	recs := consume(t, e.env, e.prefix+".public."+e.table, e.rows+1)
	stop()

	ids := map[string]bool{}
	snapshotted := 0
	for _, r := range recs {
		if ids[r.EventID] {
			t.Fatalf("duplicate eventId %s", r.EventID)
		}
		ids[r.EventID] = true
		switch r.Op {
		case record.Read:
			snapshotted++
			if r.Version != record.SnapshotVersion {
				t.Errorf("snapshot row with version %d", r.Version)
			}
		case record.Update:
			if r.Values[1].Text != "7" || r.Values[2].Text != "after" || r.Version == 0 {
				t.Errorf("streamed update %+v", r)
			}
		default:
			t.Errorf("unexpected op %v", r.Op)
		}
	}
	if snapshotted != e.rows {
		t.Errorf("snapshot produced %d rows, want %d", snapshotted, e.rows)
	}
	var plan struct {
		Chunks   int  `json:"chunks"`
		Complete bool `json:"complete"`
	}
	raw, _ := state.Load(context.Background(), "snapshot/"+e.slot+"/"+e.qualified)
	if err := json.Unmarshal(raw, &plan); err != nil || !plan.Complete || plan.Chunks < 3 {
		t.Errorf("saved plan %s (%v): want complete with several chunks", raw, err)
	}
}

func TestIntegrationSnapshotResumesAfterFinishedChunks(t *testing.T) {
	e := newSnapEnv(t, 5_000)
	ctx := context.Background()
	// A slot and a half-done plan, as a capture that crashed mid-snapshot
	// leaves them: chunks 0 and 1 (pages 0-15) were produced already.
	if _, err := e.pg.Exec(ctx, fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s", e.pub, e.table)); err != nil {
		t.Fatal(err)
	}
	var cp string
	if err := e.pg.QueryRow(ctx, "SELECT lsn::text FROM pg_create_logical_replication_slot($1, 'pgoutput')", e.slot).Scan(&cp); err != nil {
		t.Fatal(err)
	}
	var pages int64
	if err := e.pg.QueryRow(ctx, "SELECT pg_relation_size($1::regclass) / 8192", e.table).Scan(&pages); err != nil {
		t.Fatal(err)
	}
	chunks := int((pages + 7) / 8)
	if chunks < 4 {
		t.Fatalf("table too small for the test: %d pages", pages)
	}
	state := &memState{m: map[string][]byte{}}
	plan := fmt.Sprintf(`{"table":%q,"consistentPoint":%q,"at":"2026-01-01T00:00:00Z","pages":%d,"chunkPages":8,"chunks":%d,"done":[0,1],"complete":false}`, e.qualified, cp, pages, chunks)
	_ = state.Save(ctx, "snapshot/"+e.slot+"/"+e.qualified, []byte(plan))

	var skipped, want int
	if err := e.pg.QueryRow(ctx, fmt.Sprintf("SELECT count(*) FILTER (WHERE ctid < '(16,0)'::tid), count(*) FROM %s", e.table)).Scan(&skipped, &want); err != nil {
		t.Fatal(err)
	}
	want -= skipped
	stop := run(t, e.env, e.prefix, capture.WithSlot(e.slot), capture.WithPublication(e.pub),
		capture.WithStateStore(state), capture.WithSnapshotWorkers(2))
	recs := consume(t, e.env, e.prefix+".public."+e.table, want)
	stop()
	if len(recs) != want {
		t.Fatalf("resumed snapshot produced %d rows, want %d (%d were in finished chunks)", len(recs), want, skipped)
	}
	var firstIDs []int
	rows, err := e.pg.Query(ctx, fmt.Sprintf("SELECT id FROM %s WHERE ctid < '(16,0)'::tid", e.table))
	if err != nil {
		t.Fatal(err)
	}
	firstIDs, err = pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		t.Fatal(err)
	}
	done := map[string]bool{}
	for _, id := range firstIDs {
		done[fmt.Sprint(id)] = true
	}
	for _, r := range recs {
		if done[r.Values[1].Text] {
			t.Fatalf("row %s of a finished chunk was read again", r.Values[1].Text)
		}
	}
	raw, _ := state.Load(ctx, "snapshot/"+e.slot+"/"+e.qualified)
	if !json.Valid(raw) || !contains(string(raw), `"complete":true`) {
		t.Errorf("plan after resume: %s", raw)
	}
}
