package cli

import (
	"flag"
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
	"slices"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/walhouse/walhouse/config"
	"github.com/walhouse/walhouse/internal/failpoint"
)

// Environment variables follow one rule, taken from the configuration
// schema: a flag that stands for the key a.b.c reads WALHOUSE_A_B_C
// (config.EnvName), in every command that has it, and a …_file key's
// secret may be given itself in the variable without _FILE. The names
// used before the rule (config.Setting.OldEnv) are still read, after the
// new one, with a deprecation warning. Variables are read after the
// command line is parsed, not as the flags' defaults, so that a bad value
// is an error that names the variable instead of a silent default, and
// so that every value knows its source (walhouse config view).

// The variables that are not keys of the configuration schema, each read
// in one place below; otherVars lists them, for docs/configuration.md.
const (
	configEnv     = "WALHOUSE_CONFIG"
	ChdbLibEnv    = "WALHOUSE_CHDB_LIB"
	memLimitEnv   = "GOMEMLIMIT"
	PprofEnv      = "WALHOUSE_PPROF"
	failpointsEnv = "WALHOUSE_FAILPOINTS"
)

// otherVar is a variable that is not a key, and what it means.
type otherVar struct{ name, meaning string }

// otherVars are the variables that are not keys, as the reference lists
// them (Markdown).
func otherVars() []otherVar {
	return []otherVar{
		{configEnv, "the configuration file, as `--config` before the command"},
		{ChdbLibEnv, "`walhouse chdb --lib`: the path of libchdb.so"},
		{memLimitEnv, "Go's soft memory limit; unset, capture and the sink set one from `--max-record-bytes`"},
		{PprofEnv, "`1`: Go's profiling endpoints (/debug/pprof/) on the `--metrics-addr` of capture and sink"},
		{failpointsEnv, "the crash and error points of the fault tests; never set in production"},
	}
}

// Failpoints are the crash and error points of failpointsEnv (nil when
// unset: production).
func Failpoints() (*failpoint.Set, error) {
	fps, err := failpoint.Parse(os.Getenv(failpointsEnv))
	if err != nil {
		return nil, Usagef("%s: %w", failpointsEnv, err)
	}
	return fps, nil
}

// SetMemoryLimit sets Go's soft memory limit to bytes unless memLimitEnv
// sets one.
func SetMemoryLimit(bytes int64) {
	if os.Getenv(memLimitEnv) == "" {
		debug.SetMemoryLimit(bytes)
	}
}

// PprofOn reports whether PprofEnv turns the profiling endpoints on.
func PprofOn() bool { return os.Getenv(PprofEnv) == "1" }

// keySettings returns the settings of command cmd by flag name: the key
// each flag stands for (the secrets' …_env keys left out).
func keySettings(cmd string) map[string]config.Setting {
	out := map[string]config.Setting{}
	for _, s := range config.Schema() {
		if s.AppliesTo(cmd) && !s.SecretEnv {
			out[s.Flag] = s
		}
	}
	return out
}

// lookupEnv returns the value of the first of names that is set and not
// empty, and which one it was.
func lookupEnv(names []string) (value, name string, ok bool) {
	for _, n := range names {
		if v := os.Getenv(n); v != "" {
			return v, n, true
		}
	}
	return "", "", false
}

// deprecatedEnv logs that the old variable was read in place of new.
func deprecatedEnv(old, new string) {
	slog.Warn("deprecated environment variable: rename it; the old name will stop working in a later release", "variable", old, "rename_to", new)
}

// secretEnv returns the variables that may hold the secret of the file
// flag fileFlag itself, the current name first.
func secretEnv(fileFlag string) []string {
	for _, s := range config.Schema() {
		if s.Flag == fileFlag && s.SecretVar != "" {
			return append([]string{s.SecretVar}, s.OldSecretVar...)
		}
	}
	return nil
}

// getSecretEnv returns the secret held by the first of names that is set,
// warning when it is an old name.
func getSecretEnv(names []string) string {
	v, name, ok := lookupEnv(names)
	if ok && name != names[0] {
		deprecatedEnv(name, names[0])
	}
	return v
}

// flagSources records where each flag of one run got its value: "--name"
// for the command line, "env NAME", "file key (line N)"; a flag that is
// not in it has its default.
type flagSources map[string]string

// applyEnv gives each flag of fs that the command line left alone the
// value of its environment variable, when set, recording the sources and
// the raw values by configuration key (for checkValues). It returns the
// flags' problems that are not a key's (a key's are checkValues'), and
// the old variable names read, as pairs old, new.
func applyEnv(fs *flag.FlagSet, cmd string, sources flagSources, values map[string]string) (problems []error, deprecated [][2]string) {
	keys := keySettings(cmd)
	fs.VisitAll(func(f *flag.Flag) {
		s, isKey := keys[f.Name]
		if _, given := sources[f.Name]; given {
			if _, bad := values[s.Key]; isKey && !bad {
				values[s.Key] = f.Value.String()
			}
			return
		}
		if !isKey {
			return
		}
		names := append([]string{s.Env}, s.OldEnv...)
		v, name, ok := lookupEnv(names)
		if !ok {
			return
		}
		sources[f.Name] = "env " + name
		if name != s.Env {
			deprecated = append(deprecated, [2]string{name, s.Env})
			sources[f.Name] += " (deprecated name of " + s.Env + ")"
		}
		values[s.Key] = v
		if err := fs.Set(f.Name, v); err != nil && !slices.ContainsFunc(config.Check(map[string]string{s.Key: v}), func(p config.Problem) bool { return p.Key == s.Key }) {
			problems = append(problems, fmt.Errorf("env %s=%q: %w", name, v, err))
		}
	})
	return problems, deprecated
}

// checkValues checks the values of the flags that do not have their
// default, with the configuration file's rules and messages
// (config.Check), and the connection strings as their drivers will parse
// them, before anything connects. Each problem names the value's source
// and key.
func checkValues(fs *flag.FlagSet, cmd string, sources flagSources, values map[string]string) []error {
	byKey := map[string]string{}
	for flagName, s := range keySettings(cmd) {
		byKey[s.Key] = flagName
		// A default is valid for its command, where the file's rule may
		// not be (0 is export's "serve's cap" but not a cap of serve's).
		if f := fs.Lookup(flagName); f != nil && values[s.Key] == f.DefValue {
			delete(values, s.Key)
		}
	}
	var problems []error
	for _, p := range config.Check(values) {
		where := sources[byKey[p.Key]]
		if where == "" {
			where = "--" + byKey[p.Key]
		}
		problems = append(problems, fmt.Errorf("%s (key %s): %s", where, p.Key, p.Msg))
	}
	for _, name := range []string{"pg", "primary-url"} {
		f := fs.Lookup(name)
		if f == nil || f.Value.String() == "" {
			continue
		}
		if _, err := pgconn.ParseConfig(f.Value.String()); err != nil {
			where := sources[name]
			if where == "" {
				where = "--" + name
			}
			problems = append(problems, fmt.Errorf("%s: %q is not a PostgreSQL URL (postgres://user@host:5432/db) nor a key=value connection string (host=... dbname=...): %w", where, f.Value.String(), err))
		}
	}
	return problems
}

// badValue is a value a flag refused on the command line.
type badValue struct {
	flag, value string
	err         error
}

// lenientValue records the values its flag refuses instead of stopping
// the parse at the first.
type lenientValue struct {
	flag.Value
	name string
	bad  *[]badValue
}

func (l *lenientValue) Set(v string) error {
	if err := l.Value.Set(v); err != nil {
		*l.bad = append(*l.bad, badValue{l.name, v, err})
	}
	return nil
}

// IsBoolFlag keeps a boolean flag's --name form.
func (l *lenientValue) IsBoolFlag() bool {
	b, ok := l.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// lenient makes every flag of fs record the values it refuses, until
// unwrapLenient; it returns where they are recorded.
func lenient(fs *flag.FlagSet) *[]badValue {
	bad := &[]badValue{}
	fs.VisitAll(func(f *flag.Flag) { f.Value = &lenientValue{Value: f.Value, name: f.Name, bad: bad} })
	return bad
}

// unwrapLenient gives the flags of fs their own values back.
func unwrapLenient(fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		if l, ok := f.Value.(*lenientValue); ok {
			f.Value = l.Value
		}
	})
}

// EnvSecret returns the secret of the file flag fileFlag held by its
// variable itself (WALHOUSE_…_FILE without _FILE, or an old name, with a
// warning), "" when none is set.
func EnvSecret(fileFlag string) string { return getSecretEnv(secretEnv(fileFlag)) }
