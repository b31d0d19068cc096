package cli

import (
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"

	"github.com/walhouse/walhouse/kafka"
	"github.com/walhouse/walhouse/record"
	"github.com/walhouse/walhouse/schema"
)

// Endpoints are the service addresses every subcommand shares. Use
// PGURL and ClickHouseDSN, which add the passwords, rather than the PG and
// ClickHouse fields.
type Endpoints struct {
	// PG, Kafka, ClickHouse and Database are the values of --pg, --kafka,
	// --clickhouse and --database (empty when the command lacks one).
	PG, Kafka, ClickHouse, Database string
	// Cluster is the ClickHouse cluster of --cluster (UsesCluster);
	// empty: one server.
	Cluster string
	// KafkaSec are the TLS and SASL flags of Kafka (UsesKafka).
	KafkaSec               KafkaSecurity
	pgPassword, chPassword *SecretSource
}

// Services is the set of services a command connects to: NewFlagSet
// registers the flags of each.
type Services uint8

const (
	UsesPG Services = 1 << iota
	UsesKafka
	UsesClickHouse
	// UsesCluster adds --cluster, for the commands that create or read the
	// tables (sink, serve, export).
	UsesCluster
)

// NewFlagSet returns the flag set of the command name, with the flags of
// the services it uses registered on it and bound to the returned
// endpoints.
func NewFlagSet(name string, uses Services) (*flag.FlagSet, *Endpoints) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	ep := &Endpoints{}
	ep.register(fs, uses)
	return fs, ep
}

// register registers on fs the flags of the services in uses, bound to e.
func (e *Endpoints) register(fs *flag.FlagSet, uses Services) {
	if uses&UsesPG != 0 {
		fs.StringVar(&e.PG, "pg", "", "PostgreSQL URL or key=value connection string (PGPASSWORD and PGPASSFILE are honoured when neither it nor --pg-password-file gives a password)")
		e.RegisterPGPassword(fs)
	}
	if uses&UsesKafka != 0 {
		fs.StringVar(&e.Kafka, "kafka", "127.0.0.1:9092", "comma-separated Kafka seed brokers")
		e.KafkaSec.Register(fs)
	}
	if uses&UsesClickHouse != 0 {
		fs.StringVar(&e.ClickHouse, "clickhouse", "clickhouse://127.0.0.1:9000", "ClickHouse DSN: clickhouse://host:9000 (native) or http://host:8123")
		e.chPassword = RegisterSecret(fs, "clickhouse-password-file", "the ClickHouse password")
		fs.StringVar(&e.Database, "database", "walhouse", "ClickHouse database for the replicated tables")
	}
	if uses&UsesCluster != 0 {
		fs.StringVar(&e.Cluster, "cluster", "", "ClickHouse cluster (a name in the servers' remote_servers): replicated tables and Distributed tables sharded by tenant, created ON CLUSTER, read and written through the Distributed tables (docs/clickhouse-cluster.md); empty: the one server of --clickhouse")
	}
}

// RegisterPGPassword registers --pg-password-file, for commands that
// register their own --pg.
func (e *Endpoints) RegisterPGPassword(fs *flag.FlagSet) {
	e.pgPassword = RegisterSecret(fs, "pg-password-file", "the PostgreSQL password")
}

// PGURL returns the PostgreSQL connection string with the password from
// WALHOUSE_SOURCE_POSTGRES_PASSWORD or --pg-password-file, if one is given.
func (e *Endpoints) PGURL() (string, error) {
	return e.PGConnString(e.PG)
}

// PGConnString adds the PostgreSQL password to dsn.
func (e *Endpoints) PGConnString(dsn string) (string, error) {
	if e.pgPassword == nil {
		return dsn, nil
	}
	pw, err := e.pgPassword.Value()
	if err != nil {
		return "", err
	}
	return withPassword(dsn, pw, "pg")
}

// ClickHouseDSN returns the ClickHouse DSN with the password from
// WALHOUSE_CLICKHOUSE_PASSWORD or --clickhouse-password-file, if one is
// given.
func (e *Endpoints) ClickHouseDSN() (string, error) {
	if e.chPassword == nil {
		return e.ClickHouse, nil
	}
	pw, err := e.chPassword.Value()
	if err != nil {
		return "", err
	}
	return withPassword(e.ClickHouse, pw, "clickhouse")
}

// KafkaConfig returns the brokers and the security options of the flags.
func (e *Endpoints) KafkaConfig() (kafka.Config, error) {
	sec, err := e.KafkaSec.options()
	return kafka.Config{Brokers: e.Brokers(), Security: sec}, err
}

// Brokers returns the seed brokers of --kafka, without blanks.
func (e *Endpoints) Brokers() []string {
	return SplitList(e.Kafka)
}

// SplitList returns the items of a comma-separated value, trimmed, without
// the empty ones.
func SplitList(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// ListFlag is a repeatable (or comma-separated) string flag.
type ListFlag []string

// String returns the list comma-separated.
func (l *ListFlag) String() string { return strings.Join(*l, ",") }

// Set appends the comma-separated items of v.
func (l *ListFlag) Set(v string) error {
	*l = append(*l, SplitList(v)...)
	return nil
}

// SubjectFlags name one data subject (GDPR) and the tables to look in:
// the flags export and erase share.
type SubjectFlags struct {
	Tenant, Column, Value string
	Tables                ListFlag
}

// RegisterSubject registers --tenant, --subject-column, --subject and
// --tables on fs; tablesHelp says what the tables are for.
func RegisterSubject(fs *flag.FlagSet, tablesHelp string) *SubjectFlags {
	s := &SubjectFlags{}
	fs.StringVar(&s.Tenant, "tenant", "", "tenant of the subject")
	fs.StringVar(&s.Column, "subject-column", "", "column that identifies the subject, e.g. customer_id")
	fs.StringVar(&s.Value, "subject", "", "value of the subject column, as PostgreSQL writes it")
	fs.Var(&s.Tables, "tables", tablesHelp+", comma-separated (default: every table with the subject column)")
	return s
}

// Require returns a usage error naming the subject's flags that are not
// set, and --pg when pg is empty.
func (s *SubjectFlags) Require(pg string) error {
	var missing []string
	for _, f := range []struct{ name, value string }{{"tenant", s.Tenant}, {"subject-column", s.Column}, {"subject", s.Value}, {"pg", pg}} {
		if f.value == "" {
			missing = append(missing, "--"+f.name)
		}
	}
	if len(missing) > 0 {
		return Usagef("missing %s", strings.Join(missing, ", "))
	}
	return nil
}

// Given reports whether the flag name was given on the command line.
func Given(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// MaxRecordBytesFlag registers --max-record-bytes on fs: the commands that
// produce or read the tables' topics must agree on it.
func MaxRecordBytesFlag(fs *flag.FlagSet) *int {
	return fs.Int("max-record-bytes", record.DefaultMaxBytes,
		"largest Kafka record (key plus value) a row may become, in bytes; capture dead-letters larger rows (and drops replication messages over it + 1 MiB unread), and the topics walhouse creates or finds get a max.message.bytes that holds it")
}

// TopicDurabilityFlag registers --topic-durability, capture's and the
// sink's check at start of the pipeline's Kafka topics
// (kafka.EnforceDurability).
func TopicDurabilityFlag(fs *flag.FlagSet) *string {
	return fs.String("topic-durability", "warn",
		"at start, check the pipeline's Kafka topics for settings that cannot keep every acknowledged record (replication factor 1 on a cluster of several brokers, min.insync.replicas 1 or above the replication factor, unclean.leader.election.enable true): warn logs each with its fix, refuse stops the start, off checks nothing (docs/scale-out.md)")
}

// DeprecatedFlag registers --old as another name of the registered flag
// --current: it sets the same value, with a warning naming --current.
func DeprecatedFlag(fs *flag.FlagSet, old, current string) {
	f := fs.Lookup(current)
	fs.Var(&renamedFlag{Value: f.Value, old: old, current: current}, old, "deprecated name of --"+current)
}

// renamedFlag is the value of a deprecated flag name.
type renamedFlag struct {
	flag.Value
	old, current string
}

func (r *renamedFlag) Set(v string) error {
	slog.Warn("deprecated flag: use the new name; the old one will stop working in a later release", "flag", "--"+r.old, "rename_to", "--"+r.current)
	return r.Value.Set(v)
}

// LayoutFlag is --layout of capture and sink: a table's ClickHouse shape,
// schema.table=JSON (the configuration file's layout key gives one per
// table; docs/shaping-tables.md). Each value is checked as it is set, so
// config check finds a layout's problems too. Repeatable; a table given
// again takes the later value.
type LayoutFlag map[string]schema.Layout

// String returns each table's layout as table=JSON, sorted by table.
func (f LayoutFlag) String() string {
	var out []string
	for _, t := range slices.Sorted(maps.Keys(f)) {
		b, _ := json.Marshal(f[t])
		out = append(out, t+"="+string(b))
	}
	return strings.Join(out, " ")
}

// Set checks and records one table's layout, schema.table=JSON.
func (f LayoutFlag) Set(v string) error {
	table, js, ok := strings.Cut(v, "=")
	if !ok || !strings.Contains(table, ".") {
		return fmt.Errorf("%q: want schema.table={\"order_by\":[…],\"partition_by\":\"…\",\"settings\":{…}}", v)
	}
	var l schema.Layout
	dec := json.NewDecoder(strings.NewReader(js))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&l); err != nil {
		return fmt.Errorf("layout of %s: %w", table, err)
	}
	if err := l.Check(); err != nil {
		return fmt.Errorf("layout of %s: %w", table, err)
	}
	f[table] = l
	return nil
}

// RegisterLayout registers --layout on fs and returns its layouts by
// table.
func RegisterLayout(fs *flag.FlagSet) LayoutFlag {
	f := LayoutFlag{}
	fs.Var(f, "layout", `a table's ClickHouse shape, schema.table={"order_by":[tenant,…,key…],"partition_by":"toYYYYMM(col)","settings":{…},"exclude_columns":[…],"columns":{"col":{"type":"Decimal(38, 4)"}}} (repeatable; docs/shaping-tables.md)`)
	return f
}
