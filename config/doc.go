// Package config reads walhouse's configuration file: one YAML file for
// every command (sources and tables, topics, the sink's batching, the dedup
// store, ClickHouse, the query API, logging).
//
// It owns the file's schema (Config), its decoding and its validation,
// which lists every problem at once with its key path, line, the bad value
// and what is allowed; an unknown key is an error, with a "did you mean"
// when it is close to a known one. Secrets are never in the file: a key
// that would hold one inline, or a URL with a password, is an error that
// says how to reference it (a …_file or …_env key).
//
// Why keys map onto flags: each command already defines its settings as
// flags with their defaults and environment variables, and checks them.
// Every key of the file names the flag it stands for (Setting), and
// cmd/walhouse gives a flag the file's value only when neither the command
// line nor the flag's environment variable set it, so the precedence
// flags > environment > file > defaults holds by construction, and every
// value, wherever it came from, passes through the same flag and the same
// checks. The package does not know the commands; it does not read the
// environment or the secrets either: that stays with the composition root.
//
// Data enters as the file's bytes (Load, Parse) and leaves as a *Config
// whose Values are the flag arguments to apply, or an *Error.
package config

import _ "embed"

//go:embed example.yaml
var example string

// Example returns a commented example file that Parse accepts; it sets
// every key but the alternatives it shows as comments.
func Example() string { return example }
