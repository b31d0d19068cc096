package main

import (
	"bytes"
	"context"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/walhouse/walhouse/config"
	"github.com/walhouse/walhouse/harness/testenv"
)

// TestCommandLine runs the built binary: exit statuses (0 help, 1 failure,
// 2 usage error), help of every command and short usage errors.
func TestCommandLine(t *testing.T) {
	bin, err := testenv.BuildBinary(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("sink:\n  max_bach: 10\n  max_wait: soon\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	badLayout := filepath.Join(dir, "layout.yaml")
	if err := os.WriteFile(badLayout, []byte("layout:\n  public.orders:\n    order_by: [tenant_id, id, id]\n    partition_by: toYYYYMM(now())\n    settings: {non_replicated_deduplication_window: 1}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	type want struct {
		code           int
		stdout, stderr []string // substrings
	}
	cases := map[string]struct {
		args []string
		want want
	}{
		"no arguments":        {nil, want{2, nil, []string{"Commands:"}}},
		"help":                {[]string{"-h"}, want{0, []string{"Commands:", "capture", "--config FILE"}, nil}},
		"help command":        {[]string{"help", "sink"}, want{0, []string{"walhouse sink: load records"}, nil}},
		"version":             {[]string{"version"}, want{0, []string{"walhouse ", "commit ", "go1."}, nil}},
		"--version":           {[]string{"--version"}, want{0, []string{"walhouse ", "go1."}, nil}},
		"unknown command":     {[]string{"captur"}, want{2, nil, []string{`unknown command "captur"; did you mean "capture"?`}}},
		"unknown flag":        {[]string{"capture", "--slott", "x"}, want{2, nil, []string{"unknown flag --slott; did you mean --slot?", "Run 'walhouse capture -h'"}}},
		"bad flag value":      {[]string{"sink", "--max-batch", "many"}, want{2, nil, []string{"-max-batch"}}},
		"bad layout flag":     {[]string{"sink", "--layout", "public.orders={"}, want{2, nil, []string{"flag --layout:", "layout of public.orders"}}},
		"missing required":    {[]string{"capture"}, want{2, nil, []string{"--pg is required (or env WALHOUSE_SOURCE_POSTGRES_URL, or key source.postgres.url"}}},
		"positional":          {[]string{"sink", "now"}, want{2, nil, []string{`unexpected arguments ["now"]`}}},
		"dlq without sub":     {[]string{"dlq"}, want{2, nil, []string{"want a subcommand: list"}}},
		"bad log level":       {[]string{"dlq", "list", "--log-level", "loud"}, want{2, nil, []string{`--log-level (key log.level): "loud" is not allowed`}}},
		"bad config":          {[]string{"--config", bad, "sink"}, want{2, nil, []string{`sink.max_bach (line 2): unknown key; did you mean "max_batch"?`, `sink.max_wait (line 3): "soon" is not a duration`}}},
		"config check bad":    {[]string{"config", "check", bad}, want{1, nil, []string{"2 problem(s)"}}},
		"config check layout": {[]string{"config", "check", badLayout}, want{1, nil, []string{"for walhouse capture: layout (line 1): layout of public.orders", `order_by: column "id" is given twice`, "function now is not allowed", "non_replicated_deduplication_window is walhouse's", "for walhouse sink: layout"}}},
		"config check none":   {[]string{"config", "check"}, want{2, nil, []string{"needs a file"}}},
		"config missing":      {[]string{"config", "check", filepath.Join(dir, "nope.yaml")}, want{1, nil, []string{"no such file"}}},
		"completion no":       {[]string{"completion", "tcsh"}, want{2, nil, []string{`unknown shell "tcsh"`}}},
		"completion bash":     {[]string{"completion", "bash"}, want{0, []string{"complete -o default -F _walhouse walhouse", "--default-tenant"}, nil}},
		"completion zsh":      {[]string{"completion", "zsh"}, want{0, []string{"#compdef walhouse", "--tenant-column-for"}, nil}},
		"completion fish":     {[]string{"completion", "fish"}, want{0, []string{"__fish_seen_subcommand_from dlq", "-l dedup-addr -r"}, nil}},
		"failure exits 1":     {[]string{"chdb", "--path", dir, "--lib", filepath.Join(dir, "none.so")}, want{1, nil, []string{"walhouse chdb: -lib"}}},
		"config example":      {[]string{"config", "example"}, want{0, []string{"source:", "password_file:"}, nil}},
		"unknown before cmd":  {[]string{"--verbose", "sink"}, want{2, nil, []string{"unknown option --verbose"}}},
	}
	for name, cmd := range commands() {
		w := want{0, []string{"walhouse " + name + ": " + cmd.Summary, "Usage: walhouse [--config FILE] " + name, "Examples:"}, nil}
		for _, r := range cmd.Required {
			w.stdout = append(w.stdout, "--"+r+" string   (required)")
		}
		cases[name+" -h"] = struct {
			args []string
			want want
		}{[]string{name, "-h"}, w}
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			c := exec.Command(bin, tc.args...)
			c.Env = append(os.Environ(), "WALHOUSE_CONFIG=", "WALHOUSE_PG_URL=", "WALHOUSE_SOURCE_POSTGRES_URL=")
			c.Stdout, c.Stderr = &stdout, &stderr
			_ = c.Run()
			if got := c.ProcessState.ExitCode(); got != tc.want.code {
				t.Errorf("walhouse %q exited with %d, want %d\nstdout: %s\nstderr: %s", tc.args, got, tc.want.code, stdout.String(), stderr.String())
			}
			for _, s := range tc.want.stdout {
				if !strings.Contains(stdout.String(), s) {
					t.Errorf("stdout lacks %q:\n%s", s, stdout.String())
				}
			}
			for _, s := range tc.want.stderr {
				if !strings.Contains(stderr.String(), s) {
					t.Errorf("stderr lacks %q:\n%s", s, stderr.String())
				}
			}
			if tc.want.code == 2 && len(tc.args) > 0 && strings.Count(stderr.String(), "\n") > 8 {
				t.Errorf("a usage error printed %d lines; want a short message:\n%s", strings.Count(stderr.String(), "\n"), stderr.String())
			}
		})
	}
	t.Run("config example passes config check", func(t *testing.T) {
		ex, err := exec.Command(bin, "config", "example").Output()
		if err != nil {
			t.Fatal(err)
		}
		file := filepath.Join(dir, "example.yaml")
		if err := os.WriteFile(file, ex, 0o600); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(bin, "config", "check", file).CombinedOutput(); err != nil {
			t.Fatalf("config check of the example: %v\n%s", err, out)
		}
	})
	t.Run("completion scripts parse", func(t *testing.T) {
		for _, sh := range []string{"bash", "zsh", "fish"} {
			path, err := exec.LookPath(sh)
			if err != nil {
				t.Logf("%s is not installed; its script is not syntax-checked", sh)
				continue
			}
			script, err := exec.Command(bin, "completion", sh).Output()
			if err != nil {
				t.Fatal(err)
			}
			file := filepath.Join(dir, "completion."+sh)
			if err := os.WriteFile(file, script, 0o600); err != nil {
				t.Fatal(err)
			}
			if out, err := exec.Command(path, "-n", file).CombinedOutput(); err != nil {
				t.Errorf("%s -n on its completion script: %v\n%s", sh, err, out)
			}
		}
	})
}

// TestConfigKeysMatchFlags keeps the configuration schema and the flags
// together: every key names a flag of a command it applies to, and the
// environment variable its flag's help names.
func TestConfigKeysMatchFlags(t *testing.T) {
	sets := map[string]*flag.FlagSet{}
	cmds := commands()
	for name := range cmds {
		if fs := cmds.Flags(name); fs != nil {
			sets[name] = fs
		}
	}
	for _, s := range config.Schema() {
		found := false
		for name, fs := range sets {
			f := fs.Lookup(s.Flag)
			if f == nil || !s.AppliesTo(name) {
				continue
			}
			found = true
			if s.SecretEnv {
				continue
			}
			var help bytes.Buffer
			cmds.Help(&help, name)
			if want := "; env " + s.Env + "]"; !strings.Contains(strings.Join(strings.Fields(help.String()), " "), want) {
				t.Errorf("%s: the help of walhouse %s does not show [%s", s.Key, name, want)
			}
		}
		if !found {
			t.Errorf("%s: no command has the flag --%s", s.Key, s.Flag)
		}
	}
}

// TestServiceFlagsHaveKeys keeps the configuration file complete for the
// commands that run as services, deployed with one file: every flag of
// theirs is a key, or one of the flags below that only make sense on one
// command line.
func TestServiceFlagsHaveKeys(t *testing.T) {
	oneShot := map[string]string{
		"config":              "names the file itself",
		"no-create-slot":      "a choice for one start",
		"resnapshot":          "a copy asked for once",
		"accept-lost-records": "a loss accepted once, after a copy",
		"audit-hash":          "a tool: prints and exits",
		"hash-key":            "a tool: prints and exits",
		"new-key":             "a tool: prints and exits",
		"key-id":              "goes with --new-key",
		"key-tenant":          "goes with --new-key",
		"key-scopes":          "goes with --new-key",
		"cursor-secret":       "a secret on the command line; the file takes cursor_secret_file",
	}
	for _, name := range []string{"capture", "sink", "serve", "verify"} {
		commands().Flags(name).VisitAll(func(f *flag.Flag) {
			if _, ok := oneShot[f.Name]; ok {
				return
			}
			if !slices.ContainsFunc(config.Schema(), func(s config.Setting) bool { return s.Flag == f.Name && s.AppliesTo(name) }) {
				t.Errorf("walhouse %s --%s has no key in the configuration file (config.Config) and is not listed as one-shot here", name, f.Name)
			}
		})
	}
}

// -h shows no value of the environment (variables are read after the
// command line, not as defaults): neither a DSN's password nor a secret.
func TestHelpHidesPasswords(t *testing.T) {
	t.Setenv("WALHOUSE_PG_URL", "postgres://walhouse:s3cret-pg@db/app")
	t.Setenv("WALHOUSE_CLICKHOUSE_URL", "http://ch:8123/?user=u&password=s3cret-ch")
	t.Setenv("WALHOUSE_REDIS_ADDR", "rediss://walhouse:s3cret-redis@cache:6380")
	t.Setenv("WALHOUSE_REDIS_PASSWORD", "s3cret-env")
	t.Setenv("WALHOUSE_CURSOR_SECRET", "s3cret-cursor-0123456789")
	for _, args := range [][]string{{"capture"}, {"sink"}, {"serve"}, {"demo"}} {
		out := helpText(t, append(args, "-h"))
		if strings.Contains(out, "s3cret") {
			t.Errorf("walhouse %s -h shows a password:\n%s", args[0], out)
		}
	}
}

// helpText runs walhouse with args and returns the help it printed.
func helpText(t *testing.T, args []string) string {
	t.Helper()
	var out, errOut bytes.Buffer
	if code := run(args, &out, &errOut); code != 0 {
		t.Fatalf("walhouse %v exited with %d: %s", args, code, errOut.String())
	}
	return out.String()
}
