package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sort"
	"syscall"

	"github.com/walhouse/walhouse/internal/redact"
)

// command is one subcommand of the walhouse binary.
type command struct {
	summary string
	run     func(ctx context.Context, args []string) error
}

func commands() map[string]command {
	return map[string]command{
		"capture": {"stream PostgreSQL changes (pgoutput) into Kafka", runCapture},
		"sink":    {"load records from Kafka into ClickHouse", runSink},
		"dlq":     {"list or replay the records in the dead-letter topic", runDLQ},
		"serve":   {"serve the query API: tenant reads with FINAL, GDPR exports, lag, metrics and status page", runServe},
		"export":  {"export every row of one data subject (GDPR) to a file, with a manifest", runExport},
		"demo":    {"run capture and sink on a generated multi-tenant workload and compare both sides", runDemo},
		"chdb":    {"serve the embedded ClickHouse engine (libchdb.so) over ClickHouse's HTTP interface", runChdb},
	}
}

func main() {
	os.Exit(run(os.Args[1:], os.Stderr))
}

func run(args []string, stderr io.Writer) int {
	cmds := commands()
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr, cmds)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	cmd, ok := cmds[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "walhouse: unknown command %q\n\n", args[0])
		usage(stderr, cmds)
		return 2
	}
	// Every log line and the final error pass through redact: a DSN with a
	// password may reach either, quoted by a driver's error.
	slog.SetDefault(slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: logLevel(), ReplaceAttr: redact.SlogAttr})))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := cmd.run(ctx, args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		if errors.Is(err, context.Canceled) && ctx.Err() != nil {
			return 0
		}
		fmt.Fprintf(stderr, "walhouse %s: %v\n", args[0], redact.Error(err))
		return 1
	}
	return 0
}

func usage(w io.Writer, cmds map[string]command) {
	fmt.Fprintln(w, "Usage: walhouse <command> [flags]\n\nCommands:")
	names := make([]string, 0, len(cmds))
	for n := range cmds {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, cmds[n].summary)
	}
	fmt.Fprintln(w, "\nRun 'walhouse <command> -h' for the flags of one command.")
}

func logLevel() slog.Level {
	var l slog.Level
	if err := l.UnmarshalText([]byte(os.Getenv("WALHOUSE_LOG_LEVEL"))); err != nil {
		return slog.LevelInfo
	}
	return l
}
