package testenv

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/walhouse/walhouse/internal/backoff"
	"github.com/walhouse/walhouse/internal/pgslot"
)

// Env holds the service addresses.
type Env struct {
	PG         string // PostgreSQL URL
	PGMajor    string // PostgreSQL's major version (services.sh's PG_MAJOR); empty when unknown
	Kafka      string // comma-separated brokers
	KafkaSASL  string // the broker's SASL/PLAIN listener (user walhouse, password walhouse-local)
	KafkaTLS   string // the broker's SASL_SSL listener: SASL/PLAIN as on KafkaSASL, over TLS
	KafkaTLSCA string // PEM file of the throwaway CA that signed KafkaTLS's certificate
	Redis      string // host:port
	// The Redis TLS listener (ACL user walhouse, password walhouse-local),
	// the CA that signed its certificate, and a client certificate and key
	// signed by the same CA.
	RedisTLS, RedisTLSCA, RedisTLSClientCert, RedisTLSClientKey string
	ClickHouse                                                  string // ClickHouse DSN (http://… for the embedded engine)
	ChdbLib                                                     string // path to libchdb.so
}

// envVar is one variable of .local/env and the field of Env it fills.
type envVar struct {
	name  string
	value *string
}

// service reports whether v names a service (all but WALHOUSE_CHDB_LIB,
// the path of a library).
func (v envVar) service() bool { return v.name != "WALHOUSE_CHDB_LIB" }

// vars pairs each field of e with its variable, named as .local/env (and
// the environment) name it.
func (e *Env) vars() []envVar {
	return []envVar{
		{"WALHOUSE_PG_URL", &e.PG},
		{"WALHOUSE_PG_MAJOR", &e.PGMajor},
		{"WALHOUSE_KAFKA_BROKERS", &e.Kafka},
		{"WALHOUSE_KAFKA_SASL_BROKERS", &e.KafkaSASL},
		{"WALHOUSE_KAFKA_TLS_BROKERS", &e.KafkaTLS},
		{"WALHOUSE_KAFKA_TLS_BROKERS_CA", &e.KafkaTLSCA},
		{"WALHOUSE_REDIS_ADDR", &e.Redis},
		{"WALHOUSE_REDIS_TLS_SERVER", &e.RedisTLS},
		{"WALHOUSE_REDIS_TLS_SERVER_CA", &e.RedisTLSCA},
		{"WALHOUSE_REDIS_TLS_SERVER_CLIENT_CERT", &e.RedisTLSClientCert},
		{"WALHOUSE_REDIS_TLS_SERVER_CLIENT_KEY", &e.RedisTLSClientKey},
		{"WALHOUSE_CLICKHOUSE_URL", &e.ClickHouse},
		{"WALHOUSE_CHDB_LIB", &e.ChdbLib},
	}
}

// Vars returns e's non-empty fields as NAME=value, named as .local/env
// names them: the environment of a process that is to use these services.
func (e Env) Vars() []string {
	var out []string
	for _, v := range e.vars() {
		if *v.value != "" {
			out = append(out, v.name+"="+*v.value)
		}
	}
	return out
}

// Environ returns environ (NAME=value entries, as os.Environ gives them)
// with e's services in place of any others: the service variables of
// .local/env are dropped, then e's Vars appended. It is the environment
// of a process that is to use e's services and no others.
func (e Env) Environ(environ []string) []string {
	drop := map[string]bool{}
	for _, v := range e.vars() {
		drop[v.name] = v.service()
	}
	var out []string
	for _, kv := range environ {
		if name, _, _ := strings.Cut(kv, "="); !drop[name] {
			out = append(out, kv)
		}
	}
	return append(out, e.Vars()...)
}

// Load reads the environment, falling back to the env file that
// services.sh writes (.local/env at the repository root). It is the local
// services' side of Require; it never starts containers.
func Load() Env {
	vals := map[string]string{}
	if root, err := repoRoot(); err == nil {
		readEnvFile(filepath.Join(root, ".local", "env"), vals)
	}
	var e Env
	for _, v := range e.vars() {
		if *v.value = os.Getenv(v.name); *v.value == "" {
			*v.value = vals[v.name]
		}
	}
	return e
}

// Required reports whether integration tests must run (WALHOUSE_INTEGRATION=1).
func Required() bool { return os.Getenv("WALHOUSE_INTEGRATION") == "1" }

// The backends of WALHOUSE_SERVICES: where Require finds the services.
const (
	// BackendLocal (the default) is the local services of
	// deploy/local/services.sh, found through Load.
	BackendLocal = "local"
	// BackendContainers is PostgreSQL, Kafka, a ClickHouse server and
	// Valkey as containers (StartContainers), once per test binary.
	BackendContainers = "containers"
)

// address returns the address of service in e ("" when e lacks it), and
// whether service is a name Require knows.
func (e Env) address(service string) (string, bool) {
	switch service {
	case "pg":
		return e.PG, true
	case "kafka":
		return e.Kafka, true
	case "kafka-sasl":
		return e.KafkaSASL, true
	case "kafka-tls":
		// Both or nothing: the listener is useless to a test without its CA.
		if e.KafkaTLSCA == "" {
			return "", true
		}
		return e.KafkaTLS, true
	case "redis":
		return e.Redis, true
	case "redis-tls":
		if e.RedisTLSCA == "" || e.RedisTLSClientCert == "" || e.RedisTLSClientKey == "" {
			return "", true
		}
		return e.RedisTLS, true
	case "clickhouse":
		return e.ClickHouse, true
	default:
		return "", false
	}
}

// missing returns the services e does not provide.
func (e Env) missing(services []string) []string {
	var out []string
	for _, s := range services {
		if a, _ := e.address(s); a == "" {
			out = append(out, s)
		}
	}
	return out
}

// Require returns the environment of the named services ("pg", "kafka",
// "kafka-sasl", "kafka-tls", "redis", "redis-tls", "clickhouse"), or skips
// t, or fails it. WALHOUSE_INTEGRATION=0 skips it first, whatever the
// backend. Then WALHOUSE_SERVICES picks the backend:
//
//   - local (the default): the services of .local/env. A service missing
//     skips t, or fails it when integration tests are required
//     (WALHOUSE_INTEGRATION=1).
//   - containers: the containers of this test binary, started on first
//     use. Without a Docker engine t skips with "no Docker engine: …", or
//     fails when integration tests are required, since then the services
//     must be there; any other failure to start them fails t. The SASL and
//     TLS listeners ("kafka-sasl", "kafka-tls", "redis-tls") are not among
//     the containers: a test that needs them skips, required or not.
func Require(t testing.TB, services ...string) Env {
	t.Helper()
	for _, s := range services {
		if _, ok := (Env{}).address(s); !ok {
			t.Fatalf("testenv: unknown service %q", s)
		}
	}
	if os.Getenv("WALHOUSE_INTEGRATION") == "0" {
		t.Skip("integration tests disabled (WALHOUSE_INTEGRATION=0, as in make unit)")
	}
	switch b := os.Getenv("WALHOUSE_SERVICES"); b {
	case "", BackendLocal:
		return requireLocal(t, Load(), services)
	case BackendContainers:
		return requireContainers(t, services, startShared)
	default:
		t.Fatalf("WALHOUSE_SERVICES=%q: want %s (the default) or %s", b, BackendLocal, BackendContainers)
		return Env{}
	}
}

// requireLocal is Require for the local services.
func requireLocal(t testing.TB, e Env, services []string) Env {
	t.Helper()
	if missing := e.missing(services); len(missing) > 0 {
		msg := fmt.Sprintf("services %v are not configured: run `deploy/local/services.sh start` (or `make services`) first", missing)
		if Required() {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return e
}

// requireContainers is Require for the containers that start returns.
func requireContainers(t testing.TB, services []string, start func(context.Context) (Env, error)) Env {
	t.Helper()
	// What no set provides is known before starting one: a test that
	// needs it skips without waiting for containers it cannot use.
	if missing := (endpoints{pg: "-", kafka: "-", clickhouse: "-", redis: "-"}).env().missing(services); len(missing) > 0 {
		t.Skipf("WALHOUSE_SERVICES=containers does not provide %v (its containers are pg, kafka, redis and clickhouse, without SASL or TLS listeners): "+
			"run this test against the local services (deploy/local/services.sh start)", missing)
	}
	e, err := start(context.Background())
	switch {
	case errors.Is(err, ErrNoEngine) && !Required():
		t.Skip(err.Error())
	case errors.Is(err, ErrNoEngine):
		t.Fatal(err.Error() + " (WALHOUSE_INTEGRATION=1 requires the services: failing, not skipping)")
	case err != nil:
		t.Fatal(err)
	}
	return e
}

// RequireLocal skips t under WALHOUSE_SERVICES=containers: for a test
// that does to a local service what it cannot do to a container, such as
// stopping and starting it with deploy/local/services.sh (a container
// started again gets new host ports). why says what the test does.
func RequireLocal(t testing.TB, why string) {
	t.Helper()
	if os.Getenv("WALHOUSE_SERVICES") == BackendContainers {
		t.Skipf("needs the local services, not WALHOUSE_SERVICES=containers: %s", why)
	}
}

// Name returns a fresh lower-case identifier with the given prefix, for
// slots, publications, topics and tables that must not collide between
// tests or runs.
func Name(prefix string) string {
	var b [5]byte
	_, _ = rand.Read(b[:])
	return prefix + "_" + hex.EncodeToString(b[:])
}

// FreeAddr returns a loopback address (host:port) whose port nothing
// listened on a moment ago: for a process's listener, or as an address that
// refuses connections. Another process may take the port in between, so a
// test that needs it for long should listen itself.
func FreeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("find a free port: %v", err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// Eventually polls check until it returns nil or timeout passes, and
// returns the last error. It is for waiting on asynchronous pipelines, not
// for asserting timing.
func Eventually(ctx context.Context, timeout time.Duration, check func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := backoff.Poll(ctx, check); err != nil {
		return fmt.Errorf("not reached within %v: %w", timeout, err)
	}
	return nil
}

func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", os.ErrNotExist
		}
		dir = parent
	}
}

// readEnvFile reads `export NAME=value` (or NAME=value) lines.
func readEnvFile(path string, into map[string]string) {
	f, err := os.Open(path)
	if err != nil {
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(sc.Text()), "export "))
		k, v, ok := strings.Cut(line, "=")
		if !ok || strings.HasPrefix(k, "#") {
			continue
		}
		into[k] = strings.Trim(v, `"'`)
	}
}

// DropSlot drops a replication slot a test created (pgslot.Drop: it waits
// for the walsender of a stopped capture to let go of it, and ends it if
// it does not).
func DropSlot(ctx context.Context, pg pgslot.Execer, slot string) error {
	return pgslot.Drop(ctx, pg, slot)
}

// SampleHeap samples the process's heap in use every 20ms until the
// returned stop function is called, which returns the peak. Tests use it to
// show that streaming work runs in bounded memory.
func SampleHeap() (stop func() uint64) {
	var peak uint64
	done := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapInuse)
			select {
			case <-done:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	return func() uint64 {
		close(done)
		<-sampled
		return peak
	}
}
