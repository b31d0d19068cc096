package main

import (
	"bytes"
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/walhouse/walhouse/internal/testenv"
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
