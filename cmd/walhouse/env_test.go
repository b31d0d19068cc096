package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/walhouse/walhouse/cli"
	"github.com/walhouse/walhouse/config"
	"github.com/walhouse/walhouse/harness/testenv"
)

// cleanEnv is the environment of the test's walhouse runs: none of the
// harness's WALHOUSE_* variables (which name the local services), every
// service at a port where nothing listens, so that a value checked only
// after a connection shows as a connection error (exit 1), not exit 2.
func cleanEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "WALHOUSE_") || name == "EVENT_DEDUP_TTL_HOURS" || name == "DATA_IDEMPOTENCY_KEY_RETENTION_DAYS" {
			continue
		}
		env = append(env, kv)
	}
	env = append(env,
		"WALHOUSE_KAFKA_BROKERS=127.0.0.1:1",
		"WALHOUSE_CLICKHOUSE_URL=clickhouse://127.0.0.1:1",
		"WALHOUSE_DEDUP_ADDR=127.0.0.1:1",
	)
	return append(env, extra...)
}

// TestValuesCheckedBeforeConnecting runs the binary with bad values from
// flags, variables and a file: each is a usage error (exit 2) that names
// where the value came from, the key and what is allowed, with the
// messages of config check, all problems at once, before any connection.
func TestValuesCheckedBeforeConnecting(t *testing.T) {
	bin, err := testenv.BuildBinary(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "walhouse.yaml")
	if err := os.WriteFile(file, []byte("sink:\n  max_batch: 100\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	pg := "postgres://walhouse@127.0.0.1:1/app"
	for name, tc := range map[string]struct {
		env  []string
		args []string
		want []string
	}{
		"negative max batch": {nil, []string{"sink", "--max-batch", "-5"},
			[]string{"--max-batch (key sink.max_batch): -5 is too small; want at least 1"}},
		"pg not a URL before Kafka": {nil, []string{"capture", "--pg", "notaurl"},
			[]string{`flag --pg: "notaurl" is not a PostgreSQL URL`}},
		"pg from a variable": {[]string{"WALHOUSE_SOURCE_POSTGRES_URL=notaurl"}, []string{"verify", "--tables", "public.a"},
			[]string{`env WALHOUSE_SOURCE_POSTGRES_URL: "notaurl" is not a PostgreSQL URL`}},
		"old variable not a number": {[]string{"WALHOUSE_MAX_RECORD_BYTES=abc"}, []string{"sink"},
			[]string{`env WALHOUSE_MAX_RECORD_BYTES (deprecated name of WALHOUSE_TOPICS_MAX_RECORD_BYTES) (key topics.max_record_bytes): "abc" is not a whole number`}},
		"variable not a number": {[]string{"WALHOUSE_TOPICS_MAX_RECORD_BYTES=abc"}, []string{"capture", "--pg", pg},
			[]string{`env WALHOUSE_TOPICS_MAX_RECORD_BYTES (key topics.max_record_bytes): "abc" is not a whole number`}},
		"variable not a bool": {[]string{"WALHOUSE_FAILOVER_SLOT=yes"}, []string{"capture", "--pg", pg},
			[]string{`(key source.failover_slot): "yes" is not true or false`}},
		"old ttl variable too small": {[]string{"EVENT_DEDUP_TTL_HOURS=0"}, []string{"sink"},
			[]string{"env EVENT_DEDUP_TTL_HOURS (deprecated name of WALHOUSE_DEDUP_TTL_HOURS) (key dedup.ttl_hours): 0 is too small; want at least 1"}},
		"ttl not a number": {[]string{"WALHOUSE_DEDUP_TTL_HOURS=1d"}, []string{"sink"},
			[]string{`env WALHOUSE_DEDUP_TTL_HOURS (key dedup.ttl_hours): "1d" is not a whole number`}},
		"mismatch mode": {nil, []string{"sink", "--mismatch-mode", "ignore"},
			[]string{`--mismatch-mode (key sink.mismatch_mode): "ignore" is not allowed; want error or warn`}},
		"snapshot": {nil, []string{"capture", "--pg", pg, "--snapshot", "sometimes"},
			[]string{`(key capture.snapshot): "sometimes" is not allowed; want initial or never`}},
		"on bad row": {[]string{"WALHOUSE_CAPTURE_ON_BAD_ROW=skip"}, []string{"capture", "--pg", pg},
			[]string{`env WALHOUSE_CAPTURE_ON_BAD_ROW (key capture.on_bad_row): "skip" is not allowed`}},
		"replication factor": {nil, []string{"capture", "--pg", pg, "--replication-factor", "0"},
			[]string{"(key topics.replication_factor): 0 is not allowed"}},
		"sasl mechanism": {[]string{"WALHOUSE_KAFKA_SASL_MECHANISM=gssapi"}, []string{"dlq", "list"},
			[]string{`(key kafka.sasl.mechanism): "gssapi" is not allowed`}},
		"serve limits": {nil, []string{"serve", "--max-limit", "0", "--default-limit", "0"},
			[]string{"(key api.limits.max_rows): 0 is too small", "(key api.limits.default_rows): 0 is too small"}},
		"log format from a variable": {[]string{"WALHOUSE_LOG_FORMAT=xml"}, []string{"cleanup"},
			[]string{`env WALHOUSE_LOG_FORMAT (key log.format): "xml" is not allowed; want text or json`}},
		"retention days": {[]string{"WALHOUSE_IDEMPOTENCY_RETENTION_DAYS=0"}, []string{"keys", "prune", "--pg", pg, "--daily-at", "25:00"},
			[]string{"env WALHOUSE_IDEMPOTENCY_RETENTION_DAYS (key idempotency.retention_days): 0 is too small; want at least 1", `flag --daily-at (key idempotency.prune_at): "25:00" is not a time of day`}},
		"verify buckets": {nil, []string{"verify", "--pg", pg, "--tables", "orders", "--bucket-rows", "0"},
			[]string{"(key verify.bucket_rows): 0 is too small", `(key verify.tables): "orders" is not schema.table`}},
		"demo workload": {nil, []string{"demo", "--pg", pg, "--tenants", "0"},
			[]string{"--tenants 0, --orders 2500: want positive numbers"}},
		"bad flag syntax does not stop the parse": {nil, []string{"capture", "--pg", pg, "--partitions", "2x", "--no-create-slot=nah", "--heartbeat-interval", "soon"},
			[]string{`flag --partitions (key topics.partitions): "2x" is not a whole number`, `flag --no-create-slot: "nah" is not a valid boolean`, `flag --heartbeat-interval (key capture.heartbeat_interval): "soon" is not a duration`}},
		"every problem at once": {[]string{"WALHOUSE_SINK_MAX_WAIT=0s"}, []string{"--config", file, "sink", "--insert-parallelism", "0", "--kafka-sasl", "oauth"},
			[]string{"--insert-parallelism (key sink.insert_parallelism): 0 is too small", "env WALHOUSE_SINK_MAX_WAIT (key sink.max_wait): 0s is not a positive duration", `(key kafka.sasl.mechanism): "oauth" is not allowed`}},
	} {
		t.Run(name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			c := exec.Command(bin, tc.args...)
			c.Env = cleanEnv(tc.env...)
			c.Stdout, c.Stderr = &stdout, &stderr
			_ = c.Run()
			if got := c.ProcessState.ExitCode(); got != cli.ExitUsage {
				t.Errorf("exit status %d, want %d (a usage error)\n%s", got, cli.ExitUsage, stderr.String())
			}
			for _, w := range tc.want {
				if !strings.Contains(stderr.String(), w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr.String())
				}
			}
		})
	}
}

// TestVariables checks the naming rule and the old names' deprecation
// path through walhouse config view, which parses as a start does and
// prints each value's source.
func TestVariables(t *testing.T) {
	for _, tc := range []struct {
		name      string
		env       map[string]string
		args      []string
		want      []string // substrings of lines of config view
		deprecate string   // the old name the warning must name
	}{
		{"bool variable 1 is true", map[string]string{"WALHOUSE_SOURCE_FAILOVER_SLOT": "1"}, []string{"capture", "--pg", "postgres://h/db"},
			[]string{`--failover-slot  source.failover_slot  "true"  env WALHOUSE_SOURCE_FAILOVER_SLOT`}, ""},
		{"old bool variable", map[string]string{"WALHOUSE_FAILOVER_SLOT": "t"}, []string{"capture", "--pg", "postgres://h/db"},
			[]string{`"true"  env WALHOUSE_FAILOVER_SLOT (deprecated name of WALHOUSE_SOURCE_FAILOVER_SLOT)`}, "WALHOUSE_FAILOVER_SLOT"},
		{"dedup variables are WALHOUSE_DEDUP_", map[string]string{"WALHOUSE_DEDUP_ADDR": "valkey:6379", "WALHOUSE_DEDUP_USER": "u"}, []string{"sink"},
			[]string{`--dedup-addr  dedup.addr  "valkey:6379"  env WALHOUSE_DEDUP_ADDR`, `"u"  env WALHOUSE_DEDUP_USER`}, ""},
		{"old WALHOUSE_REDIS_ADDR", map[string]string{"WALHOUSE_REDIS_ADDR": "valkey:6379"}, []string{"sink"},
			[]string{`"valkey:6379"  env WALHOUSE_REDIS_ADDR (deprecated name of WALHOUSE_DEDUP_ADDR)`}, "WALHOUSE_REDIS_ADDR"},
		{"new name beats old", map[string]string{"WALHOUSE_REDIS_ADDR": "old:1", "WALHOUSE_DEDUP_ADDR": "new:1"}, []string{"sink"},
			[]string{`"new:1"  env WALHOUSE_DEDUP_ADDR`}, ""},
		{"old name without the prefix", map[string]string{"DATA_IDEMPOTENCY_KEY_RETENTION_DAYS": "9"}, []string{"keys", "prune", "--pg", "postgres://h/db"},
			[]string{`"9"  env DATA_IDEMPOTENCY_KEY_RETENTION_DAYS (deprecated name of WALHOUSE_IDEMPOTENCY_RETENTION_DAYS)`}, "DATA_IDEMPOTENCY_KEY_RETENTION_DAYS"},
		{"metrics address per section", map[string]string{"WALHOUSE_SINK_METRICS_ADDR": ":9464", "WALHOUSE_CAPTURE_METRICS_ADDR": ":9465"}, []string{"sink"},
			[]string{`--metrics-addr  sink.metrics_addr  ":9464"  env WALHOUSE_SINK_METRICS_ADDR`}, ""},
		{"old sink metrics variable", map[string]string{"WALHOUSE_METRICS_ADDR": ":9464"}, []string{"sink"},
			[]string{`":9464"  env WALHOUSE_METRICS_ADDR (deprecated name of WALHOUSE_SINK_METRICS_ADDR)`}, "WALHOUSE_METRICS_ADDR"},
		{"serve limit variable", map[string]string{"WALHOUSE_EXPORT_MAX_ROWS": "5"}, []string{"serve"},
			[]string{`"5"  env WALHOUSE_EXPORT_MAX_ROWS (deprecated name of WALHOUSE_API_LIMITS_EXPORT_MAX_ROWS)`}, "WALHOUSE_EXPORT_MAX_ROWS"},
		{"export caps spelled as serve's", map[string]string{"WALHOUSE_API_LIMITS_EXPORT_MAX_BYTES": "9"}, []string{"export", "--tenant", "t", "--subject-column", "c", "--subject", "v", "--out", "f.csv", "--export-max-rows", "5"},
			[]string{`--export-max-rows  api.limits.export_max_rows  "5"  flag --export-max-rows`, `--export-max-bytes  api.limits.export_max_bytes  "9"  env WALHOUSE_API_LIMITS_EXPORT_MAX_BYTES`}, ""},
		{"old export flag", nil, []string{"export", "--tenant", "t", "--subject-column", "c", "--subject", "v", "--out", "f.csv", "--max-rows", "5"},
			[]string{`--export-max-rows  api.limits.export_max_rows  "5"  flag --max-rows (deprecated name)`}, "--max-rows"},
		{"a default is valid where the file's rule is not", nil, []string{"export", "--tenant", "t", "--subject-column", "c", "--subject", "v", "--out", "f.csv", "--export-max-rows", "0"},
			[]string{`--export-max-rows  api.limits.export_max_rows  "0"  flag --export-max-rows`}, ""},
		{"flag beats variable", map[string]string{"WALHOUSE_SINK_MAX_BATCH": "7"}, []string{"sink", "--max-batch", "8"},
			[]string{`--max-batch  sink.max_batch  "8"  flag --max-batch`}, ""},
		{"passwords masked", map[string]string{"WALHOUSE_CLICKHOUSE_URL": "http://u:s3cret@ch:8123", "WALHOUSE_CLICKHOUSE_PASSWORD": "s3cret"}, []string{"sink"},
			[]string{`"http://u:xxxxx@ch:8123"  env WALHOUSE_CLICKHOUSE_URL`, `(secret)  env WALHOUSE_CLICKHOUSE_PASSWORD`}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, kv := range os.Environ() {
				if name, _, _ := strings.Cut(kv, "="); strings.HasPrefix(name, "WALHOUSE_") || name == "EVENT_DEDUP_TTL_HOURS" || name == "DATA_IDEMPOTENCY_KEY_RETENTION_DAYS" {
					t.Setenv(name, "")
				}
			}
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			var stdout, stderr bytes.Buffer
			if code := run(append([]string{"config", "view"}, tc.args...), &stdout, &stderr); code != 0 {
				t.Fatalf("config view exited %d: %s", code, stderr.String())
			}
			out := squeeze(stdout.String())
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("config view lacks %q:\n%s", w, out)
				}
			}
			if strings.Contains(out, "s3cret") {
				t.Errorf("config view shows a secret:\n%s", out)
			}
			if warned := strings.Contains(stderr.String(), "deprecated "); warned != (tc.deprecate != "") || !strings.Contains(stderr.String(), tc.deprecate) {
				t.Errorf("deprecation warning %v, want one naming %q:\n%s", warned, tc.deprecate, stderr.String())
			}
		})
	}
}

// squeeze makes each run of spaces between the view's columns two.
func squeeze(s string) string { return columnGap.ReplaceAllString(s, "  ") }

var columnGap = regexp.MustCompile(`  +`)

// TestConfigurationReferenceIsCurrent fails when docs/configuration.md is
// not what walhouse config reference writes from the schema and the
// flags: regenerate it with go generate ./cmd/walhouse.
func TestConfigurationReferenceIsCurrent(t *testing.T) {
	var want bytes.Buffer
	if err := commands().WriteReference(&want); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatalf("%v: generate it with go generate ./cmd/walhouse", err)
	}
	if !bytes.Equal(got, want.Bytes()) {
		t.Errorf("docs/configuration.md is out of date: regenerate it with go generate ./cmd/walhouse (walhouse config reference > docs/configuration.md)")
	}
	for _, s := range config.Schema() {
		if !s.SecretEnv && !bytes.Contains(got, []byte("| `"+s.Key+"` | `--"+s.Flag+"` | `"+s.Env+"`")) {
			t.Errorf("docs/configuration.md lacks the row of %s", s.Key)
		}
	}
}

// TestConfigCheckRunsTheStartChecks: config check applies a file to every
// command's flags and runs the checks of a start, so a file's connection
// string that its driver cannot parse is reported there too.
func TestConfigCheckRunsTheStartChecks(t *testing.T) {
	file := filepath.Join(t.TempDir(), "walhouse.yaml")
	if err := os.WriteFile(file, []byte("source:\n  postgres: {url: notaurl}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if code := run([]string{"config", "check", file}, &stdout, &stderr); code != cli.ExitFailure {
		t.Fatalf("config check exited %d, want %d:\n%s%s", code, cli.ExitFailure, stdout.String(), stderr.String())
	}
	if want := `file source.postgres.url (line 2): "notaurl" is not a PostgreSQL URL`; strings.Count(stderr.String(), want) != 1 {
		t.Errorf("config check does not report %q once:\n%s", want, stderr.String())
	}
}

// TestConfigCheckColumnOverrides: config check lists every problem of a
// layout's column overrides at once (an unknown type, clamp on a type
// other than Decimal, a DateTime64 precision PostgreSQL does not have)
// and takes the valid ones (JSON, clamp on a Decimal, DateTime64(3)).
func TestConfigCheckColumnOverrides(t *testing.T) {
	file := filepath.Join(t.TempDir(), "walhouse.yaml")
	cfg := `layout:
  public.orders:
    columns:
      payload: {type: JSON}
      amount: {type: "Decimal(12, 2)", on_overflow: clamp}
      at: {type: "DateTime64(3)"}
      bad: {type: Json}
      ratio: {type: Float64, on_overflow: clamp}
      late: {type: "DateTime64(9)"}
`
	if err := os.WriteFile(file, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if code := run([]string{"config", "check", file}, &stdout, &stderr); code != cli.ExitFailure {
		t.Fatalf("config check exited %d, want %d:\n%s%s", code, cli.ExitFailure, stdout.String(), stderr.String())
	}
	for _, want := range []string{
		`bad: type "Json" is not an override walhouse knows`,
		"ratio: on_overflow clamp is for Decimal(P, S) overrides, not Float64",
		"late: DateTime64(9): want DateTime64(P) or DateTime64(P, 'UTC') with 0 <= P <= 6",
	} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("config check does not report %q:\n%s", want, stderr.String())
		}
	}
	for _, ok := range []string{"payload:", "amount:", "at:"} {
		if strings.Contains(stderr.String(), ok) {
			t.Errorf("config check reports the valid override %s:\n%s", ok, stderr.String())
		}
	}
}
