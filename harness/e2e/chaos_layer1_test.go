package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/walhouse/walhouse/idempotency"
)

// chaosWrite is one write of the Layer 1 workload: an application's
// request, sent with its Idempotency-Key once or several times.
type chaosWrite struct {
	Op     string `json:"op"` // insert, bump (qty = qty + 1: not idempotent by itself) or delete
	Tenant string `json:"-"`
	ID     int64  `json:"id"`
}

// layer1App is an application that writes the chaos table through Layer
// 1's HTTP middleware (package idempotency), and the model of what its
// writes must have done, each once.
type layer1App struct {
	srv   *httptest.Server
	mu    sync.Mutex
	model map[string]map[int64]int // tenant → id → qty
	next  int64                    // the next new id: from 1e9 on, which the other workload never uses
	live  []chaosWrite             // the rows inserted and not deleted
}

func (c *chaos) startLayer1App() *layer1App {
	c.t.Helper()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, c.env.PG)
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(pool.Close)
	if err := idempotency.Migrate(ctx, pool); err != nil {
		c.t.Fatal(err)
	}
	table := c.sinkTable.quoted
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var wr chaosWrite
		if err := json.NewDecoder(r.Body).Decode(&wr); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		tx := idempotency.TxFromContext(r.Context())
		tenant := r.Header.Get("X-Tenant")
		var sql string
		switch wr.Op {
		case "insert":
			sql = `INSERT INTO ` + table + ` (tenant_id, id, qty, status, updated_at) VALUES ($1, $2, 1, 'layer 1', '2026-01-01 00:00:00+00')`
		case "bump":
			sql = `UPDATE ` + table + ` SET qty = qty + 1 WHERE tenant_id = $1 AND id = $2`
		case "delete":
			sql = `DELETE FROM ` + table + ` WHERE tenant_id = $1 AND id = $2`
		default:
			http.Error(w, "unknown op", http.StatusBadRequest)
			return
		}
		tag, err := tx.Exec(r.Context(), sql, tenant, wr.ID)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError) // a 5xx rolls back; the retry runs again
			return
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "%d", tag.RowsAffected())
	})
	mw := idempotency.Middleware(idempotency.New(pool), func(r *http.Request) (string, error) { return r.Header.Get("X-Tenant"), nil })
	app := &layer1App{srv: httptest.NewServer(mw(handler)), model: map[string]map[int64]int{}, next: 1_000_000_000}
	c.t.Cleanup(app.srv.Close)
	return app
}

// send sends wr with key until it gets an answer below 500 that is not
// 409 (another attempt in flight), and returns whether it was a replay.
func (a *layer1App) send(ctx context.Context, wr chaosWrite, key idempotency.Key) (replayed bool, err error) {
	body, _ := json.Marshal(wr)
	var last string
	for attempt := 0; ; attempt++ {
		if attempt == 500 {
			return false, fmt.Errorf("%s %d of %s: 500 attempts answered 409 or 5xx, the last: %s", wr.Op, wr.ID, wr.Tenant, last)
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, a.srv.URL+"/rows", bytes.NewReader(body))
		req.Header.Set(idempotency.HeaderName, key.Header())
		req.Header.Set("X-Tenant", wr.Tenant)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, fmt.Errorf("%s %d of %s, attempt %d: %w", wr.Op, wr.ID, wr.Tenant, attempt, err)
		}
		msg, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		last = resp.Status + " " + string(msg)
		switch {
		case resp.StatusCode == http.StatusConflict || resp.StatusCode >= 500:
			time.Sleep(20 * time.Millisecond)
			continue
		case resp.StatusCode != http.StatusCreated:
			return false, fmt.Errorf("%s %d of %s: %s", wr.Op, wr.ID, wr.Tenant, last)
		}
		return resp.Header.Get(idempotency.ReplayedHeader) == "true", nil
	}
}

// write does wr once in the model and sends it 1 + retries times with one
// key, two of them at once: a client that timed out, lost the response or
// clicked twice. It returns how many attempts were replays.
func (a *layer1App) write(ctx context.Context, wr chaosWrite, retries int) (int, error) {
	key := idempotency.NewKey()
	a.mu.Lock()
	rows := a.model[wr.Tenant]
	if rows == nil {
		rows = map[int64]int{}
		a.model[wr.Tenant] = rows
	}
	switch wr.Op {
	case "insert":
		rows[wr.ID] = 1
	case "bump":
		if _, ok := rows[wr.ID]; ok {
			rows[wr.ID]++
		}
	case "delete":
		delete(rows, wr.ID)
	}
	a.mu.Unlock()
	results := make([]bool, 1+retries)
	errs := make([]error, 1+retries)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); results[1], errs[1] = a.send(ctx, wr, key) }() // the first retry races the first attempt
	results[0], errs[0] = a.send(ctx, wr, key)
	wg.Wait()
	for i := 2; i < len(results); i++ {
		results[i], errs[i] = a.send(ctx, wr, key)
	}
	replays := 0
	for i, r := range results {
		if errs[i] != nil {
			return 0, errs[i]
		}
		if r {
			replays++
		}
	}
	if replays != retries {
		return replays, fmt.Errorf("%s %d of %s: %d of %d retries replayed, want all", wr.Op, wr.ID, wr.Tenant, replays, retries)
	}
	return replays, nil
}

// rows returns the model as the rows of layer1Query.
func (a *layer1App) rows() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []string
	for tenant, rows := range a.model {
		for id, qty := range rows {
			out = append(out, tenant+" | "+strconv.FormatInt(id, 10)+" | "+strconv.Itoa(qty))
		}
	}
	slices.Sort(out)
	return out
}

// runLayer1 sends n keyed writes of the Layer 1 workload (inserts, bumps
// and deletes of rows whose ids the other workload never uses), each sent
// two to four times, and checks that PostgreSQL holds exactly the model:
// every write done once. It returns the retries.
func (c *chaos) runLayer1(app *layer1App, n int) int {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 11))
	retries := 0
	for range n {
		wr := chaosWrite{Op: "insert", Tenant: chaosTenant(rng.IntN(c.cfg.tenants)), ID: app.next}
		if r := rng.IntN(10); len(app.live) > 0 && r < 4 {
			wr = app.live[rng.IntN(len(app.live))]
			wr.Op = "bump"
		} else if len(app.live) > 0 && r < 5 {
			i := rng.IntN(len(app.live))
			wr = app.live[i]
			wr.Op = "delete"
			app.live = slices.Delete(app.live, i, i+1)
		} else {
			app.next++
			app.live = append(app.live, wr)
		}
		k := 1 + rng.IntN(3)
		if _, err := app.write(ctx, wr, k); err != nil {
			c.t.Fatal(err)
		}
		retries += k
	}
	got, err := pgRows(ctx, c.pg, fmt.Sprintf(`SELECT tenant_id, id::text, qty::text FROM %s WHERE id >= 1000000000`, c.sinkTable.quoted))
	if err != nil {
		c.t.Fatal(err)
	}
	slices.Sort(got)
	if d := diff(app.rows(), got); d != "" {
		c.t.Errorf("PostgreSQL is not every Layer 1 write done once (pg: the model, ch: PostgreSQL):\n%s", d)
	}
	return retries
}

// httpRetry is Layer 1's scenario: an application writes through the
// Idempotency-Key middleware and its client retries every write (once
// racing the first attempt); each write must take effect once in
// PostgreSQL, and ClickHouse FINAL must equal PostgreSQL.
func (c *chaos) httpRetry() {
	c.startCapture("")
	c.startSink("")
	c.startWorkload(1, false).finish(c.t) // makes the table (holdMerges)
	app := c.startLayer1App()
	c.faults += c.runLayer1(app, int(c.cfg.each/20))
}
