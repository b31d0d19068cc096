package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/walhouse/walhouse/harness/testenv"
	"github.com/walhouse/walhouse/idempotency"
	"github.com/walhouse/walhouse/query"
	"github.com/walhouse/walhouse/record"
	"github.com/walhouse/walhouse/schema"
)

// tokenRig is a pipeline with an application that writes through Layer 1's
// middleware (which answers each write with its consistency token) and
// the query API in process, with a read key per tenant.
type tokenRig struct {
	p       *pipeline
	table   string // PostgreSQL's
	chTable string // ClickHouse's
	app     *httptest.Server
	api     *httptest.Server
	keys    map[string]string // tenant → secret
	source  idempotency.Token
}

func newTokenRig(t *testing.T, p *pipeline, table, quoted string, tenants []string, maxConcurrent int) *tokenRig {
	t.Helper()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, p.env.PG)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := idempotency.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, err := strconv.ParseInt(r.URL.Query().Get("id"), 10, 64)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		tx := idempotency.TxFromContext(r.Context())
		if _, err := tx.Exec(r.Context(), `INSERT INTO `+quoted+` (tenant_id, id, v) VALUES ($1, $2, 1)`, r.Header.Get("X-Tenant"), id); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusCreated)
	})
	mw := idempotency.Middleware(idempotency.New(pool), func(r *http.Request) (string, error) { return r.Header.Get("X-Tenant"), nil }, idempotency.RequireKey())
	rig := &tokenRig{p: p, table: table, chTable: schema.TableName(record.Source{Schema: "public", Table: table}), app: httptest.NewServer(mw(handler)), keys: map[string]string{}}
	t.Cleanup(rig.app.Close)

	var entries []query.Key
	for _, tenant := range tenants {
		secret, err := query.NewSecret()
		if err != nil {
			t.Fatal(err)
		}
		rig.keys[tenant] = secret
		entries = append(entries, query.Key{ID: "k-" + tenant, Hash: query.HashKey(secret), Tenant: tenant, Scopes: []query.Scope{query.ScopeRead}})
	}
	raw, _ := json.Marshal(entries)
	keys, err := query.ParseKeys(raw)
	if err != nil {
		t.Fatal(err)
	}
	if rig.source, err = idempotency.ReadToken(ctx, pool); err != nil {
		t.Fatal(err)
	}
	rig.source.LSN = 0
	api, err := query.NewServer(query.Config{Conn: p.ch, Database: p.database, Keys: keys, CursorSecret: []byte("token-test-cursor-secret"),
		TokenSource: rig.source, Limits: query.Limits{MaxConcurrent: maxConcurrent}})
	if err != nil {
		t.Fatal(err)
	}
	rig.api = httptest.NewServer(api)
	t.Cleanup(rig.api.Close)
	return rig
}

// write inserts (tenant, id) through the middleware and returns the
// response's consistency token.
func (rig *tokenRig) write(ctx context.Context, tenant string, id int64) (string, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, rig.app.URL+"/orders?id="+strconv.FormatInt(id, 10), nil)
	req.Header.Set("X-Tenant", tenant)
	req.Header.Set(idempotency.HeaderName, idempotency.NewKey().Header())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	tok := resp.Header.Get(idempotency.TokenHeader)
	if resp.StatusCode != http.StatusCreated || tok == "" {
		return "", fmt.Errorf("write %s/%d: %s %s, token %q", tenant, id, resp.Status, body, tok)
	}
	return tok, nil
}

// tokenAnswer is what a read of one id returned.
type tokenAnswer struct {
	status int
	code   string
	ids    []int64
	fresh  *bool
	lsn    *string
	timing string // the query.TimingHeader
}

// read asks the API for tenant's row id, with token in the header and the
// rest of the body's token fields from extra.
func (rig *tokenRig) read(ctx context.Context, tenant string, id int64, token string, extra map[string]any) (tokenAnswer, error) {
	body := map[string]any{"columns": []string{"id"}, "filters": []map[string]any{{"column": "id", "op": "=", "value": id}}}
	for k, v := range extra {
		body[k] = v
	}
	raw, _ := json.Marshal(body)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, rig.api.URL+"/v1/tables/"+rig.chTable+"/query", bytes.NewReader(raw))
	req.Header.Set("Authorization", "Bearer "+rig.keys[tenant])
	if token != "" {
		req.Header.Set(query.TokenHeader, token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return tokenAnswer{}, err
	}
	defer resp.Body.Close()
	var out struct {
		Data []struct {
			ID json.Number `json:"id"`
		} `json:"data"`
		Meta struct {
			Fresh *bool   `json:"fresh"`
			LSN   *string `json:"lsn"`
		} `json:"meta"`
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return tokenAnswer{}, fmt.Errorf("read %s/%d: %s: %w", tenant, id, resp.Status, err)
	}
	a := tokenAnswer{status: resp.StatusCode, code: out.Error.Code, fresh: out.Meta.Fresh, lsn: out.Meta.LSN, timing: resp.Header.Get(query.TimingHeader)}
	for _, d := range out.Data {
		n, _ := d.ID.Int64()
		a.ids = append(a.ids, n)
	}
	return a, nil
}

// ownDatabase returns env with a PostgreSQL database of the test's own,
// dropped when the test ends. A capture takes the heartbeats of every
// capture of its database (they share the message key), and other tests'
// captures write them into the shared database every few seconds: there,
// they alone may make token reads fresh. Logical decoding passes a
// database's messages to its own slots only.
func ownDatabase(t *testing.T, env testenv.Env) testenv.Env {
	t.Helper()
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, env.PG)
	if err != nil {
		t.Fatalf("connect to PostgreSQL: %v", err)
	}
	name := testenv.Name("ryw")
	ident := pgx.Identifier{name}.Sanitize()
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+ident); err != nil {
		admin.Close(ctx)
		t.Fatalf("create database %s: %v", name, err)
	}
	// Registered first, so it runs last: after the processes stopped and
	// the slot was dropped.
	t.Cleanup(func() {
		if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+ident+" WITH (FORCE)"); err != nil {
			t.Errorf("drop database %s: %v; drop it with DROP DATABASE %s WITH (FORCE)", name, err, ident)
		}
		admin.Close(ctx)
	})
	u, err := url.Parse(env.PG)
	if err != nil {
		t.Fatalf("parse the PostgreSQL URL: %v", err)
	}
	u.Path = "/" + name
	env.PG = u.String()
	return env
}

// TestIntegrationReadYourWrites writes rows through Layer 1's middleware
// and reads each at once with its consistency token, across tenants and
// next to a concurrent load on another table, then by one writer alone:
// every read must include its row. Capture's heartbeats are a minute
// apart, and the test has a database of its own (no other capture's
// heartbeats), so only the consistency marks can make the table's
// partitions pass the tokens within the reads' wait (onStale fail: a read
// whose wait ended first is a failure, 425). It then checks a
// token of another database (refused), a wait that ends first (said so,
// or 425), that a waiting read holds no concurrency slot, and a sink
// stopped during waits (the reads end not fresh, without the row), and
// ends with ClickHouse FINAL compared with PostgreSQL.
func TestIntegrationReadYourWrites(t *testing.T) {
	iterations := 300
	if n, err := strconv.Atoi(os.Getenv("WALHOUSE_TOKEN_ITERATIONS")); err == nil && n > 0 {
		iterations = n
	}
	p := newPipelineAt(t, ownDatabase(t, testenv.Require(t, "pg", "kafka", "clickhouse")))
	table, quoted := p.table("ryw", `(tenant_id text, id bigint, v int, PRIMARY KEY (tenant_id, id))`)
	load, quotedLoad := p.table("ryw_load", `(tenant_id text, id bigint, v int, PRIMARY KEY (tenant_id, id))`)
	capture := p.runCapture(append(p.captureArgs([]string{table, load}), "--heartbeat-interval", "60s"))
	sink := p.startSink()
	tenants := []string{"ta", "tb", "tc", "td"}
	rig := newTokenRig(t, p, table, quoted, tenants, 1)

	// A concurrent load on another table of the pipeline: the WAL moves
	// on between a write's commit and its token, and the sink is busy.
	// The table read stays quiet but for the writes of the test, so its
	// partitions pass a token only by a later write, or a mark.
	stopLoad := p.keepWriting(5*time.Millisecond, func(k int) string {
		return fmt.Sprintf(`INSERT INTO %s VALUES ('load', %d, 0) ON CONFLICT (tenant_id, id) DO UPDATE SET v = %s.v + 1`, quotedLoad, k%500, quotedLoad)
	})

	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	var (
		mu    sync.Mutex
		waits []time.Duration
		fails []string
	)
	var wg sync.WaitGroup
	for w, tenant := range tenants {
		wg.Go(func() {
			for i := range iterations / len(tenants) {
				// A capture or sink that exited (another test on the
				// server may invalidate every slot behind it) fails
				// every read from then on: stop, and say so below.
				if exited(capture, sink) != nil {
					return
				}
				id := int64(w*1_000_000 + i)
				tok, err := rig.write(ctx, tenant, id)
				start := time.Now()
				var a tokenAnswer
				if err == nil {
					a, err = rig.read(ctx, tenant, id, tok, map[string]any{"wait": "10s", "onStale": "fail"})
				}
				took := time.Since(start)
				mu.Lock()
				switch {
				case err != nil:
					fails = append(fails, err.Error())
				case a.status != http.StatusOK || !slices.Equal(a.ids, []int64{id}) || a.fresh == nil || !*a.fresh:
					fails = append(fails, fmt.Sprintf("%s/%d with token %s: %d %s, ids %v, fresh %v", tenant, id, tok, a.status, a.code, a.ids, a.fresh))
				}
				waits = append(waits, took)
				if took > 2*time.Second {
					t.Logf("token read %s/%d (iteration %d) waited %v", tenant, id, i, took)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	requireRunning(t, capture, sink)
	if len(fails) > 0 {
		t.Fatalf("%d of %d token reads did not include their write, the first: %s", len(fails), len(waits), fails[0])
	}
	// One writer alone: no other write reaches the table's partitions.
	for i := range 20 {
		id := int64(5_000_000 + i)
		tok, err := rig.write(ctx, "ta", id)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		a, err := rig.read(ctx, "ta", id, tok, map[string]any{"wait": "10s", "onStale": "fail"})
		if err != nil || a.status != http.StatusOK || !slices.Equal(a.ids, []int64{id}) || a.fresh == nil || !*a.fresh {
			requireRunning(t, capture, sink)
			t.Fatalf("ta/%d alone, with token %s: %+v, %v; want its row, fresh", id, tok, a, err)
		}
		waits = append(waits, time.Since(start))
	}
	// The checks below are of the API, not of the pipeline's pace: the
	// load would only slow their reads on a busy machine.
	stopLoad()
	slices.Sort(waits)
	t.Logf("%d token reads, each with its row: wait p50 %v, p99 %v, max %v", len(waits), waits[len(waits)/2], waits[len(waits)*99/100], waits[len(waits)-1])

	// Another database's token is refused, never waited for.
	foreign := rig.source
	foreign.Database++
	foreign.LSN = 1
	if a, err := rig.read(ctx, "ta", 0, foreign.String(), nil); err != nil || a.status != http.StatusBadRequest || a.code != "foreign_token" {
		t.Errorf("a token of another database: %+v, %v; want 400 foreign_token", a, err)
	}

	// A token beyond what is loaded: the wait ends and says so.
	tok, err := rig.write(ctx, "ta", 9_000_000)
	if err != nil {
		t.Fatal(err)
	}
	parsed, _ := idempotency.ParseToken(tok)
	future := parsed
	future.LSN += 1 << 40
	if a, err := rig.read(ctx, "ta", 9_000_000, future.String(), map[string]any{"wait": "200ms"}); err != nil || a.status != http.StatusOK || a.fresh == nil || *a.fresh || a.lsn == nil {
		t.Errorf("a wait that ends first: %+v, %v; want 200 with meta.fresh false and meta.lsn", a, err)
	} else if ms, ok := strings.CutPrefix(a.timing, "token-wait;dur="); !ok {
		t.Errorf("a wait that ends first: %s %q, want token-wait;dur=<ms>", query.TimingHeader, a.timing)
	} else if d, err := strconv.ParseFloat(ms, 64); err != nil || d < 200 || d > 10_000 {
		t.Errorf("a wait of 200ms that ends first: %s %q, want a duration from 200 ms", query.TimingHeader, a.timing)
	}
	if a, err := rig.read(ctx, "ta", 9_000_000, future.String(), map[string]any{"wait": "200ms", "onStale": "fail"}); err != nil || a.status != http.StatusTooEarly || a.code != "not_loaded_yet" {
		t.Errorf("a wait that ends first, onStale fail: %+v, %v; want 425 not_loaded_yet", a, err)
	}

	// The tenant may run one query at once: a read waiting for a token
	// must not hold it. Reads of the tenant run all through the wait, one
	// every 20 ms (a client's pace, leaving the slot free in between): they
	// may be 429 while the waiting read holds its slot to parse or to read,
	// never during its 3 s of waiting. (It may itself be 429, when a read
	// holds the slot as it comes: it tries again 5 ms later.)
	waiting := make(chan tokenAnswer, 1)
	go func() {
		var a tokenAnswer
		for range 100 {
			if a, _ = rig.read(ctx, "tb", 0, future.String(), map[string]any{"wait": "3s"}); a.status != http.StatusTooManyRequests {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		waiting <- a
	}()
	var got, refused int
	for done := false; !done; {
		select {
		case a := <-waiting:
			done = true
			if a.status != http.StatusOK || a.fresh == nil || *a.fresh {
				t.Errorf("the waiting read: %+v; want 200, not fresh", a)
			}
			continue
		default:
		}
		time.Sleep(20 * time.Millisecond)
		a, err := rig.read(ctx, "tb", 0, "", nil)
		switch {
		case err != nil:
			t.Fatal(err)
		case a.status == http.StatusOK:
			got++
		case a.status == http.StatusTooManyRequests:
			refused++
		default:
			t.Fatalf("a read of the tenant while its other read waits for a token: %+v; want 200", a)
		}
	}
	if got < 10 || refused > got {
		t.Errorf("while a read of the tenant waited for a token, %d of its other reads got through and %d were refused (429): the waiting read held the tenant's slot", got, refused)
	}

	// The sink stops: a write's token read times out, honestly.
	sink.Stop()
	for i := range 3 {
		id := int64(9_100_000 + i)
		tok, err := rig.write(ctx, "tc", id)
		if err != nil {
			t.Fatal(err)
		}
		a, err := rig.read(ctx, "tc", id, tok, map[string]any{"wait": "1s"})
		if err != nil || a.status != http.StatusOK || a.fresh == nil || *a.fresh || len(a.ids) != 0 {
			t.Errorf("a token read with the sink stopped: %+v, %v; want 200, meta.fresh false, no row", a, err)
		}
	}
	sink = p.startSink()
	tok, err = rig.write(ctx, "tc", 9_200_000)
	if err != nil {
		t.Fatal(err)
	}
	if a, err := rig.read(ctx, "tc", 9_200_000, tok, map[string]any{"wait": "30s", "onStale": "fail"}); err != nil || a.status != http.StatusOK || !slices.Equal(a.ids, []int64{9_200_000}) {
		t.Errorf("a token read after the sink is back: %+v, %v; want the row", a, err)
	}
	requireRunning(t, capture, sink)
	for _, tb := range []string{table, load} {
		p.converge(
			fmt.Sprintf(`SELECT tenant_id, id::text AS i, v::text AS w FROM %s ORDER BY tenant_id, id`, pgx.Identifier{tb}.Sanitize()),
			fmt.Sprintf("SELECT tenant_id, toString(id) AS i, toString(v) AS w FROM `%s`.`%s` FINAL ORDER BY tenant_id, id", p.database, schema.TableName(record.Source{Schema: "public", Table: tb})),
			capture, sink)
	}
}
