package cli

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

// Command is one subcommand of the walhouse binary.
type Command struct {
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
	// Subcommands are the words that may follow the command (list and
	// replay of dlq), for completion.
	Subcommands []string
	// Plain commands take no flags (version, config, completion): help and
	// completion do not ask them for a flag set.
	Plain bool
}

// Exit statuses: 0 for success and for help, 2 for a usage error (a flag,
// an argument or the configuration file), 1 for a failure.
const (
	ExitOK      = 0
	ExitFailure = 1
	ExitUsage   = 2
)

// Commands are the subcommands of the binary by name.
type Commands map[string]Command

// Run runs the walhouse command line args (without the program's name)
// and returns its exit status. It sets slog's default logger, and ends the
// command's context on SIGINT or SIGTERM.
func (cmds Commands) Run(args []string, stdout, stderr io.Writer) int {
	// The options before the command: --config, --version, -h.
	configPath := os.Getenv(configEnv)
	for len(args) > 0 && strings.HasPrefix(args[0], "-") {
		name, value, hasValue := strings.Cut(strings.TrimLeft(args[0], "-"), "=")
		switch name {
		case "h", "help":
			usage(stdout, cmds)
			return ExitOK
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
		return ExitUsage
	}
	name := args[0]
	if name == "help" {
		if len(args) < 2 {
			usage(stdout, cmds)
			return ExitOK
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
		return ExitUsage
	}
	// Every log line and the final error pass through redact: a DSN with a
	// password may reach either, quoted by a driver's error.
	slog.SetDefault(newLogger(stderr, slog.LevelInfo, "text"))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	inv := &Invocation{name: name, Args: args[1:], configPath: configPath, Stdout: stdout, Stderr: stderr, cmds: cmds}
	err := cmd.Run(ctx, inv)
	var uerr *UsageError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return ExitOK
	case errors.Is(err, context.Canceled) && ctx.Err() != nil:
		return ExitOK
	case errors.As(err, &uerr):
		return usageFailed(stderr, name, uerr.Err)
	}
	fmt.Fprintf(stderr, "walhouse %s: %v\n", name, redact.Error(err))
	return ExitFailure
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
	return ExitUsage
}

func usage(w io.Writer, cmds Commands) {
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

// Help writes the help of command name, with its flags, as -h prints it.
func (cmds Commands) Help(w io.Writer, name string) {
	(&Invocation{name: name, cmds: cmds}).help(w, cmds.Flags(name))
}
