package cli

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/jackc/pgx/v5"
)

func TestWithPassword(t *testing.T) {
	for _, tc := range []struct {
		name, dsn, password, want, err string
	}{
		{"no password", "postgres://u@db/app", "", "postgres://u@db/app", ""},
		{"URL", "postgres://u@db/app?sslmode=disable", "p@ss w'rd", "postgres://u@db/app?password=p%40ss%20w%27rd&sslmode=disable", ""},
		{"clickhouse URL", "clickhouse://ch:9000/walhouse", "s3cret", "clickhouse://ch:9000/walhouse?password=s3cret", ""},
		{"keyword/value", "host=db user=u dbname=app", `it's\secret`, `host=db user=u dbname=app password='it\'s\\secret'`, ""},
		{"empty keyword/value", "", "s3cret", "password='s3cret'", ""},
		{"URL with a password", "postgres://u:other@db/app", "s3cret", "", "already holds a password"},
		{"URL with a password parameter", "http://ch:8123/?password=other", "s3cret", "", "already holds a password"},
		{"keyword/value with a password", "host=db password=other", "s3cret", "", "already holds a password"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := withPassword(tc.dsn, tc.password, "pg")
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
				if strings.Contains(err.Error(), "other") {
					t.Errorf("error %q holds the DSN's password", err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("withPassword = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
	// pgx reads the password back as it was given, in either form.
	for _, dsn := range []string{"postgres://u@db/app", "host=db user=u"} {
		withPW, err := withPassword(dsn, `p@ss w'rd\`, "pg")
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := pgx.ParseConfig(withPW)
		if err != nil || cfg.Password != `p@ss w'rd\` {
			t.Errorf("pgx read the password of %q as %q (%v)", withPW, cfg.Password, err)
		}
	}
	withPW, err := withPassword("clickhouse://u@ch:9000/db", `p@ss w'rd\`, "clickhouse")
	if err != nil {
		t.Fatal(err)
	}
	if opts, err := ch.ParseDSN(withPW); err != nil || opts.Auth.Password != `p@ss w'rd\` || opts.Auth.Username != "u" {
		t.Errorf("clickhouse-go read %q as %+v (%v)", withPW, opts.Auth, err)
	}
}

func TestSecretSource(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "pw")
	if err := os.WriteFile(file, []byte("from-file\r\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, file, want, err string
		env                   map[string]string
	}{
		{"environment", "", "from-env", "", map[string]string{"WALHOUSE_SOURCE_POSTGRES_PASSWORD": "from-env"}},
		{"old variable", "", "from-old", "", map[string]string{"WALHOUSE_PG_PASSWORD": "from-old"}},
		{"new beats old", "", "from-env", "", map[string]string{"WALHOUSE_SOURCE_POSTGRES_PASSWORD": "from-env", "WALHOUSE_PG_PASSWORD": "from-old"}},
		{"file wins", file, "from-file", "", map[string]string{"WALHOUSE_SOURCE_POSTGRES_PASSWORD": "from-env"}},
		{"missing file", filepath.Join(dir, "nope"), "", "--pg-password-file", nil},
		{"empty file", empty, "", "is empty", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("WALHOUSE_SOURCE_POSTGRES_PASSWORD", "")
			t.Setenv("WALHOUSE_PG_PASSWORD", "")
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			fs := flag.NewFlagSet("test", flag.ContinueOnError)
			src := RegisterSecret(fs, "pg-password-file", "a test secret")
			var args []string
			if tc.file != "" {
				args = []string{"--pg-password-file", tc.file}
			}
			if err := fs.Parse(args); err != nil {
				t.Fatal(err)
			}
			got, err := src.Value()
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("value = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}
