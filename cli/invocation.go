package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"

	"github.com/walhouse/walhouse/config"
	"github.com/walhouse/walhouse/internal/redact"
)

// The command line stays on the standard flag package. Each command
// defines its flags in its own run function, with defaults that name their
// environment variables; Invocation.Parse adds what every command shares
// (--config, --log-level, --log-format), parses, fills in the flags the
// command line and the environment left alone from the configuration file,
// and checks the required ones, so every value passes through its flag
// whatever its source. A CLI library (cobra, urfave/cli) would bring help
// and completion, but also pflag's parsing, which rejects the single-dash
// long flags (-path, -lib, -new-key) that scripts and docs use; help,
// exit codes and completion are small here because they are generated
// from the same flag sets.

// Invocation is one run of a command: its arguments, the configuration
// file named before it (or by WALHOUSE_CONFIG), and where it writes.
type Invocation struct {
	name string
	// Args are the arguments after the command's name; a command takes
	// its subcommand and positional arguments off the front before Parse.
	Args       []string
	configPath string
	// Stdout and Stderr are where the command writes its output and its
	// messages.
	Stdout, Stderr io.Writer
	// sources are where the flags got their values, once parsed.
	sources flagSources
	// parsed, when set, receives the command's flags once parsed and
	// checked, instead of the command running (walhouse config view).
	parsed func(*flag.FlagSet)
	// cmds are the binary's commands: help, config view and completion
	// read them.
	cmds Commands
	// describe, when set, receives the command's flags instead of the
	// command running: help and completion learn the flags this way.
	describe func(*flag.FlagSet)
}

// errDescribed ends a command run only to describe its flags.
var errDescribed = errors.New("flags described")

// UsageError is a mistake in how walhouse was called (a flag, an argument,
// the configuration file): Run prints it briefly, with a pointer to -h, and
// exits with ExitUsage.
type UsageError struct{ Err error }

// Error returns the mistake's message.
func (e *UsageError) Error() string { return e.Err.Error() }

// Unwrap returns the mistake itself.
func (e *UsageError) Unwrap() error { return e.Err }

// Usage marks err as a usage error (UsageError).
func Usage(err error) error { return &UsageError{err} }

// Usagef is Usage of an error formatted as by fmt.Errorf.
func Usagef(format string, a ...any) error {
	return &UsageError{fmt.Errorf(format, a...)}
}

// Subcommand takes the subcommand (list in `walhouse dlq list`) off the
// front of inv's arguments, so that the flags after it parse, and returns
// it; "" when the arguments start with a flag or there are none. Commands check it
// after parse, so that -h works without one.
func (inv *Invocation) Subcommand() string {
	if len(inv.Args) == 0 || strings.HasPrefix(inv.Args[0], "-") {
		return ""
	}
	sub := inv.Args[0]
	inv.Args = inv.Args[1:]
	return sub
}

// Parse registers the common flags on fs, parses the command line, applies
// the configuration file and sets up logging. It returns flag.ErrHelp
// after printing help for -h, and a *UsageError for every mistake.
func (inv *Invocation) Parse(fs *flag.FlagSet) error {
	configPath := fs.String("config", inv.configPath, "YAML configuration file; flags and environment variables override its values (env WALHOUSE_CONFIG; walhouse config example prints one)")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn or error")
	logFormat := fs.String("log-format", "text", "log format: text or json")
	// Defaults taken from the environment may be DSNs with a password:
	// -h shows them redacted.
	fs.VisitAll(func(f *flag.Flag) { f.DefValue = redact.String(f.DefValue) })
	// Parse errors are returned and printed briefly; help only for -h.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	if inv.describe != nil {
		inv.describe(fs)
		return errDescribed
	}
	// A value a flag refuses does not stop the parse: every problem is
	// reported at once, after the environment and the file.
	badValues := lenient(fs)
	err := fs.Parse(inv.Args)
	unwrapLenient(fs)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			inv.help(inv.Stdout, fs)
			return err
		}
		if name, ok := strings.CutPrefix(err.Error(), "flag provided but not defined: "); ok {
			name = strings.TrimLeft(name, "-")
			var names []string
			fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
			if s := config.Closest(name, names); s != "" {
				return Usagef("unknown flag --%s; did you mean --%s?", name, s)
			}
			return Usagef("unknown flag --%s", name)
		}
		return &UsageError{err}
	}
	if fs.NArg() > 0 {
		return Usagef("unexpected arguments %q: every setting is a --flag", fs.Args())
	}
	inv.sources = flagSources{}
	fs.Visit(func(f *flag.Flag) {
		inv.sources[f.Name] = "flag --" + f.Name
		if r, ok := f.Value.(*renamedFlag); ok {
			inv.sources[r.current] = "flag --" + f.Name + " (deprecated name)"
		}
	})
	values := map[string]string{}
	var problems []error
	keys := keySettings(inv.name)
	for _, b := range *badValues {
		if s, ok := keys[b.flag]; ok && len(config.Check(map[string]string{s.Key: b.value})) > 0 {
			values[s.Key] = b.value // config.Check says what is wrong with it
			continue
		}
		typ, _ := flag.UnquoteUsage(fs.Lookup(b.flag))
		if bf, ok := fs.Lookup(b.flag).Value.(interface{ IsBoolFlag() bool }); ok && bf.IsBoolFlag() {
			typ = "boolean (true, false, 1, 0, t, f)"
		}
		problems = append(problems, fmt.Errorf("flag --%s: %q is not a valid %s (%w)", b.flag, b.value, typ, b.err))
	}
	envProblems, deprecated := applyEnv(fs, inv.name, inv.sources, values)
	problems = append(problems, envProblems...)
	if *configPath != "" {
		c, err := config.Load(*configPath)
		if err != nil {
			return &UsageError{err}
		}
		if err := applyConfig(fs, inv.name, c, true, inv.sources, values); err != nil {
			return &UsageError{fmt.Errorf("configuration file %s: %w", *configPath, err)}
		}
	}
	problems = append(problems, checkValues(fs, inv.name, inv.sources, values)...)
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil && !slices.ContainsFunc(problems, func(e error) bool { return strings.Contains(e.Error(), "key log.level") }) {
		problems = append(problems, fmt.Errorf("--log-level %q: want debug, info, warn or error", *logLevel))
	}
	for _, name := range inv.cmds[inv.name].Required {
		if fs.Lookup(name).Value.String() == "" {
			problems = append(problems, fmt.Errorf("--%s is required%s", name, OtherSources(inv.name, fs.Lookup(name))))
		}
	}
	if err := errors.Join(problems...); err != nil {
		return &UsageError{err}
	}
	slog.SetDefault(newLogger(inv.Stderr, level, *logFormat))
	for _, d := range deprecated {
		deprecatedEnv(d[0], d[1])
	}
	if *configPath != "" {
		slog.Debug("read the configuration file", "path", *configPath)
	}
	if inv.parsed != nil {
		inv.parsed(fs)
		return errDescribed
	}
	return nil
}

// OtherSources names where else a flag's value may come from.
func OtherSources(cmd string, f *flag.Flag) string {
	var alt []string
	if s, ok := keySettings(cmd)[f.Name]; ok {
		alt = append(alt, "env "+s.Env)
	}
	if keys := configKeys(cmd)[f.Name]; keys != "" {
		alt = append(alt, "key "+keys+" of the configuration file")
	}
	if len(alt) == 0 {
		return ""
	}
	return " (or " + strings.Join(alt, ", or ") + ")"
}

// applyConfig gives each flag of fs that the command line and the
// environment left alone (those in sources) the configuration file's
// value: flags > environment > file > defaults, recording the file as the
// source and the values by key. secrets says whether to check that the
// variables a …_env key names are set (config check, run elsewhere, does
// not). It returns every problem at once.
func applyConfig(fs *flag.FlagSet, cmd string, c *config.Config, secrets bool, sources flagSources, values map[string]string) error {
	var problems []error
	for _, v := range c.Values() {
		f := fs.Lookup(v.Flag)
		if f == nil || !v.AppliesTo(cmd) {
			continue
		}
		if _, set := sources[v.Flag]; set {
			continue
		}
		if v.SecretEnv {
			sf, ok := f.Value.(*secretFlag)
			if !ok {
				problems = append(problems, fmt.Errorf("%s: --%s takes no secret from an environment variable", v.Key, v.Flag))
				continue
			}
			if secrets && os.Getenv(v.Args[0]) == "" {
				problems = append(problems, fmt.Errorf("%s (line %d): the environment variable %s is not set", v.Key, v.Line, v.Args[0]))
			}
			sf.useEnv(v.Args[0])
			continue
		}
		if v.SecretVar != "" {
			// The secret itself in its variable beats a file named by
			// the configuration file.
			if _, _, set := lookupEnv(append([]string{v.SecretVar}, v.OldSecretVar...)); set {
				continue
			}
		}
		sources[v.Flag] = fmt.Sprintf("file %s (line %d)", v.Key, v.Line)
		values[v.Key] = strings.Join(v.Args, ",")
		for _, a := range v.Args {
			if err := fs.Set(v.Flag, a); err != nil {
				problems = append(problems, fmt.Errorf("%s (line %d): %w", v.Key, v.Line, err))
			}
		}
	}
	return errors.Join(problems...)
}

// configKeys maps each flag of cmd to the configuration keys that set it.
func configKeys(cmd string) map[string]string {
	out := map[string]string{}
	for _, s := range config.Schema() {
		if !s.AppliesTo(cmd) {
			continue
		}
		if k := out[s.Flag]; k != "" {
			out[s.Flag] = k + " or " + s.Key[strings.LastIndex(s.Key, ".")+1:]
			continue
		}
		out[s.Flag] = s.Key
	}
	return out
}

// help prints the command's description, usage, examples and flags.
func (inv *Invocation) help(w io.Writer, fs *flag.FlagSet) {
	cmd := inv.cmds[inv.name]
	fmt.Fprintf(w, "walhouse %s: %s\n\nUsage: walhouse [--config FILE] %s %s\n", inv.name, cmd.Summary, inv.name, cmd.Usage)
	if len(cmd.Examples) > 0 {
		fmt.Fprintln(w, "\nExamples:")
		for _, e := range cmd.Examples {
			fmt.Fprintln(w, "  "+e)
		}
	}
	if fs == nil {
		return
	}
	keys := configKeys(inv.name)
	settings := keySettings(inv.name)
	fmt.Fprintln(w, "\nFlags (the configuration file's key and the environment variable in [brackets]; a flag beats its variable, which beats the file):")
	fs.VisitAll(func(f *flag.Flag) {
		typ, usage := flag.UnquoteUsage(f)
		switch f.Value.(type) {
		case *ListFlag:
			typ = "list"
		case *secretFlag:
			typ = "file"
		}
		line := "  --" + f.Name
		if typ != "" {
			line += " " + typ
		}
		if slices.Contains(cmd.Required, f.Name) {
			line += "   (required)"
		}
		fmt.Fprintln(w, line)
		if f.DefValue != "" && f.DefValue != "0" && f.DefValue != "false" && f.DefValue != "[]" {
			if typ == "string" {
				usage += fmt.Sprintf(" (default %q)", f.DefValue)
			} else {
				usage += fmt.Sprintf(" (default %s)", f.DefValue)
			}
		}
		if k := keys[f.Name]; k != "" {
			usage += " [" + k
			if s, ok := settings[f.Name]; ok {
				usage += "; env " + s.Env
			}
			usage += "]"
		}
		fmt.Fprintln(w, wrap(usage, "      ", 100))
	})
	fmt.Fprintf(w, "\nExit status: 0 success or help, 1 failure, 2 usage error.\n")
}

// PlainHelp prints the help of a command without flags when its
// arguments ask for it, and reports whether they did.
func (inv *Invocation) PlainHelp() bool {
	if !slices.ContainsFunc(inv.Args, func(a string) bool { return a == "-h" || a == "--help" || a == "-help" }) {
		return false
	}
	inv.help(inv.Stdout, nil)
	return true
}

// wrap breaks text into lines of at most width, each starting with indent.
func wrap(text, indent string, width int) string {
	var b strings.Builder
	line := indent
	for _, word := range strings.Fields(text) {
		if len(line) > len(indent) && len(line)+1+len(word) > width {
			b.WriteString(line + "\n")
			line = indent
		}
		if len(line) > len(indent) {
			line += " "
		}
		line += word
	}
	b.WriteString(line)
	return b.String()
}

// newLogger returns the logger of every command: text or JSON on w, with
// passwords redacted from every attribute.
func newLogger(w io.Writer, level slog.Level, format string) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level, ReplaceAttr: redact.SlogAttr}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
