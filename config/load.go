package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Problem is one thing wrong with a configuration file: the key (a dotted
// path such as topics.partitions), its line, and what is wrong and allowed.
type Problem struct {
	Key  string
	Line int
	Msg  string
}

func (p Problem) String() string {
	if p.Line > 0 {
		return fmt.Sprintf("%s (line %d): %s", p.Key, p.Line, p.Msg)
	}
	return fmt.Sprintf("%s: %s", p.Key, p.Msg)
}

// Error is every problem of one file, found at once, so that one edit can
// fix them all.
type Error struct {
	File     string
	Problems []Problem
}

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "configuration file %s has %d problem(s):", e.File, len(e.Problems))
	for _, p := range e.Problems {
		b.WriteString("\n  ")
		b.WriteString(p.String())
	}
	return b.String()
}

// Load reads, decodes and validates the configuration file at path. A file
// with problems returns an *Error that lists all of them.
func Load(path string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read the configuration file: %w", err)
	}
	return Parse(path, b)
}

// Parse decodes and validates a configuration file's content; name names
// it in errors.
func Parse(name string, data []byte) (*Config, error) {
	c := &Config{set: map[string]int{}}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil && !errors.Is(err, io.EOF) {
		return nil, &Error{File: name, Problems: []Problem{{Key: "(file)", Msg: "not valid YAML: " + err.Error()}}}
	}
	var problems []Problem
	if len(doc.Content) > 0 {
		problems = decode(doc.Content[0], reflect.ValueOf(c).Elem(), "", c.set)
	}
	problems = append(problems, c.validate()...)
	if len(problems) > 0 {
		sort.SliceStable(problems, func(i, j int) bool { return problems[i].Line < problems[j].Line })
		return nil, &Error{File: name, Problems: problems}
	}
	return c, nil
}

// secretWords are parts of key names that would hold a secret inline.
var secretWords = []string{"password", "secret", "token", "audit_key"}

// decode walks node against the struct v, recording the keys it sets in
// set and every problem it meets (unknown keys, wrong types) instead of
// stopping at the first.
func decode(node *yaml.Node, v reflect.Value, path string, set map[string]int) []Problem {
	if node.Kind == yaml.ScalarNode && node.Tag == "!!null" {
		return nil
	}
	if node.Kind != yaml.MappingNode {
		return []Problem{{Key: orRoot(path), Line: node.Line, Msg: "want a mapping of keys to values"}}
	}
	var problems []Problem
	t := v.Type()
	fields := map[string]int{}
	var names []string
	for i := range t.NumField() {
		if name := yamlName(t.Field(i)); name != "" {
			fields[name] = i
			names = append(names, name)
		}
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(node.Content); i += 2 {
		k, val := node.Content[i], node.Content[i+1]
		key := join(path, k.Value)
		idx, ok := fields[k.Value]
		if !ok {
			problems = append(problems, Problem{Key: key, Line: k.Line, Msg: unknownKey(k.Value, names)})
			continue
		}
		if seen[k.Value] {
			problems = append(problems, Problem{Key: key, Line: k.Line, Msg: "given twice; keep one"})
			continue
		}
		seen[k.Value] = true
		f, fv := t.Field(idx), v.Field(idx)
		if reason := f.Tag.Get("reserved"); reason != "" {
			if !(val.Kind == yaml.ScalarNode && (val.Tag == "!!null" || val.Value == "")) {
				problems = append(problems, Problem{Key: key, Line: k.Line, Msg: reason})
			}
			continue
		}
		if f.Type.Kind() == reflect.Struct && f.Type != reflect.TypeFor[time.Duration]() {
			problems = append(problems, decode(val, fv, key, set)...)
			continue
		}
		if f.Type == reflect.TypeFor[map[string]TableLayout]() {
			m, ps := decodeLayouts(val, key, set)
			problems = append(problems, ps...)
			fv.Set(reflect.ValueOf(m))
			set[key] = k.Line
			continue
		}
		if p, ok := decodeLeaf(val, fv, key); !ok {
			problems = append(problems, p)
			continue
		}
		set[key] = k.Line
	}
	return problems
}

// decodeLeaf decodes one value into v. Lists take a YAML sequence or a
// comma-separated string, as their flags do.
func decodeLeaf(val *yaml.Node, v reflect.Value, key string) (Problem, bool) {
	bad := func(want string) (Problem, bool) {
		shown := val.Value
		if val.Kind != yaml.ScalarNode {
			shown = map[yaml.Kind]string{yaml.MappingNode: "a mapping", yaml.SequenceNode: "a list"}[val.Kind]
		} else {
			shown = strconv.Quote(shown)
		}
		return Problem{Key: key, Line: val.Line, Msg: fmt.Sprintf("%s is not %s", shown, want)}, false
	}
	switch v.Kind() {
	case reflect.Slice:
		var out []string
		switch val.Kind {
		case yaml.ScalarNode:
			for _, s := range strings.Split(val.Value, ",") {
				if s = strings.TrimSpace(s); s != "" {
					out = append(out, s)
				}
			}
		case yaml.SequenceNode:
			for _, item := range val.Content {
				if item.Kind != yaml.ScalarNode {
					return bad("a list of strings")
				}
				out = append(out, item.Value)
			}
		default:
			return bad("a list of strings")
		}
		v.Set(reflect.ValueOf(out))
		return Problem{}, true
	case reflect.Map:
		m := map[string]string{}
		if val.Kind != yaml.MappingNode {
			return bad("a mapping of schema.table to column")
		}
		for i := 0; i+1 < len(val.Content); i += 2 {
			k, e := val.Content[i], val.Content[i+1]
			if e.Kind != yaml.ScalarNode || e.Value == "" {
				return Problem{Key: join(key, k.Value), Line: e.Line, Msg: "want a column name"}, false
			}
			m[k.Value] = e.Value
		}
		v.Set(reflect.ValueOf(m))
		return Problem{}, true
	}
	if val.Kind != yaml.ScalarNode {
		return bad("a single value")
	}
	switch {
	case v.Type() == reflect.TypeFor[time.Duration]():
		d, err := time.ParseDuration(val.Value)
		if err != nil {
			return bad("a duration (a number with a unit: 500ms, 10s, 2m, 1h)")
		}
		v.SetInt(int64(d))
	case v.Kind() == reflect.Bool:
		b, err := strconv.ParseBool(val.Value)
		if err != nil {
			return bad("true or false")
		}
		v.SetBool(b)
	case v.Kind() == reflect.Int || v.Kind() == reflect.Int64:
		n, err := strconv.ParseInt(strings.ReplaceAll(val.Value, "_", ""), 10, 64)
		if err != nil {
			return bad("a whole number")
		}
		v.SetInt(n)
	case v.Kind() == reflect.String:
		if val.Tag != "!!str" && val.Tag != "!!null" && val.Tag != "!!int" && val.Tag != "!!float" && val.Tag != "!!bool" {
			return bad("a string")
		}
		v.SetString(val.Value)
	}
	return Problem{}, true
}

// unknownKey says what is wrong with an unknown key: a secret given
// inline, a near miss of a known key, or just unknown.
func unknownKey(name string, known []string) string {
	for _, w := range secretWords {
		if strings.Contains(name, w) {
			return fmt.Sprintf("secrets are never written in the configuration file: reference it with %[1]s_file: PATH (a file holding it, e.g. a mounted secret) or %[1]s_env: NAME (an environment variable holding it)", strings.TrimSuffix(name, "_value"))
		}
	}
	if s := Closest(name, known); s != "" {
		return fmt.Sprintf("unknown key; did you mean %q?", s)
	}
	return "unknown key; known here: " + strings.Join(known, ", ")
}

// Closest returns the candidate nearest to word, when it is near enough to
// be a typo (an edit distance of at most a third of its length, at least
// 2), or "".
func Closest(word string, candidates []string) string {
	best, bestD := "", max(2, len(word)/3)+1
	for _, c := range candidates {
		if d := distance(word, c); d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

// distance is the Levenshtein distance of a and b.
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

func yamlName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	if name == "-" {
		return ""
	}
	return name
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func orRoot(path string) string {
	if path == "" {
		return "(top level)"
	}
	return path
}

// Check validates values given as flag arguments rather than in a file
// (from the command line or the environment), keyed by configuration key,
// with the same checks and messages as a file's: a value that is not of
// the key's type, and every rule of the file's validation for the keys
// given, but for the file's own (no password in a URL). A list is comma-separated; a mapping is comma-separated k=v. The
// problems have no line; the caller says where each value came from.
func Check(values map[string]string) []Problem {
	c := &Config{set: map[string]int{}, flagValues: true}
	var ps []Problem
	walk(reflect.ValueOf(c).Elem(), prefixes{}, func(s Setting, v reflect.Value) {
		raw, ok := values[s.Key]
		if !ok || s.SecretEnv {
			return
		}
		if v.Kind() == reflect.Map && v.Type().Elem().Kind() == reflect.Struct {
			// A layout's flag value is JSON, which its flag decodes and
			// checks (with schema.Layout's rules) as it is set.
			return
		}
		node := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: raw}
		if v.Kind() == reflect.Map {
			node = &yaml.Node{Kind: yaml.MappingNode}
			for _, item := range strings.Split(raw, ",") {
				if item = strings.TrimSpace(item); item == "" {
					continue
				}
				k, col, _ := strings.Cut(item, "=")
				node.Content = append(node.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: k}, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: col})
			}
		}
		if p, ok := decodeLeaf(node, v, s.Key); !ok {
			p.Line = 0
			ps = append(ps, p)
			return
		}
		c.set[s.Key] = 0
	})
	return append(ps, c.validate()...)
}
