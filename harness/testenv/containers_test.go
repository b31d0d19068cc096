package testenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/jackc/pgx/v5"
	"go.yaml.in/yaml/v3"
)

func TestContainersEnv(t *testing.T) {
	for name, ep := range map[string]endpoints{
		"localhost": {pg: "localhost:32768", kafka: "localhost:32769", clickhouse: "localhost:32770", redis: "localhost:32771"},
		"ipv4":      {pg: "10.0.0.5:5432", kafka: "10.0.0.5:9092", clickhouse: "10.0.0.5:9000", redis: "10.0.0.5:6379"},
		"ipv6":      {pg: "[::1]:5432", kafka: "[::1]:9092", clickhouse: "[::1]:9000", redis: "[::1]:6379"},
	} {
		t.Run(name, func(t *testing.T) {
			e := ep.env()
			if want := "postgres://postgres@" + ep.pg + "/walhouse?sslmode=disable"; e.PG != want {
				t.Errorf("PG = %q, want %q (as .local/env has it)", e.PG, want)
			}
			pc, err := pgx.ParseConfig(e.PG)
			if err != nil {
				t.Fatalf("pgx does not parse PG %q: %v", e.PG, err)
			}
			host, port, _ := net.SplitHostPort(ep.pg)
			if got, want := fmt.Sprintf("%s@%s:%d/%s", pc.User, pc.Host, pc.Port, pc.Database), "postgres@"+host+":"+port+"/walhouse"; got != want {
				t.Errorf("PG parses to %s, want %s", got, want)
			}
			if pc.TLSConfig != nil {
				t.Error("PG asks for TLS; the container has none")
			}
			if e.Kafka != ep.kafka || e.Redis != ep.redis {
				t.Errorf("Kafka, Redis = %q, %q; want %q, %q", e.Kafka, e.Redis, ep.kafka, ep.redis)
			}
			opts, err := ch.ParseDSN(e.ClickHouse)
			if err != nil {
				t.Fatalf("clickhouse-go does not parse %q: %v", e.ClickHouse, err)
			}
			if opts.Protocol != ch.Native {
				t.Errorf("ClickHouse %q speaks %v; the server is to be reached over the native protocol", e.ClickHouse, opts.Protocol)
			}
			if !slices.Equal(opts.Addr, []string{ep.clickhouse}) || opts.Auth.Username != clickhouseUser || opts.Auth.Password != clickhousePassword {
				t.Errorf("ClickHouse %q parses to %v as %s/%s", e.ClickHouse, opts.Addr, opts.Auth.Username, opts.Auth.Password)
			}
			all := []string{"pg", "kafka", "kafka-sasl", "kafka-tls", "redis", "redis-tls", "clickhouse"}
			if got, want := e.missing(all), []string{"kafka-sasl", "kafka-tls", "redis-tls"}; !slices.Equal(got, want) {
				t.Errorf("the containers lack %v, want %v", got, want)
			}
		})
	}
}

// TestEnvVarsAreThoseOfServicesSh keeps Env, its Vars and Load on the
// names deploy/local/services.sh writes to .local/env.
func TestEnvVarsAreThoseOfServicesSh(t *testing.T) {
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	script, err := os.ReadFile(filepath.Join(root, "deploy", "local", "services.sh"))
	if err != nil {
		t.Fatal(err)
	}
	var written []string
	for _, m := range regexp.MustCompile(`echo "export (WALHOUSE_[A-Z_]+)=`).FindAllStringSubmatch(string(script), -1) {
		written = append(written, m[1])
	}
	var e Env
	var ours []string
	for _, v := range e.vars() {
		ours = append(ours, v.name)
	}
	slices.Sort(written)
	slices.Sort(ours)
	if len(written) == 0 || !slices.Equal(written, ours) {
		t.Fatalf("services.sh writes %v; Env has %v", written, ours)
	}

	// Every field goes out through Vars and comes back through Load.
	for i, v := range e.vars() {
		*v.value = fmt.Sprintf("value-%d", i)
	}
	for _, kv := range e.Vars() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	if got := Load(); got != e {
		t.Errorf("Load after Vars = %+v, want %+v", got, e)
	}
}

func TestContainerImagesMatchCompose(t *testing.T) {
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "deploy", "compose.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var compose struct {
		Services map[string]struct{ Image string }
	}
	if err := yaml.Unmarshal(b, &compose); err != nil {
		t.Fatalf("deploy/compose.yaml: %v", err)
	}
	for service, want := range map[string]string{"postgres": postgresImage, "kafka": kafkaImage, "clickhouse": clickhouseImage, "valkey": valkeyImage} {
		if got := compose.Services[service].Image; got != want {
			t.Errorf("deploy/compose.yaml runs %s as %q, WALHOUSE_SERVICES=containers as %q: pin both to one image", service, got, want)
		}
	}
}

// fakeTB records how Require ended a test instead of ending it.
type fakeTB struct {
	testing.TB
	skipped, failed string
}

func (f *fakeTB) Helper() {}
func (f *fakeTB) Skip(args ...any) {
	f.skipped = fmt.Sprint(args...)
	runtime.Goexit()
}
func (f *fakeTB) Skipf(format string, args ...any) { f.Skip(fmt.Sprintf(format, args...)) }
func (f *fakeTB) Fatal(args ...any) {
	f.failed = fmt.Sprint(args...)
	runtime.Goexit()
}
func (f *fakeTB) Fatalf(format string, args ...any) { f.Fatal(fmt.Sprintf(format, args...)) }

// outcome runs f with a fakeTB, in a goroutine of its own since Skip and
// Fatal end it, and says how it ended.
func outcome(t *testing.T, f func(tb testing.TB) Env) (env Env, skipped, failed string) {
	fake := &fakeTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		env = f(fake)
	}()
	<-done
	return env, fake.skipped, fake.failed
}

func TestRequireContainers(t *testing.T) {
	running := endpoints{pg: "h:1", kafka: "h:2", clickhouse: "h:3", redis: "h:4"}.env()
	noEngine := fmt.Errorf("%w: Cannot connect to the Docker daemon; WALHOUSE_SERVICES=containers needs one", ErrNoEngine)
	pullFailed := errors.New("start the service containers: postgres:17.5-bookworm: pull access denied")
	tests := map[string]struct {
		integration string
		started     Env
		err         error
		services    []string
		skip, fail  string // what the message contains; both empty: runs
	}{
		"no engine, plain go test":           {err: noEngine, services: []string{"pg"}, skip: "no Docker engine: Cannot connect"},
		"no engine, integration required":    {integration: "1", err: noEngine, services: []string{"pg"}, fail: "no Docker engine: Cannot connect"},
		"engine, start failed":               {err: pullFailed, services: []string{"pg"}, fail: "pull access denied"},
		"engine, start failed, required":     {integration: "1", err: pullFailed, services: []string{"pg"}, fail: "pull access denied"},
		"running":                            {started: running, services: []string{"pg", "kafka", "redis", "clickhouse"}},
		"running, required":                  {integration: "1", started: running, services: []string{"pg", "kafka", "redis", "clickhouse"}},
		"TLS listener not among containers":  {integration: "1", started: running, services: []string{"kafka", "kafka-tls"}, skip: "does not provide [kafka-tls]"},
		"SASL listener not among containers": {started: running, services: []string{"kafka-sasl"}, skip: "does not provide [kafka-sasl]"},
		"no engine, TLS listener":            {integration: "1", err: noEngine, services: []string{"redis-tls"}, skip: "does not provide [redis-tls]"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Setenv("WALHOUSE_INTEGRATION", tc.integration)
			started := false
			start := func(context.Context) (Env, error) {
				started = true
				return tc.started, tc.err
			}
			env, skipped, failed := outcome(t, func(tb testing.TB) Env { return requireContainers(tb, tc.services, start) })
			switch {
			case tc.skip != "" && !strings.Contains(skipped, tc.skip), tc.skip == "" && skipped != "":
				t.Errorf("skipped with %q, want a skip with %q", skipped, tc.skip)
			case tc.fail != "" && !strings.Contains(failed, tc.fail), tc.fail == "" && failed != "":
				t.Errorf("failed with %q, want a failure with %q", failed, tc.fail)
			case tc.skip == "" && tc.fail == "" && env != tc.started:
				t.Errorf("returned %+v, want %+v", env, tc.started)
			case strings.Contains(tc.skip, "does not provide") && started:
				t.Error("started the containers for a test they cannot serve")
			}
		})
	}
}

func TestRequireBackends(t *testing.T) {
	tests := map[string]struct {
		services, integration string
		skip, fail            string
	}{
		// make unit: never a container engine, whatever the backend.
		"unit tests, containers": {services: "containers", integration: "0", skip: "WALHOUSE_INTEGRATION=0"},
		"unknown backend":        {services: "docker", fail: `WALHOUSE_SERVICES="docker": want local (the default) or containers`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Setenv("WALHOUSE_SERVICES", tc.services)
			t.Setenv("WALHOUSE_INTEGRATION", tc.integration)
			_, skipped, failed := outcome(t, func(tb testing.TB) Env { return Require(tb, "pg") })
			if !strings.Contains(skipped, tc.skip) || !strings.Contains(failed, tc.fail) || (tc.skip == "") != (skipped == "") || (tc.fail == "") != (failed == "") {
				t.Errorf("skipped with %q, failed with %q; want skip %q, failure %q", skipped, failed, tc.skip, tc.fail)
			}
		})
	}
}

// TestContainersWithoutEngine runs where no container engine answers (as
// on the machine this was written on): StartContainers says so with
// ErrNoEngine, quickly and without panicking. Where an engine answers it
// skips: TestIntegrationServices covers that case.
func TestContainersWithoutEngine(t *testing.T) {
	if checkEngine(context.Background()) == nil {
		t.Skip("a container engine answers here; TestIntegrationServices runs against its containers")
	}
	_, err := StartContainers(context.Background())
	if !errors.Is(err, ErrNoEngine) || !strings.HasPrefix(err.Error(), "no Docker engine: ") {
		t.Fatalf("StartContainers without an engine: %v, want an error wrapping ErrNoEngine", err)
	}
	t.Logf("as a test under WALHOUSE_SERVICES=containers would skip: %v", err)
}

func TestEnviron(t *testing.T) {
	e := endpoints{pg: "h:1", kafka: "h:2", clickhouse: "h:3", redis: "h:4"}.env()
	got := e.Environ([]string{
		"PATH=/usr/bin",
		"WALHOUSE_PG_URL=postgres://postgres@127.0.0.1:55432/walhouse", // the local services', sourced earlier
		"WALHOUSE_KAFKA_SASL_BROKERS=127.0.0.1:59094",                  // a listener the containers lack
		"WALHOUSE_CHDB_LIB=/repo/.local/chdb/libchdb.so",               // a library, not a service
		"WALHOUSE_LOG_LEVEL=debug",
	})
	want := []string{
		"PATH=/usr/bin",
		"WALHOUSE_CHDB_LIB=/repo/.local/chdb/libchdb.so",
		"WALHOUSE_LOG_LEVEL=debug",
		"WALHOUSE_PG_URL=" + e.PG,
		"WALHOUSE_KAFKA_BROKERS=h:2",
		"WALHOUSE_REDIS_ADDR=h:4",
		"WALHOUSE_CLICKHOUSE_URL=" + e.ClickHouse,
	}
	if !slices.Equal(got, want) {
		t.Errorf("Environ =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestRequireLocal(t *testing.T) {
	for backend, skip := range map[string]bool{"": false, "local": false, "containers": true} {
		t.Setenv("WALHOUSE_SERVICES", backend)
		_, skipped, _ := outcome(t, func(tb testing.TB) Env {
			RequireLocal(tb, "it stops kafka with deploy/local/services.sh")
			return Env{}
		})
		if got := strings.Contains(skipped, "needs the local services, not WALHOUSE_SERVICES=containers: it stops kafka"); got != skip {
			t.Errorf("WALHOUSE_SERVICES=%q: skipped with %q, want a skip: %v", backend, skipped, skip)
		}
	}
}
