package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	"github.com/walhouse/walhouse/config"
	"github.com/walhouse/walhouse/internal/redact"
)

// command is one subcommand of the walhouse binary.
type command struct {
	// Summary is the command's line in the list of commands.
	Summary string
	// Usage is what follows "walhouse <name>" in the usage line.
	Usage string
	// Examples are shown by -h.
	Examples []string
	// Required are the flags that must have a value, from the command
	// line, the environment or the configuration file.
	Required []string
	// Run runs the command; it defines its flags and calls inv.Parse.
	Run func(ctx context.Context, inv *Invocation) error
	// Plain commands take no flags (version, config, completion): help and
	// completion do not ask them for a flag set.
	Plain bool
}

func commands() map[string]command {
	return map[string]command{
		"capture": {
			Summary: "stream PostgreSQL changes (pgoutput) into Kafka", Usage: "--pg URL [flags]",
			Examples: []string{
				"walhouse capture --pg postgres://walhouse@db/app --kafka broker:9092 --tables public.orders,public.customers",
				"walhouse capture --pg postgres://walhouse@db/app --tables public.countries --default-tenant shared",
				"walhouse capture --pg postgres://walhouse@standby/app --primary-url postgres://walhouse@primary/app --tables public.orders",
				"walhouse capture --pg 'postgres://walhouse@db1,db2/app?target_session_attrs=read-write' --failover-slot --reconnect-timeout 5m",
				"walhouse --config walhouse.yaml capture",
			},
			Required: []string{"pg"}, Run: runCapture,
		},
		"sink": {
			Summary: "load records from Kafka into ClickHouse", Usage: "[flags]",
			Examples: []string{
				"walhouse sink --kafka broker:9092 --clickhouse clickhouse://ch:9000 --dedup-addr valkey:6379",
				"walhouse --config walhouse.yaml sink --metrics-addr :9464",
			},
			Run: runSink,
		},
		"dlq": {
			Summary: "list or replay the records in the dead-letter topic", Usage: "list|replay [flags]",
			Examples: []string{
				"walhouse dlq list --kafka broker:9092 --topic-prefix walhouse > dead-letters.jsonl",
				"walhouse dlq replay --kafka broker:9092 --topic-prefix walhouse",
			},
			Run: runDLQ,
		},
		"serve": {
			Summary: "serve the query API: tenant reads with FINAL, GDPR exports, lag, metrics and status page", Usage: "--keys FILE [flags]",
			Examples: []string{
				"walhouse serve --clickhouse clickhouse://ch:9000 --keys keys.json --cursor-secret-file /run/secrets/cursor",
				"walhouse apikey create --keys keys.json --tenant acme --scopes read,export",
			},
			Run: runServe,
		},
		"export": {
			Summary: "export every row of one data subject (GDPR) to a file, with a manifest", Usage: "--tenant T --subject-column C --subject V --out FILE [flags]",
			Examples: []string{
				"walhouse export --tenant acme --subject-column customer_id --subject 42 --out subject-42.parquet",
			},
			Required: []string{"tenant", "subject-column", "subject", "out"}, Run: runExport,
		},
		"keys": {
			Summary: "prune Layer 1's idempotency keys older than the retention period", Usage: "prune [--retention-days N] [--daily] [flags]",
			Examples: []string{
				"walhouse keys prune --pg postgres://walhouse_pruner@db/app   # a login in role walhouse_idempotency_pruner",
				"WALHOUSE_IDEMPOTENCY_RETENTION_DAYS=7 walhouse keys prune --batch-size 5000",
				"walhouse keys prune --daily --daily-at 03:00   # the daily job, as a long-running process",
			},
			Required: []string{"pg"}, Run: runKeys,
		},
		"apikey": {
			Summary: "create, list or revoke the query API's keys in serve's keys file", Usage: "create|list|revoke ID --keys FILE [flags]",
			Examples: []string{
				"walhouse apikey create --keys keys.json --tenant acme --scopes read,export --id acme-reporting",
				"walhouse apikey list --keys keys.json",
				"walhouse apikey revoke acme-reporting --keys keys.json",
			},
			Run: runAPIKey,
		},
		"erase": {
			Summary: "erase a data subject (GDPR) from ClickHouse once PostgreSQL no longer has it, and keep it erased; verify a manifest", Usage: "[verify FILE | public-key] --tenant T --subject-column C --subject V [flags]",
			Examples: []string{
				"walhouse erase --tenant acme --subject-column customer_id --subject 42 --out erasure-42.json",
				"walhouse erase verify erasure-42.json --public-key $(walhouse erase public-key)",
			},
			Run: runErase,
		},
		"cleanup": {
			Summary: "remove tombstones and superseded versions from partitions old enough that no older version can arrive", Usage: "[--min-age D] [flags]",
			Examples: []string{
				"walhouse cleanup --clickhouse clickhouse://ch:9000 --min-age 192h",
				"walhouse sink --cleanup-interval 24h --cleanup-min-age 192h   # scheduled by the sink",
			},
			Run: runCleanup,
		},
		"relayout": {
			Summary: "rebuild tables in the sorting key and partitions of their layout, beside the old ones, then swap them, while the sinks keep loading", Usage: "TABLE... [--drop-old] [flags]",
			Examples: []string{
				"walhouse --config walhouse.yaml relayout public.orders",
				"walhouse --config walhouse.yaml relayout public.orders public.items --drop-old",
			},
			Run: runRelayout,
		},
		"verify": {
			Summary: "compare PostgreSQL with ClickHouse FINAL row by row, report (and with --repair reload) the rows that differ", Usage: "--tables T [--every D] [--report FILE] [--repair] [flags]",
			Examples: []string{
				"walhouse verify --pg postgres://walhouse@standby/app --clickhouse clickhouse://ch:9000 --tables public.orders --report verify.json",
				"walhouse verify --pg postgres://walhouse@db/app --tables public.orders --repair --report verify.json",
				"walhouse --config walhouse.yaml verify --every 1h --metrics-addr :9466",
			},
			Required: []string{"pg"}, Run: runVerify,
		},
		"demo": {
			Summary: "run capture, sink (Layer 2 with --dedup-addr) and the query API on a generated multi-tenant workload, compare both sides and read a write back with its consistency token", Usage: "[flags]",
			Examples: []string{"make demo          # starts the local services, then runs walhouse demo", "make demo KEEP=1   # the same, then keeps everything running until Ctrl-C (--keep)"},
			Run:      runDemo,
		},
		"chdb": {
			Summary: "serve the embedded ClickHouse engine (libchdb.so) over ClickHouse's HTTP interface", Usage: "--path DIR [flags]",
			Examples: []string{"walhouse chdb --lib .local/chdb/libchdb.so --path .local/chdb/data --listen 127.0.0.1:8123"},
			Required: []string{"path"}, Run: runChdb,
		},
		"config": {
			Summary: "print an example configuration file, check one, show a command's effective configuration, or the reference of every key", Usage: "example | check FILE | view [--config FILE] COMMAND [flags] | reference",
			Examples: []string{"walhouse config example > walhouse.yaml", "walhouse config check walhouse.yaml", "walhouse config view --config walhouse.yaml sink --max-batch 10000", "walhouse config reference > docs/configuration.md"},
			Run:      runConfig, Plain: true,
		},
		"version": {
			Summary: "print walhouse's version, commit, commit date and Go version", Usage: "",
			Examples: []string{"walhouse version", "walhouse --version"},
			Run:      runVersion, Plain: true,
		},
		"completion": {
			Summary: "print a shell completion script", Usage: "bash|zsh|fish",
			Examples: []string{
				"source <(walhouse completion bash)",
				"walhouse completion zsh > \"${fpath[1]}/_walhouse\"",
				"walhouse completion fish > ~/.config/fish/completions/walhouse.fish",
			},
			Run: runCompletion, Plain: true,
		},
	}
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// Exit statuses: 0 for success and for help, 2 for a usage error (a flag,
// an argument or the configuration file), 1 for a failure.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

// run runs the walhouse command line args and returns its exit status.
func run(args []string, stdout, stderr io.Writer) int {
	cmds := commands()
	// The options before the command: --config, --version, -h.
	configPath := os.Getenv(configEnv)
	for len(args) > 0 && strings.HasPrefix(args[0], "-") {
		name, value, hasValue := strings.Cut(strings.TrimLeft(args[0], "-"), "=")
		switch name {
		case "h", "help":
			usage(stdout, cmds)
			return exitOK
		case "version":
			args = []string{"version"}
			continue
		case "config":
			if !hasValue {
				if len(args) < 2 {
					return usageFailed(stderr, "", errors.New("--config needs a file"))
				}
				value, args = args[1], args[1:]
			}
			configPath = value
			args = args[1:]
			continue
		}
		return usageFailed(stderr, "", fmt.Errorf("unknown option %s before the command (only --config, --version and -h go there)", args[0]))
	}
	if len(args) == 0 {
		usage(stderr, cmds)
		return exitUsage
	}
	name := args[0]
	if name == "help" {
		if len(args) < 2 {
			usage(stdout, cmds)
			return exitOK
		}
		name, args = args[1], []string{args[1], "-h"}
	}
	cmd, ok := cmds[name]
	if !ok {
		msg := fmt.Sprintf("unknown command %q", name)
		if s := config.Closest(name, slices.Sorted(maps.Keys(cmds))); s != "" {
			msg += fmt.Sprintf("; did you mean %q?", s)
		}
		fmt.Fprintf(stderr, "walhouse: %s\nRun 'walhouse -h' for the commands.\n", msg)
		return exitUsage
	}
	// Every log line and the final error pass through redact: a DSN with a
	// password may reach either, quoted by a driver's error.
	slog.SetDefault(newLogger(stderr, slog.LevelInfo, "text"))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	inv := &Invocation{name: name, Args: args[1:], configPath: configPath, Stdout: stdout, Stderr: stderr}
	err := cmd.Run(ctx, inv)
	var uerr *UsageError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return exitOK
	case errors.Is(err, context.Canceled) && ctx.Err() != nil:
		return exitOK
	case errors.As(err, &uerr):
		return usageFailed(stderr, name, uerr.err)
	}
	fmt.Fprintf(stderr, "walhouse %s: %v\n", name, redact.Error(err))
	return exitFailure
}

// usageFailed prints a usage error briefly, with where to read more.
func usageFailed(w io.Writer, name string, err error) int {
	prog := strings.TrimSpace("walhouse " + name)
	msg := redact.Error(err).Error()
	if strings.Contains(msg, "\n") {
		msg = "\n  " + strings.ReplaceAll(msg, "\n", "\n  ")
	} else {
		msg = " " + msg
	}
	fmt.Fprintf(w, "%s:%s\nRun '%s -h' for usage.\n", prog, msg, prog)
	return exitUsage
}

func usage(w io.Writer, cmds map[string]command) {
	fmt.Fprintln(w, "walhouse streams PostgreSQL changes into ClickHouse.")
	fmt.Fprintln(w, "\nUsage: walhouse [--config FILE] <command> [flags]\n\nCommands:")
	for _, n := range slices.Sorted(maps.Keys(cmds)) {
		fmt.Fprintf(w, "  %-11s %s\n", n, cmds[n].Summary)
	}
	fmt.Fprintln(w, "\nOptions before the command:")
	fmt.Fprintln(w, "  --config FILE   YAML configuration file (env WALHOUSE_CONFIG; `walhouse config example` prints one);")
	fmt.Fprintln(w, "                  flags override environment variables, which override the file")
	fmt.Fprintln(w, "  --version       print the version and exit")
	fmt.Fprintln(w, "\nRun 'walhouse <command> -h' for the flags and examples of one command.")
	fmt.Fprintln(w, "Exit status: 0 success or help, 1 failure, 2 usage error (a flag, an argument, the configuration file).")
}
