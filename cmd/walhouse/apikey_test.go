package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/walhouse/walhouse/query"
)

// TestAPIKeyLifecycle creates keys in a new keys file, lists them, checks
// that serve's loader accepts the printed secret, revokes one and checks
// that it no longer does.
func TestAPIKeyLifecycle(t *testing.T) {
	t.Setenv("WALHOUSE_API_KEYS_FILE", "")
	t.Setenv("WALHOUSE_CONFIG", "")
	file := filepath.Join(t.TempDir(), "keys.json")
	walhouse := func(want int, args ...string) (string, string) {
		t.Helper()
		var stdout, stderr bytes.Buffer
		if code := run(args, &stdout, &stderr); code != want {
			t.Fatalf("walhouse %v exited %d, want %d: %s", args, code, want, stderr.String())
		}
		return stdout.String(), stderr.String()
	}
	secret, _ := walhouse(0, "apikey", "create", "--keys", file, "--tenant", "acme", "--scopes", "read,export", "--id", "acme-1")
	secret = strings.TrimSpace(secret)
	walhouse(0, "apikey", "create", "--keys", file, "--scopes", "admin", "--id", "ops")
	if info, err := os.Stat(file); err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("keys file %v, %v; want it readable by its owner only", info, err)
	}
	_, stderr := walhouse(2, "apikey", "create", "--keys", file, "--scopes", "read", "--id", "no-tenant")
	if !strings.Contains(stderr, "scope read needs a tenant") {
		t.Errorf("a read key without a tenant: %s", stderr)
	}
	walhouse(2, "apikey", "create", "--keys", file, "--tenant", "acme", "--id", "acme-1")
	list, _ := walhouse(0, "apikey", "list", "--keys", file)
	if got := squeeze(list); !strings.Contains(got, "acme-1  acme  read,export") || !strings.Contains(got, "ops  admin") || strings.Contains(list, query.HashKey(secret)) {
		t.Errorf("apikey list:\n%s", list)
	}
	keys, err := query.LoadKeys(file)
	if err != nil {
		t.Fatal(err)
	}
	if k, ok := keys.Lookup(secret); !ok || k.ID != "acme-1" || k.Tenant != "acme" {
		t.Fatalf("serve's loader does not accept the created key: %+v, %v", k, ok)
	}
	walhouse(0, "apikey", "revoke", "acme-1", "--keys", file)
	walhouse(1, "apikey", "revoke", "acme-1", "--keys", file)
	if keys, err = query.LoadKeys(file); err != nil {
		t.Fatal(err)
	}
	if _, ok := keys.Lookup(secret); ok {
		t.Error("a revoked key is still in the file")
	}
	walhouse(2, "apikey", "list")
	walhouse(2, "apikey", "rotate", "--keys", file)
}
