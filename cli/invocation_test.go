package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/walhouse/walhouse/config"
)

// TestConfigPrecedence checks flags > environment > file > defaults, that a
// list flag on the command line replaces the file's list, and that a
// secret's …_env key points the secret at that variable.
func TestConfigPrecedence(t *testing.T) {
	file := filepath.Join(t.TempDir(), "walhouse.yaml")
	if err := os.WriteFile(file, []byte(`
source:
  postgres:
    url: postgres://file@db/app
    password_env: APP_DB_PASSWORD
  slot: from_file
  tables: [public.a, public.b]
  tenant_columns: {public.b: org}
topics: {partitions: 12}
log: {level: debug}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("APP_DB_PASSWORD", "pw-from-app-var")
	for _, tc := range []struct {
		name   string
		env    map[string]string
		args   []string
		slot   string
		tables string
		parts  int
	}{
		{"file", nil, nil, "from_file", "public.a,public.b", 12},
		{"environment beats file", map[string]string{"WALHOUSE_SLOT": "from_env"}, nil, "from_env", "public.a,public.b", 12},
		{"flag beats both", map[string]string{"WALHOUSE_SLOT": "from_env"}, []string{"--slot", "from_flag", "--tables", "public.c", "--partitions", "3"}, "from_flag", "public.c", 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The environment of `make test` names the local services;
			// the file must be what speaks here.
			t.Setenv("WALHOUSE_PG_URL", "")
			t.Setenv("WALHOUSE_SLOT", "")
			t.Setenv("WALHOUSE_PG_PASSWORD", "")
			t.Setenv("WALHOUSE_PG_PASSWORD_FILE", "")
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			fs, ep := NewFlagSet("capture", UsesPG)
			slot := fs.String("slot", "walhouse", "slot")
			parts := fs.Int("partitions", 6, "partitions")
			var tables, tenantFor ListFlag
			fs.Var(&tables, "tables", "tables")
			fs.Var(&tenantFor, "tenant-column-for", "per table")
			var stderr bytes.Buffer
			inv := &Invocation{name: "capture", Args: tc.args, configPath: file, Stdout: &stderr, Stderr: &stderr}
			if err := inv.Parse(fs); err != nil {
				t.Fatal(err)
			}
			if *slot != tc.slot || tables.String() != tc.tables || *parts != tc.parts {
				t.Errorf("slot %q, tables %q, partitions %d; want %q, %q, %d", *slot, tables.String(), *parts, tc.slot, tc.tables, tc.parts)
			}
			if tenantFor.String() != "public.b=org" {
				t.Errorf("tenant columns %q", tenantFor.String())
			}
			url, err := ep.PGURL()
			if err != nil || url != "postgres://file@db/app?password=pw-from-app-var" {
				t.Errorf("PGURL = %q, %v", url, err)
			}
		})
	}
}

// TestEnvNames keeps the naming rule: every key's variable is WALHOUSE_
// and its path, and no two keys of one command share a variable.
func TestEnvNames(t *testing.T) {
	seen := map[string]string{}
	for _, s := range config.Schema() {
		if s.SecretEnv {
			continue
		}
		if want := "WALHOUSE_" + strings.ToUpper(strings.ReplaceAll(s.Key, ".", "_")); s.Env != want {
			t.Errorf("%s: variable %s, want %s", s.Key, s.Env, want)
		}
		for _, old := range append(append([]string{s.Env}, s.OldEnv...), s.OldSecretVar...) {
			if k, dup := seen[old]; dup {
				t.Errorf("%s and %s both read %s", k, s.Key, old)
			}
			seen[old] = s.Key
		}
	}
}
