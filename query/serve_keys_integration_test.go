package query

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/walhouse/walhouse/clickhouse"
	"github.com/walhouse/walhouse/harness/testenv"
	"github.com/walhouse/walhouse/schema"
)

// TestIntegrationServeKeysAndCORS runs the real walhouse serve: a key
// added to its keys file is accepted after SIGHUP (--keys-reload 0: no
// timer), a new tenant's first read of a table is empty, and its browser
// origin's preflight is answered.
func TestIntegrationServeKeysAndCORS(t *testing.T) {
	env := testenv.Require(t, "clickhouse")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	bin, err := testenv.BuildBinary(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	conn, err := clickhouse.Open(ctx, env.ClickHouse)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	db := testenv.Name("srvkeys")
	if err := conn.Exec(ctx, "CREATE DATABASE "+schema.QuoteIdent(db)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+schema.QuoteIdent(db)) })
	if err := conn.Exec(ctx, fmt.Sprintf(`CREATE TABLE %s.shop (tenant_id String%s, id Int64%s,
		_version UInt64, _is_deleted UInt8, _commit_ts DateTime64(6, 'UTC'), _synced_at DateTime64(6, 'UTC') DEFAULT now64(6))
		ENGINE = ReplacingMergeTree(_version, _is_deleted) ORDER BY (tenant_id, id)`, schema.QuoteIdent(db), sourced, sourced)); err != nil {
		t.Fatal(err)
	}
	keysFile := filepath.Join(t.TempDir(), "keys.json")
	acme := Key{ID: "acme", Hash: HashKey(keyAcme), Tenant: "acme", Scopes: []Scope{ScopeRead}}
	writeKeys(t, keysFile, acme)
	const origin = "https://dash.example.com"
	listen := testenv.FreeAddr(t)
	serve := testenv.Start(t, "serve", bin, "serve", "--listen", listen, "--keys", keysFile, "--keys-reload", "0",
		"--cors-origin", origin, "--cursor-secret", "0123456789abcdef0123", "--clickhouse", env.ClickHouse, "--database", db)
	api := "http://" + listen

	const initech = "wh_test_initech"
	status := func(ctx context.Context, key string) (int, string, error) {
		req, _ := http.NewRequestWithContext(ctx, "POST", api+"/v1/tables/shop/query", strings.NewReader(`{"columns":["id"]}`))
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body), err
	}
	// Ready: acme's key reads.
	if err := testenv.Eventually(ctx, time.Minute, func(ctx context.Context) error {
		code, body, err := status(ctx, keyAcme)
		if err == nil && code != 200 {
			err = fmt.Errorf("acme: %d %s", code, body)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if code, _, _ := status(ctx, initech); code != 401 {
		t.Fatalf("a key not in the file: %d, want 401", code)
	}

	writeKeys(t, keysFile, acme, Key{ID: "initech", Hash: HashKey(initech), Tenant: "initech", Scopes: []Scope{ScopeRead}})
	if err := serve.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	// serve reads the file on the signal, asynchronously: poll until the
	// key is in force (only SIGHUP can put it there: --keys-reload 0).
	if err := testenv.Eventually(ctx, 30*time.Second, func(ctx context.Context) error {
		code, body, err := status(ctx, initech)
		if err == nil && (code != 200 || !strings.HasPrefix(body, `{"data":[]`)) {
			err = fmt.Errorf("initech after SIGHUP: %d %s", code, body)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if exited, err := serve.Exited(); exited {
		t.Fatalf("serve exited on SIGHUP: %v", err)
	}

	pre, _ := http.NewRequestWithContext(ctx, "OPTIONS", api+"/v1/tables/shop/query", nil)
	pre.Header.Set("Origin", origin)
	pre.Header.Set("Access-Control-Request-Method", "POST")
	resp, err := http.DefaultClient.Do(pre)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 204 || resp.Header.Get("Access-Control-Allow-Origin") != origin {
		t.Errorf("preflight through serve: %d, Allow-Origin %q", resp.StatusCode, resp.Header.Get("Access-Control-Allow-Origin"))
	}
}
