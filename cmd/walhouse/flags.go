package main

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// envOr returns the environment variable name, or def when it is unset.
func envOr(name, def string) string {
	if v, ok := os.LookupEnv(name); ok && v != "" {
		return v
	}
	return def
}

// envInt returns the integer environment variable name, or def when it is
// unset or not a number.
func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return v
	}
	return def
}

// endpoints are the service addresses every subcommand shares.
type endpoints struct {
	pg, kafka, clickhouse, database string
	kafkaSec                        kafkaSecurity
}

func (e *endpoints) register(fs *flag.FlagSet, pg, kafka, clickhouse bool) {
	if pg {
		fs.StringVar(&e.pg, "pg", envOr("WALHOUSE_PG_URL", ""), "PostgreSQL URL (env WALHOUSE_PG_URL)")
	}
	if kafka {
		fs.StringVar(&e.kafka, "kafka", envOr("WALHOUSE_KAFKA_BROKERS", "127.0.0.1:9092"), "comma-separated Kafka seed brokers (env WALHOUSE_KAFKA_BROKERS)")
		e.kafkaSec.register(fs)
	}
	if clickhouse {
		fs.StringVar(&e.clickhouse, "clickhouse", envOr("WALHOUSE_CLICKHOUSE_URL", "clickhouse://127.0.0.1:9000"), "ClickHouse DSN: clickhouse://host:9000 (native) or http://host:8123 (env WALHOUSE_CLICKHOUSE_URL)")
		fs.StringVar(&e.database, "database", envOr("WALHOUSE_CLICKHOUSE_DATABASE", "walhouse"), "ClickHouse database for the replicated tables (env WALHOUSE_CLICKHOUSE_DATABASE)")
	}
}

// kafkaConfig returns the brokers and the security options of the flags.
func (e *endpoints) kafkaConfig() (kafkaConfig, error) {
	sec, err := e.kafkaSec.options()
	return kafkaConfig{brokers: e.brokers(), security: sec}, err
}

func (e *endpoints) brokers() []string {
	var out []string
	for _, b := range strings.Split(e.kafka, ",") {
		if b = strings.TrimSpace(b); b != "" {
			out = append(out, b)
		}
	}
	return out
}

// listFlag is a repeatable (or comma-separated) string flag.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(v string) error {
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			*l = append(*l, p)
		}
	}
	return nil
}

// parseFlags parses args and rejects positional leftovers.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q (flags go before nothing else)", fs.Args())
	}
	return nil
}

// flagSet reports whether the flag name was given on the command line.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}
