package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walhouse/walhouse/harness/testenv"
	"github.com/walhouse/walhouse/query"
)

// TestIntegrationHealth runs capture, sink and serve with their health
// endpoints and takes each through not ready and back: capture while its
// slot cannot be created yet (an open transaction holds it back), the
// sink and serve while ClickHouse is unreachable (a proxy in front of it is
// cut) and a change waits to be loaded. /healthz answers 200 throughout.
func TestIntegrationHealth(t *testing.T) {
	p := newPipeline(t)
	ctx := context.Background()
	table := testenv.Name("health")
	qt := pgx.Identifier{table}.Sanitize()
	p.exec(fmt.Sprintf(`CREATE TABLE %s (tenant_id text NOT NULL, id bigint NOT NULL, note text, PRIMARY KEY (tenant_id, id))`, qt))
	t.Cleanup(func() { _, _ = p.pg.Exec(context.Background(), "DROP TABLE IF EXISTS "+qt) })
	p.exec(fmt.Sprintf(`INSERT INTO %s SELECT 'acme', g, 'before' FROM generate_series(1, 20) g`, qt))
	pgQuery := fmt.Sprintf(`SELECT tenant_id, id::text, note FROM %s ORDER BY 1, 2`, qt)
	chQuery := fmt.Sprintf("SELECT tenant_id, toString(id), note FROM `%s`.`%s` FINAL WHERE NOT _is_deleted ORDER BY 1, 2", p.database, table)

	// PostgreSQL creates a logical slot only once every transaction with
	// an xid that was open then has ended.
	blocker, err := pgx.Connect(ctx, p.env.PG)
	if err != nil {
		t.Fatal(err)
	}
	defer blocker.Close(ctx)
	tx, err := blocker.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, "SELECT txid_current()"); err != nil {
		t.Fatal(err)
	}

	captureAddr := testenv.FreeAddr(t)
	capture := testenv.Start(t, "capture", walhouseBin, p.captureArgs([]string{table}, "--metrics-addr", captureAddr)...)
	waitHealth(t, capture, captureAddr, "/healthz", http.StatusOK, `"status":"ok"`)
	// Capture's walsender waits for the transaction to create the slot.
	err = testenv.Eventually(ctx, time.Minute, func(ctx context.Context) error {
		var waiting bool
		err := p.pg.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE backend_type = 'walsender' AND wait_event = 'transactionid')`).Scan(&waiting)
		if err == nil && !waiting {
			err = errors.New("no walsender waits for a transaction yet")
		}
		return err
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, capture.Output())
	}
	wantHealth(t, captureAddr, "/readyz", http.StatusServiceUnavailable, "not streaming from slot "+p.slot)
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	waitHealth(t, capture, captureAddr, "/readyz", http.StatusOK, `"name":"progress","ok":true`)

	ch := newCuttable(t, p.env.ClickHouse)
	sinkAddr := testenv.FreeAddr(t)
	sink := testenv.Start(t, "sink", walhouseBin, p.sinkArgs("--clickhouse", ch.dsn, "--metrics-addr", sinkAddr, "--dedup-addr", "off")...)
	waitHealth(t, sink, sinkAddr, "/readyz", http.StatusOK, "partitions of 1 topics assigned")
	p.converge(pgQuery, chQuery, capture, sink)

	keys, _ := json.Marshal([]query.Key{{ID: "ops", Hash: query.HashKey("health-admin-key-0123"), Scopes: []query.Scope{query.ScopeAdmin}}})
	keysFile := filepath.Join(t.TempDir(), "keys.json")
	if err := os.WriteFile(keysFile, keys, 0o600); err != nil {
		t.Fatal(err)
	}
	serveAddr := testenv.FreeAddr(t)
	serve := testenv.Start(t, "serve", walhouseBin, "serve", "--listen", serveAddr, "--keys", keysFile, "--cursor-secret", "0123456789abcdef0123",
		"--clickhouse", ch.dsn, "--database", p.database)
	waitHealth(t, serve, serveAddr, "/readyz", http.StatusOK, `"name":"clickhouse","ok":true`)

	// ClickHouse goes away: serve is not ready at once; the sink once the
	// table's loads have failed for 30 s (from the first failure: a change
	// that cannot load, or the read of a partition's loaded position,
	// which the sink may make before, as soon as a heartbeat comes).
	start := time.Now()
	ch.cut()
	waitHealth(t, serve, serveAddr, "/readyz", http.StatusServiceUnavailable, "ClickHouse does not answer")
	p.exec(fmt.Sprintf(`UPDATE %s SET note = 'during the outage' WHERE id <= 5`, qt))
	waitHealth(t, sink, sinkAddr, "/readyz", http.StatusServiceUnavailable, "public."+table+": loads failing for")
	if took := time.Since(start); took < 30*time.Second {
		t.Errorf("the sink was not ready %v after ClickHouse went away, before its loads failed for 30 s", took.Round(time.Second))
	}
	for _, a := range []string{captureAddr, sinkAddr, serveAddr} {
		wantHealth(t, a, "/healthz", http.StatusOK, `"status":"ok"`)
	}
	wantHealth(t, captureAddr, "/readyz", http.StatusOK, "")

	ch.restore()
	waitHealth(t, sink, sinkAddr, "/readyz", http.StatusOK, `"name":"loads","ok":true`)
	waitHealth(t, serve, serveAddr, "/readyz", http.StatusOK, "")
	p.converge(pgQuery, chQuery, capture, sink)
}

// getHealth returns the status code and body of GET path on addr.
func getHealth(ctx context.Context, addr, path string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// wantHealth checks that GET path on addr answers code with a body that
// contains mention.
func wantHealth(t *testing.T, addr, path string, code int, mention string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got, body, err := getHealth(ctx, addr, path)
	if err != nil || got != code || !strings.Contains(body, mention) {
		t.Fatalf("GET %s%s: %d %s (%v), want %d mentioning %q", addr, path, got, body, err, code, mention)
	}
}

// waitHealth waits (up to 2 minutes) until GET path on addr answers code
// with a body that contains mention.
func waitHealth(t *testing.T, proc *testenv.Proc, addr, path string, code int, mention string) {
	t.Helper()
	var last string
	err := testenv.Eventually(context.Background(), 2*time.Minute, func(ctx context.Context) error {
		if done, err := proc.Exited(); done {
			return fmt.Errorf("%s exited: %v", proc.Name, err)
		}
		got, body, err := getHealth(ctx, addr, path)
		last = fmt.Sprintf("%d %s (%v)", got, strings.TrimSpace(body), err)
		if err != nil || got != code || !strings.Contains(body, mention) {
			return fmt.Errorf("GET %s: %s", path, last)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("%s: want %d mentioning %q, last answer %s\n%s", proc.Name, code, mention, last, proc.Output())
	}
}

// cuttable is a TCP proxy in front of a service that a test can cut, as
// if the service went down: cut closes the open connections and refuses
// new ones until restore.
type cuttable struct {
	dsn    string // the service's DSN with the proxy's address
	target string

	mu    sync.Mutex
	down  bool
	conns map[net.Conn]bool
}

// newCuttable proxies the service of dsn (a URL with host:port).
func newCuttable(t *testing.T, dsn string) *cuttable {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil || u.Host == "" {
		t.Fatalf("DSN %q has no host:port: %v", dsn, err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &cuttable{target: u.Host, conns: map[net.Conn]bool{}}
	u.Host = ln.Addr().String()
	c.dsn = u.String()
	var wg sync.WaitGroup
	t.Cleanup(func() {
		_ = ln.Close()
		c.cut()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				c.pipe(in)
			}()
		}
	}()
	return c
}

func (c *cuttable) pipe(in net.Conn) {
	defer in.Close()
	out, err := net.Dial("tcp", c.target)
	if err != nil {
		return
	}
	defer out.Close()
	c.mu.Lock()
	if c.down {
		c.mu.Unlock()
		return
	}
	c.conns[in], c.conns[out] = true, true
	c.mu.Unlock()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(out, in); done <- struct{}{} }()
	go func() { _, _ = io.Copy(in, out); done <- struct{}{} }()
	<-done
	_ = in.Close()
	_ = out.Close()
	<-done
	c.mu.Lock()
	delete(c.conns, in)
	delete(c.conns, out)
	c.mu.Unlock()
}

func (c *cuttable) cut() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.down = true
	for conn := range c.conns {
		_ = conn.Close()
	}
}

func (c *cuttable) restore() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.down = false
}
