package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/walhouse/walhouse/idempotency"
	"github.com/walhouse/walhouse/query"
)

// Settings of the token probes.
const (
	// tokenProbers write and read back one after another each, on
	// tenants pgbench writes too (tenant_0…): the probes share the load's
	// partitions.
	tokenProbers = 4
	// tokenPause is each prober's pause between a read and its next
	// write: a few probes a second each, nothing the load notices.
	tokenPause = 100 * time.Millisecond
	// tokenWait is the wait a probe's read asks for; a read that ends it
	// without the write (meta.fresh false) counts as stale, at its time.
	tokenWait = 10 * time.Second
)

// tokenReader is the query API as `walhouse serve` runs it, in the
// benchmark's process over loopback HTTP, with a read key per prober's
// tenant, and the Layer 1 writer the probes write with.
type tokenReader struct {
	pool   *pgxpool.Pool
	keys   *idempotency.Keys
	table  string // PostgreSQL's, quoted
	target string // the query API's name of the ClickHouse table
	base   string // http://127.0.0.1:port
	secret map[string]string
	srv    *http.Server
	done   chan struct{}
}

// startTokenReader serves the query API over database (the steady
// pipeline's ClickHouse database) until close. table is the steady table
// in PostgreSQL, target its name in ClickHouse.
func (b *bench) startTokenReader(ctx context.Context, database, table, target string) (*tokenReader, error) {
	pool, err := pgxpool.New(ctx, b.o.env.PG)
	if err != nil {
		return nil, fmt.Errorf("connect to PostgreSQL for the token probes: %w", err)
	}
	r := &tokenReader{pool: pool, keys: idempotency.New(pool), table: quotePG(table), target: target, secret: map[string]string{}, done: make(chan struct{})}
	if err := r.start(ctx, b, database); err != nil {
		pool.Close()
		return nil, err
	}
	return r, nil
}

func (r *tokenReader) start(ctx context.Context, b *bench, database string) error {
	if err := idempotency.Migrate(ctx, r.pool); err != nil {
		return err
	}
	var entries []query.Key
	for i := range tokenProbers {
		tenant := fmt.Sprintf("tenant_%d", i)
		s, err := query.NewSecret()
		if err != nil {
			return err
		}
		r.secret[tenant] = s
		entries = append(entries, query.Key{ID: "probe-" + tenant, Hash: query.HashKey(s), Tenant: tenant, Scopes: []query.Scope{query.ScopeRead}})
	}
	raw, err := json.Marshal(entries)
	if err != nil {
		return err
	}
	keys, err := query.ParseKeys(raw)
	if err != nil {
		return err
	}
	src, err := idempotency.ReadToken(ctx, r.pool)
	if err != nil {
		return fmt.Errorf("read the database's identity for consistency tokens: %w", err)
	}
	src.LSN = 0
	cursor := make([]byte, 32)
	if _, err := rand.Read(cursor); err != nil {
		return err
	}
	api, err := query.NewServer(query.Config{Conn: b.ch, Database: database, Keys: keys, CursorSecret: cursor,
		TokenSource: src, MaxTokenWait: tokenWait, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("listen for the query API: %w", err)
	}
	r.base = "http://" + ln.Addr().String()
	r.srv = api.HTTPServer()
	go func() {
		defer close(r.done)
		_ = r.srv.Serve(ln) // ErrServerClosed after close
	}()
	return nil
}

// close stops the query API and closes the pool.
func (r *tokenReader) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = r.srv.Shutdown(ctx)
	<-r.done
	r.pool.Close()
}

// tokenProbe is one write and its read: how long from the write's commit
// until the read returned, how much of that the server waited for the
// table's load watermark (its query.TimingHeader), and whether the read
// included the write.
type tokenProbe struct {
	wait, server time.Duration
	fresh        bool
}

// probeRun is what a step's probers did: every probe that got an answer,
// and the probes that failed (a write or a read that returned an error),
// with the first error.
type probeRun struct {
	probes   []tokenProbe
	failed   int
	firstErr error
}

// probes runs tokenProbers probers until ctx ends (a probe in flight
// finishes, with a context of its own). A failed probe is counted and its
// prober goes on: the step's figures say how many failed, and why the
// first did. Probe rows carry step -step: the step's own figures count
// pgbench's rows only.
func (r *tokenReader) probes(ctx context.Context, step int) probeRun {
	var (
		mu  sync.Mutex
		run probeRun
		wg  sync.WaitGroup
	)
	for i := range tokenProbers {
		tenant := fmt.Sprintf("tenant_%d", i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ctx.Err() == nil; n++ {
				// The probe in flight outlives the step's end: its read
				// is bounded by the wait.
				p, err := r.probe(context.WithoutCancel(ctx), tenant, step, n)
				mu.Lock()
				if err != nil {
					run.failed++
					if run.firstErr == nil {
						run.firstErr = err
					}
				} else {
					run.probes = append(run.probes, p)
				}
				mu.Unlock()
				select {
				case <-ctx.Done():
				case <-time.After(tokenPause):
				}
			}
		}()
	}
	wg.Wait()
	return run
}

// probe writes one row for tenant through Layer 1, then reads it back
// through the query API with the write's consistency token.
func (r *tokenReader) probe(ctx context.Context, tenant string, step, n int) (tokenProbe, error) {
	fp, err := idempotency.FingerprintOf("token probe", []any{tenant, step, n})
	if err != nil {
		return tokenProbe{}, err
	}
	var id int64
	out, err := r.keys.Do(ctx, idempotency.Request{Tenant: tenant, Key: idempotency.NewKey(), Fingerprint: fp}, func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
		err := tx.QueryRow(ctx, "INSERT INTO "+r.table+" (tenant_id, step, amount, note) VALUES ($1, $2, 1, 'token probe') RETURNING id", tenant, -step).Scan(&id)
		return []byte(strconv.FormatInt(id, 10)), err
	})
	// Do returns once the write committed and its token was read: the
	// wait is counted from here, as an application's would be.
	committed := time.Now()
	if err != nil {
		return tokenProbe{}, fmt.Errorf("token probe: write through Layer 1: %w", err)
	}
	if out.Token.IsZero() {
		return tokenProbe{}, fmt.Errorf("token probe: the write got no consistency token: %w", out.TokenErr)
	}
	body, err := json.Marshal(map[string]any{
		"columns": []string{"id"}, "filters": []map[string]any{{"column": "id", "op": "=", "value": id}},
		"consistencyTokens": []string{out.Token.String()}, "wait": tokenWait.String(),
	})
	if err != nil {
		return tokenProbe{}, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.base+"/v1/tables/"+r.target+"/query", bytes.NewReader(body))
	if err != nil {
		return tokenProbe{}, err
	}
	req.Header.Set("Authorization", "Bearer "+r.secret[tenant])
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return tokenProbe{}, fmt.Errorf("token probe: read: %w", err)
	}
	defer resp.Body.Close()
	var ans struct {
		Data []struct {
			ID json.Number `json:"id"`
		} `json:"data"`
		Meta struct {
			Fresh *bool `json:"fresh"`
		} `json:"meta"`
		Error *struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	err = json.NewDecoder(resp.Body).Decode(&ans)
	p := tokenProbe{wait: time.Since(committed)}
	p.server, _ = query.TokenWaitOf(resp.Header.Get(query.TimingHeader))
	if err != nil {
		return p, fmt.Errorf("token probe: read answered %s: %w", resp.Status, err)
	}
	if resp.StatusCode != http.StatusOK {
		if ans.Error != nil {
			return p, fmt.Errorf("token probe: read answered %s: %s (%s)", resp.Status, ans.Error.Message, ans.Error.Code)
		}
		return p, fmt.Errorf("token probe: read answered %s", resp.Status)
	}
	want := strconv.FormatInt(id, 10)
	found := slices.ContainsFunc(ans.Data, func(d struct {
		ID json.Number `json:"id"`
	}) bool {
		return d.ID.String() == want
	})
	p.fresh = ans.Meta.Fresh != nil && *ans.Meta.Fresh && found
	return p, nil
}

// tokenWaits summarizes a step's probes: how many, how many were stale
// (their read's wait ended without the write), and the quantiles of the
// wait over all of them, stale ones at the time they took.
func tokenWaits(ps []tokenProbe) (n, stale int, p50, p99, maxWait float64) {
	if len(ps) == 0 {
		return 0, 0, 0, 0, 0
	}
	w := make([]float64, len(ps))
	for i, p := range ps {
		w[i] = p.wait.Seconds()
		if !p.fresh {
			stale++
		}
	}
	slices.Sort(w)
	return len(w), stale, quantile(w, 0.5), quantile(w, 0.99), w[len(w)-1]
}

// serverWaits returns the quantiles of the probes' waits for the load
// watermark, as the server said them (the rest of a token wait is the
// write's token, the query and HTTP).
func serverWaits(ps []tokenProbe) (p50, p99 float64) {
	if len(ps) == 0 {
		return 0, 0
	}
	w := make([]float64, len(ps))
	for i, p := range ps {
		w[i] = p.server.Seconds()
	}
	slices.Sort(w)
	return quantile(w, 0.5), quantile(w, 0.99)
}

// quantile returns the q-quantile of sorted (nearest rank, as
// ClickHouse's quantileExact).
func quantile(sorted []float64, q float64) float64 {
	i := int(q * float64(len(sorted)))
	return sorted[min(i, len(sorted)-1)]
}
