package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"

	"github.com/walhouse/walhouse/config"
)

// runVersion prints the module version, the commit it was built from and
// the Go version, from the build information Go embeds in the binary.
func runVersion(_ context.Context, inv *invocation) error {
	if inv.plainHelp() {
		return flag.ErrHelp
	}
	if len(inv.args) > 0 {
		return usageErrorf("takes no arguments")
	}
	fmt.Fprint(inv.stdout, versionText())
	return nil
}

func versionText() string {
	version, commit, when, modified := "(unknown)", "", "", false
	goVersion := runtime.Version()
	if bi, ok := debug.ReadBuildInfo(); ok {
		version, goVersion = bi.Main.Version, bi.GoVersion
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				commit = s.Value
			case "vcs.time":
				when = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "walhouse %s\n", version)
	switch {
	case commit == "":
		b.WriteString("commit unknown (built without VCS stamping: go build -buildvcs=true in the repository records it)\n")
	case modified:
		fmt.Fprintf(&b, "commit %s (%s, with uncommitted changes)\n", commit, when)
	default:
		fmt.Fprintf(&b, "commit %s (%s)\n", commit, when)
	}
	fmt.Fprintf(&b, "%s %s/%s\n", goVersion, runtime.GOOS, runtime.GOARCH)
	return b.String()
}

// runConfig prints the example configuration file or checks one: check
// exits 0 when the file is valid for every command, 1 with every problem
// listed when it is not.
func runConfig(_ context.Context, inv *invocation) error {
	if inv.plainHelp() {
		return flag.ErrHelp
	}
	if len(inv.args) == 0 {
		return usageErrorf("want a subcommand: example or check FILE")
	}
	switch sub, rest := inv.args[0], inv.args[1:]; sub {
	case "example":
		if len(rest) > 0 {
			return usageErrorf("config example takes no arguments")
		}
		_, err := io.WriteString(inv.stdout, config.Example())
		return err
	case "check":
		path := inv.configPath
		switch {
		case len(rest) == 1:
			path = rest[0]
		case len(rest) > 1:
			return usageErrorf("config check takes one file")
		case path == "":
			return usageErrorf("config check needs a file: walhouse config check FILE")
		}
		c, err := config.Load(path)
		if err != nil {
			return err
		}
		// The values pass through every command's flags, as at start.
		var problems []error
		for _, name := range slices.Sorted(maps.Keys(commands())) {
			if fs := flagsOf(name); fs != nil {
				if err := applyConfig(fs, name, c, false); err != nil {
					problems = append(problems, fmt.Errorf("for walhouse %s: %w", name, err))
				}
			}
		}
		if err := errors.Join(problems...); err != nil {
			return err
		}
		fmt.Fprintf(inv.stdout, "%s: ok (%d keys)\n", path, len(c.Values()))
		return nil
	default:
		return usageErrorf("unknown subcommand %q: want example or check FILE", sub)
	}
}

// flagsOf returns the flags of command name, nil for a command without
// flags. The command is asked to describe them, not run.
func flagsOf(name string) *flag.FlagSet {
	cmd := commands()[name]
	if cmd.plain {
		return nil
	}
	var got *flag.FlagSet
	inv := &invocation{name: name, stdout: io.Discard, stderr: io.Discard, describe: func(fs *flag.FlagSet) { got = fs }}
	_ = cmd.run(context.Background(), inv)
	return got
}
