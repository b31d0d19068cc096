package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/walhouse/walhouse/internal/redact"
)

// viewConfig prints the effective configuration of a command run with
// args (walhouse config view [--config FILE] <command> [flags]): every
// flag with its key, its value and where the value came from, after the
// same parsing and checks as a start, without connecting to anything.
// Passwords in URLs are masked; a secret is never shown, only where it
// would be read.
func viewConfig(inv *Invocation, args []string) error {
	configPath := inv.configPath
	for len(args) > 0 && strings.HasPrefix(args[0], "-") {
		name, value, hasValue := strings.Cut(strings.TrimLeft(args[0], "-"), "=")
		if name != "config" {
			return Usagef("config view: want [--config FILE] <command> [flags], not %s", args[0])
		}
		if !hasValue {
			if len(args) < 2 {
				return Usagef("--config needs a file")
			}
			value, args = args[1], args[1:]
		}
		configPath, args = value, args[1:]
	}
	if len(args) == 0 {
		return Usagef("config view needs a command: walhouse config view sink [flags]")
	}
	name := args[0]
	cmd, ok := inv.cmds[name]
	if !ok || cmd.Plain {
		return Usagef("config view: %q is not a command with flags", name)
	}
	var view string
	sub := &Invocation{name: name, Args: args[1:], configPath: configPath, Stdout: inv.Stdout, Stderr: inv.Stderr, cmds: inv.cmds}
	sub.parsed = func(fs *flag.FlagSet) { view = formatView(name, fs, sub.sources) }
	err := cmd.Run(context.Background(), sub)
	if !errors.Is(err, errDescribed) {
		if err == nil {
			err = fmt.Errorf("walhouse %s ran instead of showing its configuration", name)
		}
		return err
	}
	_, err = io.WriteString(inv.Stdout, view)
	return err
}

// formatView lays out the flags of fs with their keys, values and sources.
func formatView(cmd string, fs *flag.FlagSet, sources flagSources) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# walhouse %s: effective configuration (a flag beats its variable, which beats the file, which beats the default)\n", cmd)
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "FLAG\tKEY\tVALUE\tSOURCE")
	keys := configKeys(cmd)
	fs.VisitAll(func(f *flag.Flag) {
		if f.Name == "config" {
			return
		}
		value := shownValue(f)
		source := sources[f.Name]
		if source == "" {
			source = "default"
		}
		if sf, ok := f.Value.(*secretFlag); ok && sf.file != nil && *sf.file == "" && sf.env != nil {
			if _, name, set := lookupEnv(*sf.env); set {
				value, source = "(secret)", "env "+name
			}
		}
		key := keys[f.Name]
		if key == "" {
			key = "-"
		}
		fmt.Fprintf(tw, "--%s\t%s\t%s\t%s\n", f.Name, key, value, source)
	})
	_ = tw.Flush()
	return b.String()
}

// shownValue is a flag's value as config view shows it: quoted, with
// passwords masked, and a secret given on the command line itself hidden.
func shownValue(f *flag.Flag) string {
	v := f.Value.String()
	if v != "" && strings.Contains(f.Name, "secret") && !strings.HasSuffix(f.Name, "-file") {
		return redact.Mask
	}
	return fmt.Sprintf("%q", redact.String(v))
}
