package testenv

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
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

// Load reads the environment, falling back to the env file that
// services.sh writes (.local/env at the repository root).
func Load() Env {
	vals := map[string]string{}
	if root, err := repoRoot(); err == nil {
		readEnvFile(filepath.Join(root, ".local", "env"), vals)
	}
	get := func(k string) string {
		if v := os.Getenv(k); v != "" {
			return v
		}
		return vals[k]
	}
	return Env{
		PG:                 get("WALHOUSE_PG_URL"),
		Kafka:              get("WALHOUSE_KAFKA_BROKERS"),
		KafkaSASL:          get("WALHOUSE_KAFKA_SASL_BROKERS"),
		KafkaTLS:           get("WALHOUSE_KAFKA_TLS_BROKERS"),
		KafkaTLSCA:         get("WALHOUSE_KAFKA_TLS_BROKERS_CA"),
		Redis:              get("WALHOUSE_REDIS_ADDR"),
		RedisTLS:           get("WALHOUSE_REDIS_TLS_SERVER"),
		RedisTLSCA:         get("WALHOUSE_REDIS_TLS_SERVER_CA"),
		RedisTLSClientCert: get("WALHOUSE_REDIS_TLS_SERVER_CLIENT_CERT"),
		RedisTLSClientKey:  get("WALHOUSE_REDIS_TLS_SERVER_CLIENT_KEY"),
		ClickHouse:         get("WALHOUSE_CLICKHOUSE_URL"),
		ChdbLib:            get("WALHOUSE_CHDB_LIB"),
	}
}

// Required reports whether integration tests must run (WALHOUSE_INTEGRATION=1).
func Required() bool { return os.Getenv("WALHOUSE_INTEGRATION") == "1" }

// Require returns the environment, skipping t (or failing it when
// integration tests are required) if any of the named services is not
// configured: "pg", "kafka", "kafka-sasl", "kafka-tls", "redis", "redis-tls",
// "clickhouse".
func Require(t testing.TB, services ...string) Env {
	t.Helper()
	e := Load()
	var missing []string
	for _, s := range services {
		var v string
		switch s {
		case "pg":
			v = e.PG
		case "kafka":
			v = e.Kafka
		case "kafka-sasl":
			v = e.KafkaSASL
		case "kafka-tls":
			// Both or nothing: the listener is useless to a test without its CA.
			if e.KafkaTLSCA != "" {
				v = e.KafkaTLS
			}
		case "redis":
			v = e.Redis
		case "redis-tls":
			if e.RedisTLSCA != "" && e.RedisTLSClientCert != "" && e.RedisTLSClientKey != "" {
				v = e.RedisTLS
			}
		case "clickhouse":
			v = e.ClickHouse
		default:
			t.Fatalf("testenv: unknown service %q", s)
		}
		if v == "" {
			missing = append(missing, s)
		}
	}
	if os.Getenv("WALHOUSE_INTEGRATION") == "0" {
		t.Skip("integration tests disabled (WALHOUSE_INTEGRATION=0, as in make unit)")
	}
	if len(missing) > 0 {
		msg := fmt.Sprintf("services %v are not configured: run `deploy/local/services.sh start` (or `make services`) first", missing)
		if Required() {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return e
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
