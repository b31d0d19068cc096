package config

import (
	"encoding/json"
	"maps"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Setting is one key a configuration file may give and where its value
// goes: the flag it stands for and the environment variable that overrides
// it (flags > environment > file > defaults).
type Setting struct {
	Key  string // dotted path, e.g. "source.slot"
	Flag string // the flag's name, e.g. "slot"
	// Env is the variable that, when set, wins over the file:
	// EnvName(Key); empty for a …_env key, whose value names a variable.
	Env string
	// OldEnv are earlier names of Env, still read (Env wins) with a
	// deprecation warning.
	OldEnv []string
	// SecretVar is, for a …_file key, the variable that may hold the
	// secret itself instead of a file (Env without _FILE); OldSecretVar its
	// earlier names.
	SecretVar    string
	OldSecretVar []string
	// Commands are the commands the key applies to; empty: every command
	// that has the flag.
	Commands []string
	// SecretEnv says the value names an environment variable that holds
	// the secret of Flag (a --…-file flag), instead of being Flag's value.
	SecretEnv bool
}

// EnvName returns the environment variable of the key: WALHOUSE_ and the
// key's path in capitals, each . an _ (source.postgres.url:
// WALHOUSE_SOURCE_POSTGRES_URL).
func EnvName(key string) string {
	return "WALHOUSE_" + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))
}

// AppliesTo reports whether the setting is for command.
func (s Setting) AppliesTo(command string) bool {
	return len(s.Commands) == 0 || slices.Contains(s.Commands, command)
}

// Value is a Setting the file gives, with its line and its value as
// arguments of the flag (one per item for a list or a mapping).
type Value struct {
	Setting
	Line int
	Args []string
}

// Schema returns every key a file may give, in the order of Config.
func Schema() []Setting {
	var out []Setting
	walk(reflect.ValueOf(&Config{}).Elem(), prefixes{}, func(s Setting, _ reflect.Value) { out = append(out, s) })
	return out
}

// Values returns the settings the file gives, in key order.
func (c *Config) Values() []Value {
	var out []Value
	walk(reflect.ValueOf(c).Elem(), prefixes{}, func(s Setting, v reflect.Value) {
		if line, ok := c.set[s.Key]; ok {
			out = append(out, Value{Setting: s, Line: line, Args: args(v)})
		}
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// Has reports whether the file gives key.
func (c *Config) Has(key string) bool {
	_, ok := c.set[key]
	return ok
}

// prefixes are what the fields of a struct take from the fields that hold
// it: the key's path, and the start of their flags and variables.
type prefixes struct {
	path, flag, env string
}

func walk(v reflect.Value, at prefixes, each func(Setting, reflect.Value)) {
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		name := yamlName(f)
		if name == "" || f.Tag.Get("reserved") != "" {
			continue
		}
		key := join(at.path, name)
		if f.Type.Kind() == reflect.Struct && f.Type != reflect.TypeFor[time.Duration]() {
			walk(v.Field(i), prefixes{key, at.flag + f.Tag.Get("flag"), at.env + f.Tag.Get("env")}, each)
			continue
		}
		s := Setting{Key: key, Flag: at.flag + f.Tag.Get("flag"), SecretEnv: f.Tag.Get("secret") == "env"}
		if !s.SecretEnv {
			s.Env = EnvName(key)
			s.OldEnv = names(f.Tag.Get("env"), at.env, s.Env)
			if old, ok := f.Tag.Lookup("secretvar"); ok {
				s.SecretVar = strings.TrimSuffix(s.Env, "_FILE")
				s.OldSecretVar = names(old, "", s.SecretVar)
			}
		}
		if c := f.Tag.Get("cmd"); c != "" {
			s.Commands = strings.Split(c, ",")
		}
		each(s, v.Field(i))
	}
}

// names splits a tag's comma-separated variable names, each after
// prefix, leaving out current (an old name that did not change).
func names(tag, prefix, current string) []string {
	var out []string
	for _, n := range strings.Split(tag, ",") {
		if n != "" && prefix+n != current {
			out = append(out, prefix+n)
		}
	}
	return out
}

// args formats v as the arguments of its flag.
func args(v reflect.Value) []string {
	switch {
	case v.Type() == reflect.TypeFor[time.Duration]():
		return []string{time.Duration(v.Int()).String()}
	case v.Kind() == reflect.Slice:
		return []string{strings.Join(v.Interface().([]string), ",")}
	case v.Type() == reflect.TypeFor[map[string]TableLayout]():
		// One schema.table=JSON per table, as --layout takes it.
		m := v.Interface().(map[string]TableLayout)
		var out []string
		for _, table := range slices.Sorted(maps.Keys(m)) {
			b, _ := json.Marshal(m[table]) // strings only: cannot fail
			out = append(out, table+"="+string(b))
		}
		return out
	case v.Kind() == reflect.Map:
		m := v.Interface().(map[string]string)
		var out []string
		for k, col := range m {
			out = append(out, k+"="+col)
		}
		sort.Strings(out)
		return out
	case v.Kind() == reflect.Bool:
		return []string{strconv.FormatBool(v.Bool())}
	case v.Kind() == reflect.Int, v.Kind() == reflect.Int64:
		return []string{strconv.FormatInt(v.Int(), 10)}
	default:
		return []string{v.String()}
	}
}
