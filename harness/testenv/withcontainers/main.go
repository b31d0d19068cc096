// Command withcontainers runs a command against walhouse's services as
// containers: it starts PostgreSQL, Kafka, a ClickHouse server and Valkey
// (testenv.StartContainers; a Docker engine is needed), runs the command
// with the WALHOUSE_* variables of .local/env pointing at them, and
// removes the containers when the command ends. It is how
// `WALHOUSE_SERVICES=containers make demo` (and the benchmarks) run.
//
//	go run ./harness/testenv/withcontainers [-v] [-env-file FILE] [--] [command [args...]]
//
// Without a command it writes the variables (to -env-file, and to stdout)
// and keeps the containers until interrupted, for use from another shell.
// Its exit status is the command's; 1 when the containers do not start.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	tclog "github.com/testcontainers/testcontainers-go/log"

	"github.com/walhouse/walhouse/harness/testenv"
)

func main() {
	envFile := flag.String("env-file", "", "also write the variables to `FILE` as export NAME=value lines, for . FILE in another shell")
	verbose := flag.Bool("v", false, "print what testcontainers does (pulls, creates, waits)")
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: withcontainers [-v] [-env-file FILE] [--] [command [args...]]")
		flag.PrintDefaults()
	}
	flag.Parse()
	if !*verbose {
		tclog.SetDefault(tclog.NewNoopLogger()) // its errors still come back to run
	}
	code, err := run(*envFile, flag.Args())
	if err != nil {
		fmt.Fprintln(os.Stderr, "withcontainers:", err)
	}
	os.Exit(code)
}

func run(envFile string, command []string) (int, error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	fmt.Fprintln(os.Stderr, "==> starting PostgreSQL, Kafka, ClickHouse and Valkey as containers (the first run pulls their images)")
	c, err := testenv.StartContainers(ctx)
	if err != nil {
		return 1, err
	}
	defer func() {
		fmt.Fprintln(os.Stderr, "==> removing the containers")
		tctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := c.Terminate(tctx); err != nil {
			fmt.Fprintln(os.Stderr, "withcontainers:", err)
		}
	}()
	env := c.Env()
	vars := env.Vars()
	if envFile != "" {
		var b strings.Builder
		b.WriteString("# Written by harness/testenv/withcontainers; valid while it runs.\n")
		for _, v := range vars {
			b.WriteString("export " + v + "\n")
		}
		if err := os.WriteFile(envFile, []byte(b.String()), 0o600); err != nil {
			return 1, fmt.Errorf("write %s: %w", envFile, err)
		}
		defer os.Remove(envFile)
	}
	if len(command) == 0 {
		for _, v := range vars {
			fmt.Println("export " + v)
		}
		fmt.Fprintln(os.Stderr, "==> containers ready; press Ctrl-C to remove them")
		<-ctx.Done()
		return 0, nil
	}
	cmd := exec.Command(command[0], command[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = childEnviron(env)
	if err := cmd.Start(); err != nil {
		return 1, fmt.Errorf("start %s: %w", command[0], err)
	}
	// Ctrl-C reaches the command from the terminal too; SIGTERM is passed
	// on. Either way the containers go once the command has ended.
	go func() {
		<-ctx.Done()
		_ = cmd.Process.Signal(syscall.SIGTERM)
	}()
	err = cmd.Wait()
	if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
		return max(ee.ExitCode(), 1), nil
	}
	if err != nil {
		return 1, fmt.Errorf("%s: %w", command[0], err)
	}
	return 0, nil
}

// childEnviron is the command's environment: this process's with the
// containers' services in place of any others (a sourced .local/env would
// otherwise fill in the listeners the containers lack), and without
// WALHOUSE_SERVICES, so that a test binary run under this command does not
// start a set of its own.
func childEnviron(env testenv.Env) []string {
	var out []string
	for _, kv := range env.Environ(os.Environ()) {
		if !strings.HasPrefix(kv, "WALHOUSE_SERVICES=") {
			out = append(out, kv)
		}
	}
	return out
}
