package query

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func writeKeys(t *testing.T, path string, keys ...Key) {
	t.Helper()
	b, _ := json.Marshal(keys)
	// Written beside and renamed, as an operator's tool should: the
	// reload never sees half a file from this test.
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// TestKeyFileReload: a key added to the file is accepted and a removed
// one refused after a reload, without a new server; a broken file keeps
// the keys in force and is counted.
func TestKeyFileReload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys.json")
	acme := Key{ID: "acme", Hash: HashKey(keyAcme), Tenant: "acme", Scopes: []Scope{ScopeRead}}
	newTenant := Key{ID: "initech", Hash: HashKey("wh_test_initech"), Tenant: "initech", Scopes: []Scope{ScopeRead}}
	writeKeys(t, path, acme)
	kf, err := OpenKeyFile(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(kf)
	s, err := NewServer(Config{Conn: failingConn{err: errConnRefused}, Database: "walhouse", Keys: kf, CursorSecret: []byte(testCursorSecret)})
	if err != nil {
		t.Fatal(err)
	}
	status := func(key string) int {
		r, _ := http.NewRequest("GET", "/v1/tables", nil)
		r.Header.Set("Authorization", "Bearer "+key)
		w := httptest.NewRecorder()
		s.ServeHTTP(w, r)
		return w.Code
	}
	if got := status("wh_test_initech"); got != 401 {
		t.Fatalf("a key not yet in the file: %d, want 401", got)
	}

	writeKeys(t, path, acme, newTenant)
	if changed, err := kf.Reload(); !changed || err != nil {
		t.Fatalf("reload after adding a key: changed %v, %v", changed, err)
	}
	if got := status("wh_test_initech"); got == 401 {
		t.Fatal("the added key is still refused after the reload")
	}
	if changed, err := kf.Reload(); changed || err != nil {
		t.Fatalf("reload of an unchanged file: changed %v, %v", changed, err)
	}

	writeKeys(t, path, newTenant) // acme revoked
	if _, err := kf.Reload(); err != nil {
		t.Fatal(err)
	}
	if got := status(keyAcme); got != 401 {
		t.Fatalf("a revoked key: %d, want 401", got)
	}

	for _, broken := range []string{`[{"id":"x"`, `[{"id":"initech","hash":"nothex","scopes":["read"],"tenant":"i"}]`} {
		if err := os.WriteFile(path, []byte(broken), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := kf.Reload(); err == nil || !strings.Contains(err.Error(), "unchanged") {
			t.Fatalf("a broken file: %v, want an error that says the keys are unchanged", err)
		}
		if got := status("wh_test_initech"); got == 401 {
			t.Fatal("a broken file locked a valid key out")
		}
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if _, err := kf.Reload(); err == nil {
		t.Fatal("a missing file reloaded without an error")
	}
	if got := counterValue(t, reg, "walhouse_api_keys_reload_failures_total"); got != 3 {
		t.Errorf("walhouse_api_keys_reload_failures_total = %v, want 3", got)
	}
}

// TestKeyFileRun: Run picks up a changed file on a signal, and ends
// with its context.
func TestKeyFileRun(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys.json")
	writeKeys(t, path, Key{ID: "a", Hash: HashKey("wh_a"), Tenant: "a", Scopes: []Scope{ScopeRead}})
	kf, err := OpenKeyFile(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	hup := make(chan os.Signal)
	done := make(chan error, 1)
	go func() { done <- kf.Run(ctx, time.Hour, hup) }()
	writeKeys(t, path, Key{ID: "b", Hash: HashKey("wh_b"), Tenant: "b", Scopes: []Scope{ScopeRead}})
	hup <- os.Interrupt // taken: Run is now reloading
	hup <- os.Interrupt // taken once the first reload is done
	if _, ok := kf.Lookup("wh_b"); !ok {
		t.Error("the key added before the signal is not in force")
	}
	if _, ok := kf.Lookup("wh_a"); ok {
		t.Error("the key removed before the signal is still in force")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestOpenKeyFileFails(t *testing.T) {
	dir := t.TempDir()
	if _, err := OpenKeyFile(filepath.Join(dir, "missing.json"), nil); err == nil {
		t.Error("a missing file opened")
	}
	bad := filepath.Join(dir, "bad.json")
	_ = os.WriteFile(bad, []byte(`[{"id":"","hash":"","scopes":[]}]`), 0o600)
	if _, err := OpenKeyFile(bad, nil); err == nil {
		t.Error("an invalid file opened")
	}
}

// counterValue gathers reg and returns the value of the counter name.
func counterValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}
