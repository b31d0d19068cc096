package config

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestExampleIsValidAndComplete(t *testing.T) {
	c, err := Parse("example.yaml", []byte(Example()))
	if err != nil {
		t.Fatalf("the example does not pass its own check: %v", err)
	}
	given := map[string]bool{}
	for _, v := range c.Values() {
		given[v.Key] = true
	}
	for _, s := range Schema() {
		// The secret's environment-variable alternatives are shown as
		// comments: a file names a secret one way only.
		if !given[s.Key] && !s.SecretEnv {
			t.Errorf("the example does not show %s", s.Key)
		}
		if s.SecretEnv && !strings.Contains(Example(), "# "+s.Key[strings.LastIndex(s.Key, ".")+1:]+":") {
			t.Errorf("the example does not show %s as a comment", s.Key)
		}
	}
}

func TestSchemaNamesAFlagForEveryKey(t *testing.T) {
	seen := map[string]bool{}
	for _, s := range Schema() {
		if s.Flag == "" {
			t.Errorf("%s names no flag", s.Key)
		}
		if seen[s.Key] {
			t.Errorf("%s is in the schema twice", s.Key)
		}
		seen[s.Key] = true
	}
}

func TestParseValues(t *testing.T) {
	c, err := Parse("t.yaml", []byte(`
source:
  postgres: {url: "postgres://u@h/db"}
  tables: public.a, public.b
  tenant_columns: {public.b: org, public.a: tid}
capture: {heartbeat_interval: 0s}
kafka: {brokers: [k1:9092, "k2:9092"]}
topics: {partitions: 12, replication_factor: -1}
sink: {max_wait: 250ms, max_batch: 10_000}
dedup: {tls: {enabled: true}}
`))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	for _, v := range c.Values() {
		got[v.Key] = v.Args
	}
	want := map[string][]string{
		"source.postgres.url":        {"postgres://u@h/db"},
		"source.tables":              {"public.a,public.b"},
		"source.tenant_columns":      {"public.a=tid", "public.b=org"},
		"capture.heartbeat_interval": {"0s"},
		"kafka.brokers":              {"k1:9092,k2:9092"},
		"topics.partitions":          {"12"},
		"topics.replication_factor":  {"-1"},
		"sink.max_wait":              {"250ms"},
		"sink.max_batch":             {"10000"},
		"dedup.tls.enabled":          {"true"},
	}
	if len(got) != len(want) {
		t.Errorf("got %d values %v, want %d", len(got), got, len(want))
	}
	for k, w := range want {
		if !slices.Equal(got[k], w) {
			t.Errorf("%s = %q, want %q", k, got[k], w)
		}
	}
	if c.Sink.MaxWait != 250*time.Millisecond {
		t.Errorf("sink.max_wait decoded as %v", c.Sink.MaxWait)
	}
}

func TestParseProblems(t *testing.T) {
	for _, tc := range []struct {
		name string
		file string
		want []string // each a problem, in line order
	}{
		{"empty file", "", nil},
		{"unknown key with a suggestion", "source:\n  slott: x\n",
			[]string{`source.slott (line 2): unknown key; did you mean "slot"?`}},
		{"unknown section", "sinks: {}\n", []string{`sinks (line 1): unknown key; did you mean "sink"?`}},
		{"inline password", "clickhouse:\n  password: hunter2\n",
			[]string{"clickhouse.password (line 2): secrets are never written in the configuration file: reference it with password_file: PATH"}},
		{"password in a URL", "source:\n  postgres:\n    url: postgres://u:pw@h/db\n",
			[]string{"source.postgres.url (line 3): holds a password"}},
		{"password in a libpq string", "source:\n  postgres:\n    url: host=h password=pw\n",
			[]string{"source.postgres.url (line 3): holds a password"}},
		{"password in the primary's URL", "source:\n  postgres:\n    primary_url: postgres://u:pw@primary/db\n",
			[]string{"source.postgres.primary_url (line 3): holds a password"}},
		{"inline cursor secret", "api:\n  cursor_secret: abc\n", []string{"api.cursor_secret (line 2): secrets are never written"}},
		{"both references", "dedup:\n  password_file: /f\n  password_env: X\n",
			[]string{"dedup.password_env (line 3): dedup.password_file and dedup.password_env both name the secret"}},
		{"bad env name", "kafka:\n  sasl:\n    password_env: 1X\n",
			[]string{`kafka.sasl.password_env (line 3): "1X" is not an environment variable name`}},
		{"cluster", "clickhouse:\n  cluster: main\n", nil},
		{"every problem at once", `
topics:
  partitions: 0
  replication_factor: 0
  max_record_bytes: 10
capture:
  snapshot: always
  status_interval: fast
sink:
  mismatch_mode: ignore
log:
  level: loud
  format: xml
`, []string{
			"topics.partitions (line 3): 0 is too small; want at least 1",
			"topics.replication_factor (line 4): 0 is not allowed; want -1",
			"topics.max_record_bytes (line 5): max record bytes 10: want 1048576 (1 MiB)",
			`capture.snapshot (line 7): "always" is not allowed; want initial or never`,
			`capture.status_interval (line 8): "fast" is not a duration`,
			`sink.mismatch_mode (line 10): "ignore" is not allowed; want error or warn`,
			`log.level (line 12): "loud" is not allowed; want debug or info or warn or error`,
			`log.format (line 13): "xml" is not allowed; want text or json`,
		}},
		{"wrong shapes", "kafka:\n  brokers: {a: b}\nsource: [1]\ntopics:\n  partitions: many\n",
			[]string{"kafka.brokers (line 2): a mapping is not a list of strings", "source (line 3): want a mapping",
				`topics.partitions (line 5): "many" is not a whole number`}},
		{"bad broker and ClickHouse URL", "kafka: {brokers: [kafka]}\nclickhouse: {url: \"ftp://x\"}\n",
			[]string{`kafka.brokers (line 1): "kafka" is not host:port`, `clickhouse.url (line 2): "ftp://x" is not a ClickHouse DSN`}},
		{"duplicate key", "sink:\n  group: a\n  group: b\n", []string{"sink.group (line 3): given twice; keep one"}},
		{"not YAML", "a: [\n", []string{"(file): not valid YAML"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("t.yaml", []byte(tc.file))
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			var ce *Error
			if !errors.As(err, &ce) {
				t.Fatalf("got %v, want an *Error", err)
			}
			if len(ce.Problems) != len(tc.want) {
				t.Fatalf("got %d problems, want %d:\n%v", len(ce.Problems), len(tc.want), err)
			}
			for i, w := range tc.want {
				if got := ce.Problems[i].String(); !strings.HasPrefix(got, w) {
					t.Errorf("problem %d:\n got %s\nwant %s…", i, got, w)
				}
			}
		})
	}
}

func TestClosest(t *testing.T) {
	for _, tc := range []struct{ word, want string }{
		{"slott", "slot"}, {"publicaton", "publication"}, {"tabels", "tables"}, {"zzzzzz", ""}, {"max_batches", "max_batch"},
	} {
		if got := Closest(tc.word, []string{"slot", "publication", "tables", "max_batch", "max_wait"}); got != tc.want {
			t.Errorf("Closest(%q) = %q, want %q", tc.word, got, tc.want)
		}
	}
}
