package main

import (
	"io"
	"os"

	"github.com/walhouse/walhouse/cli"
)

func commands() cli.Commands {
	return cli.Commands{
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
			Subcommands: []string{"list", "replay"},
			Run:         runDLQ,
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
			Subcommands: []string{"prune"},
			Required:    []string{"pg"}, Run: runKeys,
		},
		"apikey": {
			Summary: "create, list or revoke the query API's keys in serve's keys file", Usage: "create|list|revoke ID --keys FILE [flags]",
			Examples: []string{
				"walhouse apikey create --keys keys.json --tenant acme --scopes read,export --id acme-reporting",
				"walhouse apikey list --keys keys.json",
				"walhouse apikey revoke acme-reporting --keys keys.json",
			},
			Subcommands: []string{"create", "list", "revoke"},
			Run:         runAPIKey,
		},
		"erase": {
			Summary: "erase a data subject (GDPR) from ClickHouse once PostgreSQL no longer has it, and keep it erased; verify a manifest", Usage: "[verify FILE | public-key] --tenant T --subject-column C --subject V [flags]",
			Examples: []string{
				"walhouse erase --tenant acme --subject-column customer_id --subject 42 --out erasure-42.json",
				"walhouse erase verify erasure-42.json --public-key $(walhouse erase public-key)",
			},
			Subcommands: []string{"verify", "public-key"},
			Run:         runErase,
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
			Summary: "rebuild tables in the sorting key, partitions and column types of their layout, beside the old ones, then swap them, while the sinks keep loading", Usage: "TABLE... [--drop-old] [flags]",
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
			Examples:    []string{"walhouse config example > walhouse.yaml", "walhouse config check walhouse.yaml", "walhouse config view --config walhouse.yaml sink --max-batch 10000", "walhouse config reference > docs/configuration.md"},
			Subcommands: []string{"example", "check", "view", "reference"},
			Run:         cli.RunConfig, Plain: true,
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
			Subcommands: []string{"bash", "zsh", "fish"},
			Run:         cli.RunCompletion, Plain: true,
		},
	}
}

//go:generate sh -c "go run . config reference > ../../docs/configuration.md"

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run runs the walhouse command line args and returns its exit status.
func run(args []string, stdout, stderr io.Writer) int {
	return commands().Run(args, stdout, stderr)
}
