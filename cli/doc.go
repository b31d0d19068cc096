// Package cli is walhouse's command line: flag sets bound to the
// configuration schema's keys, their precedence over the environment and
// the configuration file, secrets, help and completion.
//
// It owns:
//
//	program.go      Command and Commands: the table cmd/walhouse fills in,
//	                Commands.Run (the options before the command, exit
//	                statuses, usage errors) and the list of commands
//	invocation.go   Invocation.Parse: the flags every command shares, parsing,
//	                flag > environment > file > default, the required flags,
//	                every problem at once before anything connects; -h
//	env.go          the WALHOUSE_* variables (config.EnvName, old names with a
//	                warning) and the few that are not keys
//	flags.go        the service flags (Endpoints: --pg, --kafka, --clickhouse,
//	                --cluster), list, layout, subject and renamed flags
//	secrets.go      --…-file secrets and their variables, TLS flags
//	kafka.go, dedup.go
//	                the TLS and login flags of Kafka and the dedup store and
//	                the settings they make
//	configcmd.go, configview.go, reference.go
//	                walhouse config: example, check, view, reference
//	                (docs/configuration.md)
//	completion.go   walhouse completion: bash, zsh and fish scripts
//
// What it does not own: the commands. cmd/walhouse holds the command table
// and each command's flags and run function, which call Parse and hand the
// values to package pipeline; cli runs no stage, opens no connection and
// imports no stage but the settings types of kafka and dedup. The schema
// of the keys is package config's.
//
// Data enters as the arguments, the environment, the configuration file
// and secret files, and leaves as the values of the commands' flags, the
// sources config view shows, and the help, errors (passwords redacted with
// internal/redact) and exit statuses on stdout and stderr. No global
// state: the command table travels in each Invocation.
package cli
