package demo

import (
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// TestWithDatabase checks that the demo's connection string names its
// own database, in both forms --pg accepts, and keeps everything else.
func TestWithDatabase(t *testing.T) {
	for _, tc := range []struct{ conn, want string }{
		{"postgres://postgres@127.0.0.1:55432/walhouse?sslmode=disable", "postgres://postgres@127.0.0.1:55432/walhouse_demo?sslmode=disable"},
		{"postgresql://u:p@db/app", "postgresql://u:p@db/walhouse_demo"},
		{"postgres://u@db", "postgres://u@db/walhouse_demo"},
		{"host=db user=u dbname=app sslmode=disable", "host=db user=u dbname=app sslmode=disable dbname=walhouse_demo"},
	} {
		got, err := WithDatabase(tc.conn, "walhouse_demo")
		if err != nil || got != tc.want {
			t.Errorf("WithDatabase(%q) = %q, %v; want %q", tc.conn, got, err, tc.want)
			continue
		}
		cfg, err := pgx.ParseConfig(got)
		if err != nil || cfg.Database != "walhouse_demo" || cfg.User != "u" && cfg.User != "postgres" {
			t.Errorf("%q parses to database %q, user %q (%v)", got, cfg.Database, cfg.User, err)
		}
	}
}

// TestDemoName checks what --name accepts: a name valid as a PostgreSQL
// database, a replication slot and a ClickHouse database, unquoted.
func TestDemoName(t *testing.T) {
	for name, ok := range map[string]bool{
		"walhouse_demo": true, "demo2": true, "walhouse_demo_8a4066241a": true,
		"": false, "Demo": false, "2demo": false, "demo-x": false, "demo x": false,
		strings.Repeat("a", 48): true, strings.Repeat("a", 49): false,
	} {
		if got := demoNameRE.MatchString(name); got != ok {
			t.Errorf("--name %q accepted %v, want %v", name, got, ok)
		}
	}
}
