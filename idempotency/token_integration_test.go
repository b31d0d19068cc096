package idempotency_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/walhouse/walhouse/harness/testenv"
	"github.com/walhouse/walhouse/idempotency"
)

// TestIntegrationConsistencyToken checks the token of a write, a replay and
// TokenSQL against PostgreSQL's own logical decoding: the changes a slot
// decodes up to a token's position (upto_lsn) must include the write's
// transaction, so a reader that waited for the position sees the write.
// It also checks that the token names the database.
func TestIntegrationConsistencyToken(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	slot := testenv.Name("l1_token_slot")
	if _, err := f.admin.Exec(ctx, `SELECT pg_create_logical_replication_slot($1, 'test_decoding')`, slot); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := f.admin.Exec(context.Background(), `SELECT pg_drop_replication_slot($1)`, slot); err != nil {
			t.Errorf("drop slot %s: %v", slot, err)
		}
	})
	var want idempotency.Token
	if err := f.admin.QueryRow(ctx, `SELECT s.system_identifier, d.oid FROM pg_control_system() s JOIN pg_database d ON d.datname = current_database()`).Scan(&want.SystemID, &want.Database); err != nil {
		t.Fatal(err)
	}
	// includes reports whether the slot, decoding up to tok, sees
	// the insert of customer.
	includes := func(tok idempotency.Token, customer string) bool {
		t.Helper()
		// Decoding reads only flushed WAL; the server may run with
		// synchronous_commit = off. A synchronous commit flushes all
		// before it (a commit that wrote WAL: hence the message).
		tx, err := f.admin.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, `SET LOCAL synchronous_commit = on; SELECT pg_logical_emit_message(true, 'walhouse_test_flush', '')`); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		var n int
		if err := f.admin.QueryRow(ctx, `SELECT count(*) FROM pg_logical_slot_peek_changes($1, $2::pg_lsn, NULL) WHERE data LIKE 'table %' AND data LIKE $3`,
			slot, fmt.Sprintf("%X/%X", tok.LSN>>32, uint32(tok.LSN)), "%'"+customer+"'%").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 1
	}
	check := func(what string, tok idempotency.Token, customer string) {
		t.Helper()
		if !tok.SameSource(want) {
			t.Errorf("%s: token %s names another database than %d/%d", what, tok, want.SystemID, want.Database)
		}
		if !includes(tok, customer) {
			t.Errorf("%s: token %s is before the write's commit: decoding up to it misses %s", what, tok, customer)
		}
	}
	keys := idempotency.New(f.app)
	ins := `INSERT INTO ` + f.orders + ` (tenant_id, customer, amount, idempotency_key, idempotency_fingerprint) VALUES (current_setting('walhouse.tenant'), $1, 1, gen_random_uuid(), '\x00')`
	r := idempotency.Request{Tenant: f.tenant, Key: idempotency.NewKey(), Fingerprint: fingerprint(t, "t1", nil)}
	fn := func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
		_, err := tx.Exec(ctx, ins, "t1")
		return nil, err
	}
	out, err := keys.Do(ctx, r, fn)
	if err != nil || out.TokenErr != nil {
		t.Fatalf("Do: %v, token: %v", err, out.TokenErr)
	}
	check("Do", out.Token, "t1")
	again, err := keys.Do(ctx, r, fn)
	if err != nil || !again.Replayed || !again.Token.Covers(out.Token) {
		t.Fatalf("replay: %+v, %v; want a token covering the first's %s", again, err, out.Token)
	}

	got, err := keys.Insert(ctx, idempotency.Insert{Table: f.orders, Tenant: f.tenant, Key: idempotency.NewKey(), Columns: []string{"customer", "amount"}, Values: []any{"t2", 2}})
	if err != nil || got.TokenErr != nil {
		t.Fatalf("Insert: %v, token: %v", err, got.TokenErr)
	}
	check("Insert", got.Token, "t2")

	// TokenSQL on another connection after a plain COMMIT.
	if _, err := f.admin.Exec(ctx, `INSERT INTO `+f.orders+` (tenant_id, customer, amount, idempotency_key, idempotency_fingerprint) VALUES ($1, 't3', 3, gen_random_uuid(), '\x00')`, f.tenant); err != nil {
		t.Fatal(err)
	}
	tok, err := idempotency.ReadToken(ctx, f.app)
	if err != nil {
		t.Fatal(err)
	}
	check("TokenSQL", tok, "t3")

	// Through the middleware: the header on the response and its replay.
	h := idempotency.Middleware(keys, func(r *http.Request) (string, error) { return r.Header.Get("X-Tenant"), nil }, idempotency.RequireKey())(ordersHandler(f.orders))
	key := idempotency.NewKey().Header()
	post := func() (idempotency.Token, *httptest.ResponseRecorder) {
		r := httptest.NewRequest("POST", "/orders", strings.NewReader(`{"customer":"t4","amount":4}`))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("X-Tenant", f.tenant)
		r.Header.Set(idempotency.HeaderName, key)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		tok, err := idempotency.ParseToken(w.Header().Get(idempotency.TokenHeader))
		if err != nil {
			t.Fatalf("response %d: %s header %q: %v", w.Code, idempotency.TokenHeader, w.Header().Get(idempotency.TokenHeader), err)
		}
		return tok, w
	}
	first, w := post()
	if w.Code != 201 {
		t.Fatalf("POST: %d %s", w.Code, w.Body)
	}
	check("middleware", first, "t4")
	replayed, w := post()
	if w.Header().Get(idempotency.ReplayedHeader) != "true" || !replayed.Covers(first) {
		t.Errorf("middleware replay: replayed=%q token %s; want a replay whose token covers %s", w.Header().Get(idempotency.ReplayedHeader), replayed, first)
	}
}
