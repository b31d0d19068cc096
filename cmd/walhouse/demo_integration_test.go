package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walhouse/walhouse/clickhouse"
	"github.com/walhouse/walhouse/demo"
	"github.com/walhouse/walhouse/harness/testenv"
	"github.com/walhouse/walhouse/internal/pgslot"
	"github.com/walhouse/walhouse/schema"
)

// TestIntegrationDemo runs walhouse demo --keep as make demo KEEP=1 does,
// small and under a name of its own, and checks what it shows a newcomer:
// Layer 2 on, a dashboard's read through the query API with its
// meta.lastSyncAt, a write read back with its consistency token and the
// wait it took, and the links of the status page and the example
// dashboard, which answer while the demo keeps running; Ctrl-C ends it
// with status 0.
func TestIntegrationDemo(t *testing.T) {
	env := testenv.Require(t, "pg", "kafka", "clickhouse", "redis")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bin, err := testenv.BuildBinary(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	name := testenv.Name("walhouse_demo")
	t.Cleanup(func() { dropDemo(t, env, name) })

	cmd := exec.CommandContext(ctx, bin, "demo", "--pg", env.PG, "--kafka", env.Kafka, "--clickhouse", env.ClickHouse,
		"--dedup-addr", env.Redis, "--name", name, "--tenants", "2", "--orders", "200",
		"--listen", "127.0.0.1:0", "--write-listen", "127.0.0.1:0", "--keep")
	// The flags name every service: no variable of the local services'
	// environment (deprecated names among them) reaches the demo.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "WALHOUSE_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	lines := bufio.NewScanner(pipe)
	for lines.Scan() {
		out.WriteString(lines.Text() + "\n")
		if strings.Contains(lines.Text(), "Ctrl-C stops the demo") {
			break
		}
	}
	if !strings.Contains(out.String(), "Ctrl-C stops the demo") {
		_ = cmd.Wait()
		t.Fatalf("the demo ended before its links:\n%s\nstderr:\n%s", out.String(), tail(stderr.String(), 40))
	}
	shown := out.String()
	t.Logf("the demo's output:\n%s", shown)
	for _, want := range []string{
		`Layer 2 on: eventIds remembered in ` + regexp.QuoteMeta(env.Redis),
		`PostgreSQL and ClickHouse agree`,
		`POST http://127\.0\.0\.1:\d+/v1/tables/demo_orders/query`,
		`meta\.lastSyncAt: \d{4}-\d\d-\d\dT[^ ]+Z, [0-9.]+m?s ago`,
		`Walhouse-Consistency-Token: \S+`,
		`with the token: answered [0-9.]+m?s after the write's commit, meta\.fresh true, the order in its rows`,
	} {
		if !regexp.MustCompile(want).MatchString(shown) {
			t.Errorf("the demo's output lacks %s", want)
		}
	}
	status := regexp.MustCompile(`(http://127\.0\.0\.1:\d+)/status#key=(\S+)`).FindStringSubmatch(shown)
	dashboard := regexp.MustCompile(`(http://127\.0\.0\.1:\d+/examples/orders\?write=(http://127\.0\.0\.1:\d+)&tenant=tenant_1)#key=\S+`).FindStringSubmatch(shown)
	if status == nil || dashboard == nil {
		t.Fatalf("the demo printed no status page or dashboard link")
	}
	base, adminKey, page, writeAPI := status[1], status[2], dashboard[1], dashboard[2]

	// What the links open, while the demo keeps running: the dashboard's
	// page, the lag the status page shows (with the admin key), and the
	// write API's consent to the dashboard's origin.
	get := func(url, key string) (int, string) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", url, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get(page, ""); code != http.StatusOK || !strings.Contains(body, "Data as of") {
		t.Errorf("GET %s: %d, want the example dashboard", page, code)
	}
	if code, body := get(base+"/v1/lag", adminKey); code != http.StatusOK || !strings.Contains(body, "demo_orders") {
		t.Errorf("GET /v1/lag with the admin key: %d %s, want the demo's tables", code, tail(body, 5))
	}
	pre, _ := http.NewRequestWithContext(ctx, http.MethodOptions, writeAPI+"/orders", nil)
	pre.Header.Set("Origin", base)
	pre.Header.Set("Access-Control-Request-Method", "POST")
	resp, err := http.DefaultClient.Do(pre)
	if err != nil {
		t.Fatalf("the write API's preflight: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent || resp.Header.Get("Access-Control-Allow-Origin") != base {
		t.Errorf("the write API's preflight from the dashboard's origin: %s, Access-Control-Allow-Origin %q; want 204 allowing %s", resp.Status, resp.Header.Get("Access-Control-Allow-Origin"), base)
	}

	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	rest, _ := io.ReadAll(pipe)
	if err := cmd.Wait(); err != nil {
		t.Errorf("after Ctrl-C the demo ended with %v, want status 0:\n%s\nstderr:\n%s", err, rest, tail(stderr.String(), 40))
	}
	if !strings.Contains(string(rest), "stopping the demo") {
		t.Errorf("after Ctrl-C the demo printed %q, want it to say it stops", rest)
	}
}

// dropDemo removes what a demo named name created: its slot (left only
// when it failed), PostgreSQL and ClickHouse databases, topics and dedup
// keys.
func dropDemo(t *testing.T, env testenv.Env, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if db, err := demo.WithDatabase(env.PG, name); err == nil {
		if conn, err := pgx.Connect(ctx, db); err == nil {
			if err := pgslot.Drop(ctx, conn, name); err != nil {
				t.Errorf("drop the demo's slot %s: %v", name, err)
			}
			conn.Close(ctx)
		}
	}
	if admin, err := pgx.Connect(ctx, env.PG); err == nil {
		if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Errorf("drop the demo's database %s: %v; drop it by hand", name, err)
		}
		admin.Close(ctx)
	}
	if ch, err := clickhouse.Open(ctx, env.ClickHouse); err == nil {
		if err := ch.Exec(ctx, "DROP DATABASE IF EXISTS "+schema.QuoteIdent(name)); err != nil {
			t.Errorf("drop ClickHouse database %s: %v", name, err)
		}
		ch.Close()
	}
	if cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(env.Kafka, ",")...)); err == nil {
		if err := testenv.DeleteTopicsWithPrefix(ctx, kadm.NewClient(cl), name); err != nil {
			t.Errorf("delete the demo's topics: %v", err)
		}
		cl.Close()
	}
	if err := testenv.DeleteKeys(ctx, env.Redis, name+":*"); err != nil {
		t.Errorf("delete the demo's dedup keys: %v", err)
	}
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(l[max(0, len(l)-n):], "\n")
}
