package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"

	"github.com/walhouse/walhouse/config"
)

// RunConfig is walhouse config: it prints the example configuration file or checks one: check
// exits 0 when the file is valid for every command, 1 with every problem
// listed when it is not.
func RunConfig(_ context.Context, inv *Invocation) error {
	if inv.PlainHelp() {
		return flag.ErrHelp
	}
	if len(inv.Args) == 0 {
		return Usagef("want a subcommand: example, check FILE, view COMMAND or reference")
	}
	switch sub, rest := inv.Args[0], inv.Args[1:]; sub {
	case "example":
		if len(rest) > 0 {
			return Usagef("config example takes no arguments")
		}
		_, err := io.WriteString(inv.Stdout, config.Example())
		return err
	case "check":
		path := inv.configPath
		switch {
		case len(rest) == 1:
			path = rest[0]
		case len(rest) > 1:
			return Usagef("config check takes one file")
		case path == "":
			return Usagef("config check needs a file: walhouse config check FILE")
		}
		c, err := config.Load(path)
		if err != nil {
			return err
		}
		// The values pass through every command's flags and checks, as
		// at start; a problem several commands share is listed once.
		var problems []error
		seen := map[string]bool{}
		for _, name := range slices.Sorted(maps.Keys(inv.cmds)) {
			fs := inv.cmds.Flags(name)
			if fs == nil {
				continue
			}
			sources, values := flagSources{}, map[string]string{}
			if err := applyConfig(fs, name, c, false, sources, values); err != nil {
				problems = append(problems, fmt.Errorf("for walhouse %s: %w", name, err))
			}
			for _, err := range checkValues(fs, name, sources, values) {
				if !seen[err.Error()] {
					seen[err.Error()] = true
					problems = append(problems, err)
				}
			}
		}
		if err := errors.Join(problems...); err != nil {
			return err
		}
		fmt.Fprintf(inv.Stdout, "%s: ok (%d keys)\n", path, len(c.Values()))
		return nil
	case "view":
		return viewConfig(inv, rest)
	case "reference":
		if len(rest) > 0 {
			return Usagef("config reference takes no arguments")
		}
		return inv.cmds.WriteReference(inv.Stdout)
	default:
		return Usagef("unknown subcommand %q: want example, check FILE, view COMMAND or reference", sub)
	}
}

// Flags returns the flags of command name, nil for a command without
// flags. The command is asked to describe them, not run.
func (cmds Commands) Flags(name string) *flag.FlagSet {
	cmd := cmds[name]
	if cmd.Plain {
		return nil
	}
	var got *flag.FlagSet
	inv := &Invocation{name: name, Stdout: io.Discard, Stderr: io.Discard, describe: func(fs *flag.FlagSet) { got = fs }, cmds: cmds}
	_ = cmd.Run(context.Background(), inv)
	return got
}
