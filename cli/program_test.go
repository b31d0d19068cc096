package cli

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"strings"
	"testing"
)

// TestRunExitStatuses runs a table of two commands: the exit status of
// success, help, a failure and each kind of usage error, and what each
// prints where.
func TestRunExitStatuses(t *testing.T) {
	t.Setenv(configEnv, "")
	cmds := Commands{
		"greet": {Summary: "say hello", Usage: "--name N", Required: []string{"name"}, Run: func(_ context.Context, inv *Invocation) error {
			fs := flag.NewFlagSet("greet", flag.ContinueOnError)
			name := fs.String("name", "", "who to greet")
			fail := fs.Bool("fail", false, "fail after parsing")
			if err := inv.Parse(fs); err != nil {
				return err
			}
			if *fail {
				return errors.New("could not greet")
			}
			_, err := inv.Stdout.Write([]byte("hello " + *name + "\n"))
			return err
		}},
		"plain": {Summary: "take no flags", Plain: true, Run: func(_ context.Context, inv *Invocation) error {
			if inv.PlainHelp() {
				return flag.ErrHelp
			}
			return Usagef("plain takes nothing")
		}},
	}
	for _, tc := range []struct {
		args           []string
		code           int
		stdout, stderr string
	}{
		{[]string{"greet", "--name", "ada"}, ExitOK, "hello ada", ""},
		{[]string{"-h"}, ExitOK, "greet       say hello", ""},
		{[]string{"greet", "-h"}, ExitOK, "--name string   (required)", ""},
		{[]string{"help", "plain"}, ExitOK, "walhouse plain: take no flags", ""},
		{[]string{"greet", "--name", "ada", "--fail"}, ExitFailure, "", "walhouse greet: could not greet"},
		{[]string{}, ExitUsage, "", "Usage: walhouse"},
		{[]string{"gret"}, ExitUsage, "", `unknown command "gret"; did you mean "greet"?`},
		{[]string{"--bogus", "greet"}, ExitUsage, "", "unknown option --bogus before the command"},
		{[]string{"greet"}, ExitUsage, "", "--name is required"},
		{[]string{"greet", "--nme", "ada"}, ExitUsage, "", "unknown flag --nme; did you mean --name?"},
		{[]string{"greet", "--name", "ada", "--log-level", "loud"}, ExitUsage, "", `flag --log-level (key log.level): "loud" is not allowed`},
		{[]string{"greet", "--name", "ada", "extra"}, ExitUsage, "", "unexpected arguments"},
		{[]string{"plain"}, ExitUsage, "", "walhouse plain: plain takes nothing\nRun 'walhouse plain -h' for usage."},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := cmds.Run(tc.args, &stdout, &stderr); code != tc.code {
				t.Errorf("exit status %d, want %d\nstdout: %s\nstderr: %s", code, tc.code, stdout.String(), stderr.String())
			}
			if !strings.Contains(stdout.String(), tc.stdout) || !strings.Contains(stderr.String(), tc.stderr) {
				t.Errorf("stdout %q, want it to hold %q; stderr %q, want it to hold %q", stdout.String(), tc.stdout, stderr.String(), tc.stderr)
			}
		})
	}
}
