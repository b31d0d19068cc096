package idempotency_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/walhouse/walhouse/harness/testenv"
	"github.com/walhouse/walhouse/idempotency"
)

// fixture is the key table, an orders table of the row pattern with
// row-level security, a login role that is neither a superuser nor
// BYPASSRLS (both skip row-level security), which app connects as, and a
// login role of PrunerRole, which pruner connects as. Each test has a
// database of its own: Migrate changes the key table's policies, which
// tests of other versions sharing the server must not see.
type fixture struct {
	admin, app, pruner *pgxpool.Pool
	orders             string // table name
	tenant             string // a fresh tenant per test; tenant+"b" is another
}

func setup(t *testing.T) fixture {
	t.Helper()
	env := testenv.Require(t, "pg")
	ctx := context.Background()
	server := testenv.PGPool(t, env.PG)
	db, role, pruner := testenv.Name("l1_db"), testenv.Name("l1_app"), testenv.Name("l1_pruner")
	if _, err := server.Exec(ctx, `CREATE DATABASE `+db); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, s := range []string{`DROP DATABASE ` + db + ` WITH (FORCE)`, `DROP ROLE IF EXISTS ` + role, `DROP ROLE IF EXISTS ` + pruner} {
			if _, err := server.Exec(context.Background(), s); err != nil {
				t.Errorf("%s: %v", s, err)
			}
		}
	})
	u, err := url.Parse(env.PG)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + db
	admin := testenv.Layer1PG(t, u.String())
	orders := testenv.Name("l1_orders")
	stmts := []string{
		`CREATE ROLE ` + role + ` LOGIN NOSUPERUSER NOBYPASSRLS`,
		`GRANT USAGE ON SCHEMA walhouse TO ` + role,
		`GRANT SELECT, INSERT, UPDATE, DELETE ON ` + idempotency.KeyTable + ` TO ` + role,
		`CREATE ROLE ` + pruner + ` LOGIN NOSUPERUSER NOBYPASSRLS IN ROLE ` + idempotency.PrunerRole,
		`CREATE TABLE ` + orders + ` (
			tenant_id text NOT NULL,
			id bigint GENERATED ALWAYS AS IDENTITY,
			customer text NOT NULL,
			amount numeric(12,2) NOT NULL,
			idempotency_key uuid NOT NULL UNIQUE,
			idempotency_fingerprint bytea NOT NULL,
			PRIMARY KEY (tenant_id, id))`,
		`GRANT SELECT, INSERT, UPDATE, DELETE ON ` + orders + ` TO ` + role,
	}
	stmts = append(stmts, idempotency.RowLevelSecurity(orders, "tenant_id")...)
	for _, s := range stmts {
		if _, err := admin.Exec(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	connect := func(user string) *pgxpool.Pool {
		cfg, err := pgxpool.ParseConfig(u.String())
		if err != nil {
			t.Fatal(err)
		}
		cfg.ConnConfig.User = user
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		return pool
	}
	app := connect(role)
	// The application's role may call Migrate at every start: with the
	// table there, it only looks.
	if err := idempotency.Migrate(ctx, app); err != nil {
		t.Fatalf("Migrate as the application's role: %v", err)
	}
	return fixture{admin: admin, app: app, pruner: connect(pruner), orders: orders, tenant: testenv.Name("tenant")}
}

// rows returns the orders of every tenant as "tenant:customer:amount",
// read as the superuser (row-level security does not hide them).
func (f fixture) rows(t *testing.T) []string {
	t.Helper()
	rows, err := f.admin.Query(context.Background(), `SELECT tenant_id || ':' || customer || ':' || amount FROM `+f.orders+` ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func fingerprint(t *testing.T, op string, v any) idempotency.Fingerprint {
	t.Helper()
	fp, err := idempotency.FingerprintOf(op, v)
	if err != nil {
		t.Fatal(err)
	}
	return fp
}

// lossyDB commits like its DB, then reports the commit as failed: the
// first attempt took effect but its caller never heard of it.
type lossyDB struct{ idempotency.DB }

func (d lossyDB) BeginTx(ctx context.Context, o pgx.TxOptions) (pgx.Tx, error) {
	tx, err := d.DB.BeginTx(ctx, o)
	return lossyTx{tx}, err
}

type lossyTx struct{ pgx.Tx }

func (tx lossyTx) Commit(ctx context.Context) error {
	if err := tx.Tx.Commit(ctx); err != nil {
		return err
	}
	return errors.New("connection reset by peer (after COMMIT reached the server)")
}

// TestIntegrationRetryAfterLostResponse writes an insert, an update and a
// delete through the key table, and an insert through the row pattern,
// each of whose first attempt committed while its caller got an error;
// the retry with the same key must return the first result, without a
// second effect, and the table must hold exactly what one run of each
// leaves.
func TestIntegrationRetryAfterLostResponse(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	lossy, keys := idempotency.New(lossyDB{f.app}), idempotency.New(f.app)
	calls := 0
	step := func(name, sql string, args ...any) {
		t.Helper()
		r := idempotency.Request{Tenant: f.tenant, Key: idempotency.NewKey(), Fingerprint: fingerprint(t, name, args)}
		fn := func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
			calls++
			tag, err := tx.Exec(ctx, sql, args...)
			return []byte(fmt.Sprintf("%s: %d rows", name, tag.RowsAffected())), err
		}
		if _, err := lossy.Do(ctx, r, fn); err == nil {
			t.Fatalf("%s: the lossy commit reported success", name)
		}
		before := calls
		out, err := keys.Do(ctx, r, fn)
		if err != nil {
			t.Fatalf("%s: retry: %v", name, err)
		}
		if !out.Replayed || calls != before || string(out.Result) != name+": 1 rows" {
			t.Fatalf("%s: retry replayed=%v result %q, ran again: %v; want the first result replayed", name, out.Replayed, out.Result, calls != before)
		}
	}
	ins := `INSERT INTO ` + f.orders + ` (tenant_id, customer, amount, idempotency_key, idempotency_fingerprint) VALUES ($1, $2, $3, gen_random_uuid(), '\x00')`
	step("insert c1", ins, f.tenant, "c1", 10)
	step("insert c2", ins, f.tenant, "c2", 20)
	step("add 5 to c1", `UPDATE `+f.orders+` SET amount = amount + 5 WHERE tenant_id = $1 AND customer = $2`, f.tenant, "c1")
	step("delete c2", `DELETE FROM `+f.orders+` WHERE tenant_id = $1 AND customer = $2`, f.tenant, "c2")

	// The row pattern: the row carries its key.
	in := idempotency.Insert{Table: f.orders, Tenant: f.tenant, Key: idempotency.NewKey(),
		Columns: []string{"customer", "amount"}, Values: []any{"c3", 30}, Returning: []string{"id"}}
	if _, err := lossy.Insert(ctx, in); err == nil {
		t.Fatal("row pattern: the lossy commit reported success")
	}
	got, err := keys.Insert(ctx, in)
	if err != nil || !got.Replayed || len(got.Values) != 1 {
		t.Fatalf("row pattern retry: %+v, %v; want the first row replayed", got, err)
	}
	var id int64
	if err := f.admin.QueryRow(ctx, `SELECT id FROM `+f.orders+` WHERE idempotency_key = $1`, in.Key).Scan(&id); err != nil || got.Values[0] != id {
		t.Errorf("row pattern retry returned id %v, the row has %d (%v)", got.Values[0], id, err)
	}

	want := []string{f.tenant + ":c1:15.00", f.tenant + ":c3:30.00"}
	if got := f.rows(t); !slices.Equal(got, want) {
		t.Errorf("orders %q, want %q", got, want)
	}

	// Through HTTP: the first response is lost on the way back.
	h := idempotency.Middleware(keys, func(r *http.Request) (string, error) { return r.Header.Get("X-Tenant"), nil }, idempotency.RequireKey())(ordersHandler(f.orders))
	key := idempotency.NewKey().Header()
	post := func() *httptest.ResponseRecorder {
		r := httptest.NewRequest("POST", "/orders", strings.NewReader(`{"customer":"c4","amount":40}`))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("X-Tenant", f.tenant)
		r.Header.Set(idempotency.HeaderName, key)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	first := post() // never read by the client
	retry := post()
	if retry.Code != 201 || retry.Header().Get(idempotency.ReplayedHeader) != "true" || retry.Body.String() != first.Body.String() {
		t.Errorf("HTTP retry: %d replayed=%q body %s; want the first response %d %s", retry.Code, retry.Header().Get(idempotency.ReplayedHeader), retry.Body, first.Code, first.Body)
	}
	want = append(want, f.tenant+":c4:40.00")
	if got := f.rows(t); !slices.Equal(got, want) {
		t.Errorf("orders after the HTTP retry %q, want %q", got, want)
	}
}

// ordersHandler creates an order from a JSON body in the request's
// transaction and answers 201 with its id.
func ordersHandler(table string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var o struct {
			Customer string  `json:"customer"`
			Amount   float64 `json:"amount"`
		}
		if err := json.NewDecoder(r.Body).Decode(&o); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		var id int64
		err := idempotency.TxFromContext(r.Context()).QueryRow(r.Context(), `INSERT INTO `+table+` (tenant_id, customer, amount, idempotency_key, idempotency_fingerprint)
			VALUES (current_setting('walhouse.tenant'), $1, $2, gen_random_uuid(), '\x00') RETURNING id`, o.Customer, o.Amount).Scan(&id)
		if err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(201)
		fmt.Fprintf(w, `{"id":%d}`, id)
	})
}

// TestIntegrationConcurrentSameKey starts attempts with one key at once:
// exactly one takes effect; the others wait for it and replay its result,
// or, with a bounded wait, get ErrInFlight.
func TestIntegrationConcurrentSameKey(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	keys := idempotency.New(f.app)
	for _, tc := range []struct {
		name string
		wait time.Duration
	}{{"waiting", 0}, {"bounded wait", 20 * time.Millisecond}} {
		t.Run(tc.name, func(t *testing.T) {
			customer := testenv.Name("c")
			r := idempotency.Request{Tenant: f.tenant, Key: idempotency.NewKey(), Fingerprint: fingerprint(t, "insert", customer), InFlightWait: tc.wait}
			var effects atomic.Int32
			var replayed, inFlight, ran atomic.Int32
			var wg sync.WaitGroup
			start := make(chan struct{})
			for range 8 {
				wg.Go(func() {
					<-start
					out, err := keys.Do(ctx, r, func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
						effects.Add(1)
						if _, err := tx.Exec(ctx, `INSERT INTO `+f.orders+` (tenant_id, customer, amount, idempotency_key, idempotency_fingerprint) VALUES ($1, $2, 1, gen_random_uuid(), '\x00')`, f.tenant, customer); err != nil {
							return nil, err
						}
						time.Sleep(300 * time.Millisecond) // hold the key while the others arrive
						return []byte("made " + customer), nil
					})
					switch {
					case errors.Is(err, idempotency.ErrInFlight):
						inFlight.Add(1)
					case err != nil:
						t.Error(err)
					case out.Replayed && string(out.Result) == "made "+customer:
						replayed.Add(1)
					case out.Replayed:
						t.Errorf("replayed %q", out.Result)
					default:
						ran.Add(1)
					}
				})
			}
			close(start)
			wg.Wait()
			var n int
			if err := f.admin.QueryRow(ctx, `SELECT count(*) FROM `+f.orders+` WHERE customer = $1`, customer).Scan(&n); err != nil {
				t.Fatal(err)
			}
			t.Logf("ran %d, replayed %d, in flight %d", ran.Load(), replayed.Load(), inFlight.Load())
			if n != 1 || effects.Load() != 1 || ran.Load() != 1 {
				t.Errorf("%d rows, fn ran %d times, %d attempts ran; want exactly one", n, effects.Load(), ran.Load())
			}
			if tc.wait == 0 && replayed.Load() != 7 {
				t.Errorf("%d of the 7 others replayed, want all (they wait)", replayed.Load())
			}
			if tc.wait > 0 && inFlight.Load() == 0 {
				t.Error("no attempt got ErrInFlight though the first held the key for 300ms")
			}
		})
	}
	t.Run("row pattern", func(t *testing.T) {
		in := idempotency.Insert{Table: f.orders, Tenant: f.tenant, Key: idempotency.NewKey(),
			Columns: []string{"customer", "amount"}, Values: []any{testenv.Name("c"), 1}, Returning: []string{"id"}}
		var fresh atomic.Int32
		ids := make(chan any, 8)
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				got, err := keys.Insert(ctx, in)
				if err != nil {
					t.Error(err)
					return
				}
				if !got.Replayed {
					fresh.Add(1)
				}
				ids <- got.Values[0]
			})
		}
		wg.Wait()
		close(ids)
		var first any
		for id := range ids {
			if first == nil {
				first = id
			}
			if id != first {
				t.Errorf("ids %v and %v for one key", first, id)
			}
		}
		var n int
		if err := f.admin.QueryRow(ctx, `SELECT count(*) FROM `+f.orders+` WHERE idempotency_key = $1`, in.Key).Scan(&n); err != nil || n != 1 || fresh.Load() != 1 {
			t.Errorf("%d rows (%v), %d fresh inserts; want 1 and 1", n, err, fresh.Load())
		}
	})
}

// TestIntegrationKeyReusedForAnotherRequest sends a second, different
// request with a used key: refused with a *MismatchError, nothing done.
func TestIntegrationKeyReusedForAnotherRequest(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	keys := idempotency.New(f.app)
	key := idempotency.NewKey()
	ins := func(customer string) func(context.Context, pgx.Tx) ([]byte, error) {
		return func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
			_, err := tx.Exec(ctx, `INSERT INTO `+f.orders+` (tenant_id, customer, amount, idempotency_key, idempotency_fingerprint) VALUES ($1, $2, 1, gen_random_uuid(), '\x00')`, f.tenant, customer)
			return []byte("ok"), err
		}
	}
	if _, err := keys.Do(ctx, idempotency.Request{Tenant: f.tenant, Key: key, Fingerprint: fingerprint(t, "insert", "c1")}, ins("c1")); err != nil {
		t.Fatal(err)
	}
	_, err := keys.Do(ctx, idempotency.Request{Tenant: f.tenant, Key: key, Fingerprint: fingerprint(t, "insert", "c2")}, ins("c2"))
	var mm *idempotency.MismatchError
	if !errors.As(err, &mm) || !errors.Is(err, idempotency.ErrKeyReused) || mm.Key != key {
		t.Fatalf("key reused for another request: %v; want a *MismatchError", err)
	}
	// A key bound to a principal replays only to it: another principal
	// of the tenant with the same request is refused and learns nothing.
	pkey, fp := idempotency.NewKey(), fingerprint(t, "insert", "c5")
	alice := idempotency.Request{Tenant: f.tenant, Key: pkey, Fingerprint: fp, Principal: "alice"}
	if _, err := keys.Do(ctx, alice, func(context.Context, pgx.Tx) ([]byte, error) { return []byte("alice's"), nil }); err != nil {
		t.Fatal(err)
	}
	mallory := alice
	mallory.Principal = "mallory"
	out, err := keys.Do(ctx, mallory, func(context.Context, pgx.Tx) ([]byte, error) { return []byte("mallory's"), nil })
	if !errors.Is(err, idempotency.ErrKeyReused) || out.Result != nil {
		t.Errorf("another principal with alice's key: %+v, %v; want ErrKeyReused and nothing replayed", out, err)
	}
	if out, err := keys.Do(ctx, alice, nil); err != nil || !out.Replayed || string(out.Result) != "alice's" {
		t.Errorf("alice's retry: %+v, %v; want her result replayed", out, err)
	}

	in := idempotency.Insert{Table: f.orders, Tenant: f.tenant, Key: idempotency.NewKey(), Columns: []string{"customer", "amount"}, Values: []any{"c3", 3}}
	if _, err := keys.Insert(ctx, in); err != nil {
		t.Fatal(err)
	}
	in.Values = []any{"c3", 4}
	if _, err := keys.Insert(ctx, in); !errors.Is(err, idempotency.ErrKeyReused) {
		t.Fatalf("row pattern, key reused for another row: %v; want ErrKeyReused", err)
	}
	want := []string{f.tenant + ":c1:1.00", f.tenant + ":c3:3.00"}
	if got := f.rows(t); !slices.Equal(got, want) {
		t.Errorf("orders %q, want %q", got, want)
	}
}

// TestIntegrationTenantIsolation checks row-level security as a role that
// is subject to it: a tenant sees only its keys and rows, a transaction
// without a tenant sees none, a tenant cannot write another's, and the
// same key under another tenant is another key (it runs; it never replays
// the first tenant's result) or, in the row pattern, is refused without
// showing the other tenant's row.
func TestIntegrationTenantIsolation(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	var super, bypass bool
	if err := f.app.QueryRow(ctx, `SELECT rolsuper, rolbypassrls FROM pg_roles WHERE rolname = current_user`).Scan(&super, &bypass); err != nil || super || bypass {
		t.Fatalf("the app role is superuser=%v bypassrls=%v (%v): row-level security would not apply", super, bypass, err)
	}
	keys := idempotency.New(f.app)
	a, b := f.tenant, f.tenant+"b"
	key := idempotency.NewKey()
	fp := fingerprint(t, "secret", "x")
	if _, err := keys.Do(ctx, idempotency.Request{Tenant: a, Key: key, Fingerprint: fp}, func(context.Context, pgx.Tx) ([]byte, error) {
		return []byte("a's secret"), nil
	}); err != nil {
		t.Fatal(err)
	}
	out, err := keys.Do(ctx, idempotency.Request{Tenant: b, Key: key, Fingerprint: fp}, func(context.Context, pgx.Tx) ([]byte, error) {
		return []byte("b's own"), nil
	})
	if err != nil || out.Replayed || string(out.Result) != "b's own" {
		t.Fatalf("tenant b with a's key: %+v, %v; want b's own fresh result", out, err)
	}

	count := func(tenant, sql string) (int, error) {
		tx, err := f.app.Begin(ctx)
		if err != nil {
			return 0, err
		}
		defer func() { _ = tx.Rollback(ctx) }()
		if tenant != "" {
			if err := idempotency.SetTenant(ctx, tx, tenant); err != nil {
				return 0, err
			}
		}
		var n int
		err = tx.QueryRow(ctx, sql, key).Scan(&n)
		return n, err
	}
	q := `SELECT count(*) FROM ` + idempotency.KeyTable + ` WHERE idempotency_key = $1`
	for _, tc := range []struct {
		tenant string
		want   int
	}{{a, 1}, {b, 1}, {"", 0}, {f.tenant + "c", 0}} {
		if n, err := count(tc.tenant, q); err != nil || n != tc.want {
			t.Errorf("tenant %q sees %d rows of the key (%v), want %d", tc.tenant, n, err, tc.want)
		}
	}
	// The empty setting left behind by an earlier transaction of the
	// session matches nothing either.
	conn, err := f.app.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SELECT set_config('walhouse.tenant', '`+a+`', true)`); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := conn.QueryRow(ctx, q, key).Scan(&n); err != nil || n != 0 {
		t.Errorf("after the tenant's transaction ended, the session sees %d rows (%v), want 0", n, err)
	}
	// Writing a row of another tenant is refused.
	tx, err := f.app.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_ = idempotency.SetTenant(ctx, tx, b)
	_, err = tx.Exec(ctx, `INSERT INTO `+idempotency.KeyTable+` (tenant_id, idempotency_key, fingerprint) VALUES ($1, $2, $3)`, a, idempotency.NewKey(), fp[:])
	_ = tx.Rollback(ctx)
	if err == nil || !strings.Contains(err.Error(), "row-level security") {
		t.Errorf("tenant b wrote a key of tenant a: %v", err)
	}

	// The row pattern's key column is unique across tenants: b reusing
	// a's key is refused, and learns nothing of a's row.
	in := idempotency.Insert{Table: f.orders, Tenant: a, Key: idempotency.NewKey(), Columns: []string{"customer", "amount"}, Values: []any{"ca", 1}, Returning: []string{"customer"}}
	if _, err := keys.Insert(ctx, in); err != nil {
		t.Fatal(err)
	}
	in.Tenant = b
	got, err := keys.Insert(ctx, in)
	if !errors.Is(err, idempotency.ErrKeyReused) || got.Values != nil {
		t.Errorf("tenant b inserting with a's key: %+v, %v; want ErrKeyReused and no values", got, err)
	}
	if got := f.rows(t); !slices.Equal(got, []string{a + ":ca:1.00"}) {
		t.Errorf("orders %q", got)
	}
}

// TestIntegrationPruneTwoAtOnce runs two pruners at once, as a role of
// PrunerRole, over thousands of expired keys of many tenants:
// together they delete each expired key once and keep every other.
func TestIntegrationPruneTwoAtOnce(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	// Created 40 and 2 days ago, written as the superuser (row-level
	// security would refuse keys of tenants other than the one set).
	if _, err := f.admin.Exec(ctx, `INSERT INTO `+idempotency.KeyTable+` (tenant_id, idempotency_key, fingerprint, created_at)
		SELECT $1 || (i % 50), gen_random_uuid(), sha256(i::text::bytea), now() - CASE WHEN i <= 2500 THEN interval '40 days' ELSE interval '2 days' END
		FROM generate_series(1, 2600) i`, f.tenant); err != nil {
		t.Fatal(err)
	}
	var expired, kept int64
	if err := f.admin.QueryRow(ctx, `SELECT count(*) FILTER (WHERE created_at < now() - interval '30 days'), count(*) FILTER (WHERE tenant_id LIKE $1 || '%' AND created_at >= now() - interval '30 days') FROM `+idempotency.KeyTable, f.tenant).Scan(&expired, &kept); err != nil {
		t.Fatal(err)
	}
	var (
		wg      sync.WaitGroup
		deleted [2]int64
		batches [2]int
	)
	for i := range 2 {
		p, err := idempotency.NewPruner(f.pruner, idempotency.WithBatchSize(100), idempotency.WithRetentionDays(30))
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			prog, err := p.Prune(ctx)
			if err != nil {
				t.Error(err)
			}
			deleted[i], batches[i] = prog.Deleted, prog.Batches
		})
	}
	wg.Wait()
	t.Logf("pruner 1 deleted %d in %d batches, pruner 2 %d in %d; %d were expired", deleted[0], batches[0], deleted[1], batches[1], expired)
	if deleted[0]+deleted[1] != expired {
		t.Errorf("deleted %d + %d, want %d in all", deleted[0], deleted[1], expired)
	}
	var left, keptNow int64
	if err := f.admin.QueryRow(ctx, `SELECT count(*) FILTER (WHERE created_at < now() - interval '30 days'), count(*) FILTER (WHERE tenant_id LIKE $1 || '%') FROM `+idempotency.KeyTable, f.tenant).Scan(&left, &keptNow); err != nil {
		t.Fatal(err)
	}
	if left != 0 || keptNow != kept || kept != 100 {
		t.Errorf("%d expired keys left, %d of the %d young ones kept (want 0, 100 of 100)", left, keptNow, kept)
	}
	// A pruner with retention under a day is refused: the policy would
	// not show it the keys.
	if _, err := idempotency.NewPruner(f.app, idempotency.WithRetentionDays(0), idempotency.WithBatchSize(0)); err == nil || !strings.Contains(err.Error(), "at least 1") {
		t.Errorf("NewPruner with 0 days and batch 0: %v", err)
	}
}

// TestIntegrationPrunerRunsDaily runs the daily job on a clock that
// stands at 02:59 UTC: it must wait one minute, prune, and wait for the
// next day's 03:00 (where the test stops it).
func TestIntegrationPrunerRunsDaily(t *testing.T) {
	f := setup(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := f.admin.Exec(ctx, `INSERT INTO `+idempotency.KeyTable+` (tenant_id, idempotency_key, fingerprint, created_at)
		SELECT $1, gen_random_uuid(), sha256(i::text::bytea), now() - interval '31 days' FROM generate_series(1, 10) i`, f.tenant); err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 24, 2, 59, 0, 0, time.UTC)
	var waits []time.Duration
	p, err := idempotency.NewPruner(f.pruner, idempotency.WithClock(func() time.Time { return now }, func(ctx context.Context, d time.Duration) error {
		waits = append(waits, d)
		if len(waits) == 2 {
			cancel()
			return ctx.Err()
		}
		now = now.Add(d)
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Run(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run: %v, want context.Canceled", err)
	}
	if want := []time.Duration{time.Minute, 24 * time.Hour}; !slices.Equal(waits, want) {
		t.Errorf("waits %v, want %v", waits, want)
	}
	var left int
	if err := f.admin.QueryRow(context.Background(), `SELECT count(*) FROM `+idempotency.KeyTable+` WHERE tenant_id = $1`, f.tenant).Scan(&left); err != nil || left != 0 {
		t.Errorf("%d of the tenant's expired keys left (%v), want 0", left, err)
	}
}

// TestIntegrationRetentionIsThePrunersOnly checks that pruning is no door
// into other tenants' keys: an ordinary role that sets the setting which
// once opened the retention policy (walhouse.idempotency_prune) sees no
// other tenant's key, response or fingerprint, and cannot prune; the
// pruner's role sees only expired keys, and of them only tenant, key and
// age, and can delete them but write nothing.
func TestIntegrationRetentionIsThePrunersOnly(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	victim := f.tenant + "victim"
	if _, err := f.admin.Exec(ctx, `INSERT INTO `+idempotency.KeyTable+` (tenant_id, idempotency_key, fingerprint, result, created_at)
		SELECT $1, gen_random_uuid(), sha256(i::text::bytea), 'victim''s stored response', now() - (i || ' days')::interval
		FROM generate_series(0, 40, 10) i`, victim); err != nil {
		t.Fatal(err)
	}
	// read runs sql in a transaction of pool that sets the old prune
	// setting and, if tenant is not empty, a tenant of its own.
	read := func(pool *pgxpool.Pool, tenant, sql string) (int, error) {
		tx, err := pool.Begin(ctx)
		if err != nil {
			return 0, err
		}
		defer func() { _ = tx.Rollback(ctx) }()
		if _, err := tx.Exec(ctx, `SELECT set_config('walhouse.idempotency_prune', 'on', true)`); err != nil {
			return 0, err
		}
		if tenant != "" {
			if err := idempotency.SetTenant(ctx, tx, tenant); err != nil {
				return 0, err
			}
		}
		var n int
		err = tx.QueryRow(ctx, sql, victim).Scan(&n)
		return n, err
	}
	all := `SELECT count(*) FROM ` + idempotency.KeyTable + ` WHERE tenant_id = $1`
	for _, tenant := range []string{"", f.tenant} {
		if n, err := read(f.app, tenant, all); err != nil || n != 0 {
			t.Errorf("the application's role with walhouse.idempotency_prune on and tenant %q sees %d of another tenant's keys (%v), want 0", tenant, n, err)
		}
		if n, err := read(f.app, tenant, `SELECT count(*) FROM `+idempotency.KeyTable+` WHERE tenant_id = $1 AND result <> ''`); err != nil || n != 0 {
			t.Errorf("the application's role with walhouse.idempotency_prune on and tenant %q reads %d of another tenant's stored responses (%v), want 0", tenant, n, err)
		}
	}
	// A clock that never sleeps: a Run that does not refuse returns at
	// once instead of waiting for 03:00.
	slept := errors.New("Run waited for its daily time")
	p, err := idempotency.NewPruner(f.app, idempotency.WithRetentionDays(1), idempotency.WithClock(time.Now, func(context.Context, time.Duration) error { return slept }))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Prune(ctx); !errors.Is(err, idempotency.ErrNotPruner) {
		t.Errorf("Prune as the application's role: %v, want ErrNotPruner", err)
	}
	if err := p.Run(ctx); !errors.Is(err, idempotency.ErrNotPruner) {
		t.Errorf("Run as the application's role: %v, want ErrNotPruner", err)
	}

	// The pruner's role sees the expired keys (older than a day) only,
	// and nothing of them but their identity and age.
	if n, err := read(f.pruner, "", all); err != nil || n != 4 {
		t.Errorf("the pruner's role sees %d of the tenant's keys (%v), want the 4 expired ones", n, err)
	}
	for _, col := range []string{"result", "fingerprint"} {
		if _, err := read(f.pruner, "", `SELECT count(`+col+`) FROM `+idempotency.KeyTable+` WHERE tenant_id = $1`); err == nil || !strings.Contains(err.Error(), "permission denied") {
			t.Errorf("the pruner's role reading %s: %v, want permission denied", col, err)
		}
	}
	for _, sql := range []string{
		`UPDATE ` + idempotency.KeyTable + ` SET created_at = now() WHERE tenant_id = $1`,
		`INSERT INTO ` + idempotency.KeyTable + ` (tenant_id, idempotency_key, fingerprint) VALUES ($1, gen_random_uuid(), sha256('x'))`,
	} {
		if _, err := f.pruner.Exec(ctx, sql, victim); err == nil || !strings.Contains(err.Error(), "permission denied") {
			t.Errorf("the pruner's role: %s: %v, want permission denied", firstWords(sql), err)
		}
	}
	p, err = idempotency.NewPruner(f.pruner, idempotency.WithRetentionDays(15))
	if err != nil {
		t.Fatal(err)
	}
	if prog, err := p.Prune(ctx); err != nil || prog.Deleted != 3 {
		t.Errorf("Prune as the pruner's role: %+v, %v; want the 3 keys older than 15 days deleted", prog, err)
	}
	var ages []int
	rows, err := f.admin.Query(ctx, `SELECT extract(day FROM now() - created_at)::int FROM `+idempotency.KeyTable+` WHERE tenant_id = $1 ORDER BY 1`, victim)
	if err != nil {
		t.Fatal(err)
	}
	if ages, err = pgx.CollectRows(rows, pgx.RowTo[int]); err != nil || !slices.Equal(ages, []int{0, 10}) {
		t.Errorf("keys left %v days old (%v), want [0 10]", ages, err)
	}
}

// firstWords returns the first two words of sql, for messages.
func firstWords(sql string) string {
	w := strings.Fields(sql)
	return strings.Join(w[:min(2, len(w))], " ")
}

// TestIntegrationMigrateReplacesTheOldRetentionPolicy brings a key table
// of an older walhouse, whose retention policy any role could open with a
// setting, up to date: the application's role, which may not change it,
// is told to run Migrate as the owner rather than go on with the open
// policy; the owner's Migrate replaces it, and the setting opens nothing.
func TestIntegrationMigrateReplacesTheOldRetentionPolicy(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	for _, s := range []string{
		`DROP POLICY IF EXISTS walhouse_retention_read ON ` + idempotency.KeyTable,
		`DROP POLICY walhouse_retention ON ` + idempotency.KeyTable,
		`CREATE POLICY walhouse_retention ON ` + idempotency.KeyTable + `
			USING (current_setting('walhouse.idempotency_prune', true) = 'on' AND created_at < now() - interval '1 day')
			WITH CHECK (false)`,
		`INSERT INTO ` + idempotency.KeyTable + ` (tenant_id, idempotency_key, fingerprint, result, created_at)
			VALUES ('` + f.tenant + `victim', gen_random_uuid(), sha256('x'), 'secret', now() - interval '2 days')`,
	} {
		if _, err := f.admin.Exec(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	if err := idempotency.Migrate(ctx, f.app); err == nil || !strings.Contains(err.Error(), "as the table's owner") {
		t.Fatalf("Migrate as the application's role over the old policy: %v; want the error that asks for the owner", err)
	}
	if err := idempotency.Migrate(ctx, f.admin); err != nil {
		t.Fatalf("Migrate as the owner: %v", err)
	}
	if err := idempotency.Migrate(ctx, f.app); err != nil {
		t.Fatalf("Migrate as the application's role after the owner's: %v", err)
	}
	tx, err := f.app.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `SELECT set_config('walhouse.idempotency_prune', 'on', true)`); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM `+idempotency.KeyTable).Scan(&n); err != nil || n != 0 {
		t.Errorf("after the upgrade the prune setting shows the application's role %d keys (%v), want 0", n, err)
	}
}
