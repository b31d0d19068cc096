package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/walhouse/walhouse/cli"
	"github.com/walhouse/walhouse/clickhouse"
	"github.com/walhouse/walhouse/harness/testenv"
	"github.com/walhouse/walhouse/schema"
)

// A connection that fails, with a password in the DSN in each of its
// forms, prints what failed and where, never the password: neither in the
// error walhouse exits with nor in a log line.
func TestIntegrationFailedConnectHidesPassword(t *testing.T) {
	env := testenv.Require(t, "pg", "kafka", "clickhouse", "redis-tls")
	pg, err := url.Parse(env.PG)
	if err != nil {
		t.Fatal(err)
	}
	const secret = "s3cret-Pw"
	prefix := testenv.Name("secrets")
	capture := func(dsn string) []string {
		return []string{"capture", "--pg", dsn, "--kafka", env.Kafka, "--topic-prefix", prefix, "--snapshot", "never"}
	}
	sink := func(dsn string, dedup ...string) []string {
		if len(dedup) == 0 {
			dedup = []string{"--dedup-addr", "off"}
		}
		return append([]string{"sink", "--clickhouse", dsn, "--kafka", env.Kafka, "--topic-prefix", prefix}, dedup...)
	}
	for name, args := range map[string][]string{
		// The local PostgreSQL trusts loopback logins: a missing database
		// makes the connection fail after the password went in.
		"postgres URL":                capture("postgres://postgres:" + secret + "@" + pg.Host + "/no_such_db?sslmode=disable"),
		"postgres password parameter": capture("postgres://postgres@" + pg.Host + "/no_such_db?sslmode=disable&password=" + secret),
		"libpq keyword/value":         capture("host=" + pg.Hostname() + " port=" + pg.Port() + " user=postgres dbname=no_such_db sslmode=disable password=" + secret),
		"postgres refused":            capture("postgres://postgres:" + secret + "@127.0.0.1:1/walhouse"),
		"clickhouse native":           sink("clickhouse://default:" + secret + "@127.0.0.1:1/walhouse"),
		"clickhouse http":             sink("http://default:" + secret + "@127.0.0.1:1/?password=" + secret),
		"clickhouse password param":   sink("clickhouse://127.0.0.1:1/walhouse?username=default&password=" + secret),
		"clickhouse unparsable":       sink("clickhouse://default:" + secret + "@127.0.0.1:port/walhouse"),
		"redis URL":                   sink(env.ClickHouse, "--dedup-addr", "rediss://walhouse:"+secret+"@"+env.RedisTLS, "--dedup-tls-ca", env.RedisTLSCA),
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			var out bytes.Buffer
			done := make(chan int, 1)
			go func() { done <- run(args, &out, &out) }()
			select {
			case code := <-done:
				if code == 0 {
					t.Fatalf("walhouse %v succeeded:\n%s", args, out.String())
				}
			case <-ctx.Done():
				t.Fatalf("walhouse %v still runs after 60 s", args)
			}
			t.Logf("output: %s", out.String())
			if strings.Contains(out.String(), secret) {
				t.Errorf("the output holds the password:\n%s", out.String())
			}
			if !strings.Contains(out.String(), "xxxxx") && !strings.Contains(out.String(), "127.0.0.1") {
				t.Errorf("the output names neither the server nor a redacted DSN:\n%s", out.String())
			}
		})
	}
}

// TestIntegrationExportFilesArePrivate runs `walhouse export` to a file
// that exists with mode 0644: the export and its manifest end up 0600
// (they hold one person's data), and the CSV neutralises a formula.
func TestIntegrationExportFilesArePrivate(t *testing.T) {
	env := testenv.Require(t, "clickhouse")
	ctx := context.Background()
	conn, err := clickhouse.Open(ctx, env.ClickHouse)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	db := testenv.Name("export")
	for _, sql := range []string{
		"CREATE DATABASE " + schema.QuoteIdent(db),
		fmt.Sprintf("CREATE TABLE %s.orders (tenant_id String, id Int64, customer_id String, note String, _version UInt64, _is_deleted UInt8) ENGINE = ReplacingMergeTree(_version, _is_deleted) ORDER BY (tenant_id, id)", schema.QuoteIdent(db)),
		fmt.Sprintf("INSERT INTO %s.orders VALUES ('acme', 1, 'cus_1', '=cmd()', 1, 0)", schema.QuoteIdent(db)),
	} {
		if err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	t.Cleanup(func() { _ = conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+schema.QuoteIdent(db)) })

	out := filepath.Join(t.TempDir(), "subject.csv")
	if err := os.WriteFile(out, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("WALHOUSE_API_AUDIT_KEY", "audit-key-0123456789")
	var stderr bytes.Buffer
	if code := run([]string{"export", "--clickhouse", env.ClickHouse, "--database", db, "--tenant", "acme",
		"--subject-column", "customer_id", "--subject", "cus_1", "--out", out}, io.Discard, &stderr); code != cli.ExitOK {
		t.Fatalf("walhouse export exited %d:\n%s", code, stderr.String())
	}
	for _, p := range []string{out, out + ".manifest.json"} {
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", filepath.Base(p), st.Mode().Perm())
		}
	}
	data, _ := os.ReadFile(out)
	if !strings.Contains(string(data), ",'=cmd()") {
		t.Errorf("the CSV holds %q, want the formula neutralised as '=cmd()", data)
	}
}
