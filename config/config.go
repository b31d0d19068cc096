package config

import "time"

// Config is the content of one configuration file. Each leaf field names,
// in its tags, the key of the file (yaml), the command-line flag it stands
// for (flag), the older names of its environment variable that are still
// accepted with a deprecation warning (env) and, where a flag name means
// different things to different commands, the commands it applies to
// (cmd). The variable itself is not a tag: it is WALHOUSE_ and the key's
// path in capitals with _ for . (EnvName), one rule for every key. On a
// field that holds a struct, flag and env are prefixes of its fields'
// flags and old variables, so that one struct (TLS) serves several
// services. A field tagged secret:"env" holds the name of an environment
// variable that holds the secret of its flag's file; a …_file field's
// secretvar tag lists the older names of the variable that may hold the
// secret itself (SecretVar). Reserved keys are accepted by name and
// refused with their reason.
//
// Use Load to read a file: it knows which keys the file sets, which the
// zero values of Config cannot tell.
type Config struct {
	Source     Source     `yaml:"source"`
	Capture    Capture    `yaml:"capture"`
	Kafka      Kafka      `yaml:"kafka"`
	Topics     Topics     `yaml:"topics"`
	Sink       Sink       `yaml:"sink"`
	Dedup      Dedup      `yaml:"dedup"`
	ClickHouse ClickHouse `yaml:"clickhouse"`
	API        API        `yaml:"api"`
	Erasure    Erasure    `yaml:"erasure"`
	Log        Log        `yaml:"log"`
	// Idempotency is Layer 1's key table, as walhouse keys prune keeps it.
	Idempotency Idempotency `yaml:"idempotency"`
	// Verify is walhouse verify's reconciliation (docs/verify.md).
	Verify Verify `yaml:"verify"`
	// Layout is the shape of some ClickHouse tables, by source table
	// "schema.table" (docs/shaping-tables.md); a table without an entry
	// keeps walhouse's default shape. Capture needs it too: an update of
	// a sorting or partition column moves the row.
	Layout map[string]TableLayout `yaml:"layout" flag:"layout" cmd:"capture,sink,relayout"`

	// set holds the keys the file gives, with their lines.
	set map[string]int
	// flagValues says the values are flags' and variables' (Check), not
	// a file's.
	flagValues bool
}

// Source is the PostgreSQL database capture reads and what it reads of it.
// One capture process reads one source; several sources are several
// processes, each with its own file (or its own flags over a shared file).
type Source struct {
	Postgres      Postgres          `yaml:"postgres"`
	Slot          string            `yaml:"slot" flag:"slot" env:"WALHOUSE_SLOT"`
	Publication   string            `yaml:"publication" flag:"publication" env:"WALHOUSE_PUBLICATION"`
	Tables        []string          `yaml:"tables" flag:"tables" cmd:"capture"`
	ExcludeTables []string          `yaml:"exclude_tables" flag:"exclude-tables"`
	TenantColumn  string            `yaml:"tenant_column" flag:"tenant-column" env:"WALHOUSE_TENANT_COLUMN"`
	TenantColumns map[string]string `yaml:"tenant_columns" flag:"tenant-column-for"`
	DefaultTenant string            `yaml:"default_tenant" flag:"default-tenant" env:"WALHOUSE_DEFAULT_TENANT"`
	// CaptureIdempotencyKeys captures Layer 1's key table, which capture
	// leaves out by default.
	CaptureIdempotencyKeys bool `yaml:"capture_idempotency_keys" flag:"capture-idempotency-keys" cmd:"capture"`
	FailoverSlot           bool `yaml:"failover_slot" flag:"failover-slot" env:"WALHOUSE_FAILOVER_SLOT" cmd:"capture"`
}

// Postgres is how to reach the source database.
type Postgres struct {
	URL          string `yaml:"url" flag:"pg" env:"WALHOUSE_PG_URL"`
	PrimaryURL   string `yaml:"primary_url" flag:"primary-url" env:"WALHOUSE_PRIMARY_URL" cmd:"capture"`
	PasswordFile string `yaml:"password_file" flag:"pg-password-file" env:"WALHOUSE_PG_PASSWORD_FILE" secretvar:"WALHOUSE_PG_PASSWORD"`
	PasswordEnv  string `yaml:"password_env" flag:"pg-password-file" secret:"env"`
}

// Capture is how the capture process runs.
type Capture struct {
	Snapshot           string        `yaml:"snapshot" flag:"snapshot" env:"WALHOUSE_SNAPSHOT"`
	SnapshotWorkers    int           `yaml:"snapshot_workers" flag:"snapshot-workers"`
	SnapshotChunkPages int64         `yaml:"snapshot_chunk_pages" flag:"snapshot-chunk-pages"`
	SnapshotBatchRows  int           `yaml:"snapshot_batch_rows" flag:"snapshot-batch-rows"`
	StatusInterval     time.Duration `yaml:"status_interval" flag:"status-interval"`
	HeartbeatInterval  time.Duration `yaml:"heartbeat_interval" flag:"heartbeat-interval"`
	MarkInterval       time.Duration `yaml:"mark_interval" flag:"mark-interval"`
	ReconnectTimeout   time.Duration `yaml:"reconnect_timeout" flag:"reconnect-timeout" cmd:"capture"`
	ProgressInterval   time.Duration `yaml:"progress_interval" flag:"progress-interval" cmd:"capture"`
	OnBadRow           string        `yaml:"on_bad_row" flag:"on-bad-row" env:"WALHOUSE_ON_BAD_ROW"`
	EnvelopeVersion    int           `yaml:"envelope_version" flag:"envelope-version"`
	MetricsAddr        string        `yaml:"metrics_addr" flag:"metrics-addr" env:"WALHOUSE_CAPTURE_METRICS_ADDR" cmd:"capture"`
	RewriteCopy        string        `yaml:"rewrite_copy" flag:"rewrite-copy" env:"WALHOUSE_REWRITE_COPY" cmd:"capture"`
	RewriteCopyMaxRows int64         `yaml:"rewrite_copy_max_rows" flag:"rewrite-copy-max-rows" cmd:"capture"`
}

// Kafka is how to reach the brokers.
type Kafka struct {
	Brokers []string  `yaml:"brokers" flag:"kafka" env:"WALHOUSE_KAFKA_BROKERS"`
	TLS     TLS       `yaml:"tls" flag:"kafka-" env:"WALHOUSE_KAFKA_"` // --kafka-tls…, WALHOUSE_KAFKA_TLS…
	SASL    KafkaSASL `yaml:"sasl"`
}

// TLS is the TLS of the connections to one service. Its flags and
// environment variables are those of the field that holds it, with tls and
// TLS after the prefix.
type TLS struct {
	Enabled bool   `yaml:"enabled" flag:"tls" env:"TLS"`
	CA      string `yaml:"ca" flag:"tls-ca" env:"TLS_CA"`
	Cert    string `yaml:"cert" flag:"tls-cert" env:"TLS_CERT"`
	Key     string `yaml:"key" flag:"tls-key" env:"TLS_KEY"`
}

// KafkaSASL is the login to the brokers.
type KafkaSASL struct {
	Mechanism    string `yaml:"mechanism" flag:"kafka-sasl" env:"WALHOUSE_KAFKA_SASL_MECHANISM"`
	User         string `yaml:"user" flag:"kafka-sasl-user" env:"WALHOUSE_KAFKA_SASL_USER"`
	PasswordFile string `yaml:"password_file" flag:"kafka-sasl-password-file" secretvar:"WALHOUSE_KAFKA_SASL_PASSWORD"`
	PasswordEnv  string `yaml:"password_env" flag:"kafka-sasl-password-file" secret:"env"`
}

// Topics are the pipeline's Kafka topics.
type Topics struct {
	Prefix            string `yaml:"prefix" flag:"topic-prefix" env:"WALHOUSE_TOPIC_PREFIX"`
	Partitions        int    `yaml:"partitions" flag:"partitions"`
	ReplicationFactor int    `yaml:"replication_factor" flag:"replication-factor"`
	MinInsyncReplicas int    `yaml:"min_insync_replicas" flag:"min-insync-replicas"`
	Durability        string `yaml:"durability" flag:"topic-durability"`
	MaxRecordBytes    int    `yaml:"max_record_bytes" flag:"max-record-bytes" env:"WALHOUSE_MAX_RECORD_BYTES"`
	DeadLetters       string `yaml:"dead_letters" flag:"dlq-topic" env:"WALHOUSE_DLQ_TOPIC"`
}

// Sink is how the sink loads.
type Sink struct {
	Group        string        `yaml:"group" flag:"group" env:"WALHOUSE_GROUP"`
	MaxBatch     int           `yaml:"max_batch" flag:"max-batch"`
	Parallelism  int           `yaml:"insert_parallelism" flag:"insert-parallelism"`
	Combine      bool          `yaml:"combine_partitions" flag:"combine-partitions" cmd:"sink"`
	MaxWait      time.Duration `yaml:"max_wait" flag:"max-wait"`
	FetchMin     int           `yaml:"fetch_min_bytes" flag:"fetch-min-bytes" cmd:"sink"`
	PartitionBy  string        `yaml:"partition_by" flag:"partition-by"`
	MismatchMode string        `yaml:"mismatch_mode" flag:"mismatch-mode" env:"WALHOUSE_MISMATCH_MODE"`
	MetricsAddr  string        `yaml:"metrics_addr" flag:"metrics-addr" env:"WALHOUSE_METRICS_ADDR" cmd:"sink"`
	Progress     time.Duration `yaml:"progress_interval" flag:"progress-interval" cmd:"sink"`
	RecopyOnGap  bool          `yaml:"recopy_on_gap" flag:"recopy-on-gap" cmd:"sink"`
	// Relayout rebuilds a table whose sorting key, partitions or overridden
	// column types are not its layout's (docs/shaping-tables.md#changing-a-layout).
	Relayout        bool `yaml:"relayout" flag:"relayout" cmd:"sink"`
	RelayoutDropOld bool `yaml:"relayout_drop_old" flag:"relayout-drop-old" cmd:"sink"`
}

// Dedup is the Valkey/Redis store of Layer 2.
type Dedup struct {
	Addr         string `yaml:"addr" flag:"dedup-addr" env:"WALHOUSE_REDIS_ADDR"`
	Prefix       string `yaml:"prefix" flag:"dedup-prefix" env:"WALHOUSE_DEDUP_PREFIX"`
	TTLHours     int    `yaml:"ttl_hours" flag:"dedup-ttl-hours" env:"EVENT_DEDUP_TTL_HOURS"`
	User         string `yaml:"user" flag:"dedup-user" env:"WALHOUSE_REDIS_USER"`
	PasswordFile string `yaml:"password_file" flag:"dedup-password-file" env:"WALHOUSE_REDIS_PASSWORD_FILE" secretvar:"WALHOUSE_REDIS_PASSWORD"`
	PasswordEnv  string `yaml:"password_env" flag:"dedup-password-file" secret:"env"`
	TLS          TLS    `yaml:"tls" flag:"dedup-" env:"WALHOUSE_REDIS_"` // --dedup-tls…, WALHOUSE_REDIS_TLS…
}

// ClickHouse is where the sink loads and the query API reads.
type ClickHouse struct {
	URL          string `yaml:"url" flag:"clickhouse" env:"WALHOUSE_CLICKHOUSE_URL"`
	Database     string `yaml:"database" flag:"database" env:"WALHOUSE_CLICKHOUSE_DATABASE"`
	PasswordFile string `yaml:"password_file" flag:"clickhouse-password-file" secretvar:"WALHOUSE_CLICKHOUSE_PASSWORD"`
	PasswordEnv  string `yaml:"password_env" flag:"clickhouse-password-file" secret:"env"`
	// Cluster is the ClickHouse cluster (remote_servers) the sink keeps
	// its tables on and serve reads through; empty: one server.
	Cluster string `yaml:"cluster" flag:"cluster" env:"WALHOUSE_CLICKHOUSE_CLUSTER"`
}

// Erasure is GDPR erasure (docs/erasure.md) and the cleanup of deleted
// rows: the key every sink, serve and walhouse erase share.
type Erasure struct {
	KeyFile         string        `yaml:"key_file" flag:"erasure-key-file" secretvar:"WALHOUSE_ERASURE_KEY"`
	KeyEnv          string        `yaml:"key_env" flag:"erasure-key-file" secret:"env"`
	Refresh         time.Duration `yaml:"refresh" flag:"erasure-refresh" cmd:"sink"`
	MaxAge          time.Duration `yaml:"max_age" flag:"erasure-max-age" cmd:"sink"`
	Settle          time.Duration `yaml:"settle" flag:"erasure-settle" cmd:"serve"`
	CleanupInterval time.Duration `yaml:"cleanup_interval" flag:"cleanup-interval" cmd:"sink"`
	CleanupMinAge   time.Duration `yaml:"cleanup_min_age" flag:"cleanup-min-age" cmd:"sink"`
}

// Verify is walhouse verify: which tables, how often, and what a round
// may cost PostgreSQL and ClickHouse (docs/verify.md).
type Verify struct {
	Tables           []string      `yaml:"tables" flag:"tables" cmd:"verify"`
	Every            time.Duration `yaml:"every" flag:"every" cmd:"verify"`
	Report           string        `yaml:"report" flag:"report" cmd:"verify"`
	Repair           bool          `yaml:"repair" flag:"repair" cmd:"verify"`
	MetricsAddr      string        `yaml:"metrics_addr" flag:"metrics-addr" env:"WALHOUSE_VERIFY_METRICS_ADDR" cmd:"verify"`
	BucketRows       int           `yaml:"bucket_rows" flag:"bucket-rows" cmd:"verify"`
	MaxBucketRows    int           `yaml:"max_bucket_rows" flag:"max-bucket-rows" cmd:"verify"`
	MaxMismatches    int           `yaml:"max_mismatches" flag:"max-mismatches" cmd:"verify"`
	RowsPerSecond    int           `yaml:"rows_per_second" flag:"rows-per-second" cmd:"verify"`
	StatementTimeout time.Duration `yaml:"statement_timeout" flag:"statement-timeout" cmd:"verify"`
	LoadWait         time.Duration `yaml:"load_wait" flag:"load-wait" cmd:"verify"`
	MaxExecutionTime time.Duration `yaml:"max_execution_time" flag:"max-execution-time" cmd:"verify"`
	MaxMemoryUsage   int64         `yaml:"max_memory_usage" flag:"max-memory-usage" cmd:"verify"`
}

// API is the query API of walhouse serve.
type API struct {
	Listen           string        `yaml:"listen" flag:"listen" env:"WALHOUSE_LISTEN" cmd:"serve"`
	KeysFile         string        `yaml:"keys_file" flag:"keys" cmd:"serve,apikey"`
	KeysReload       time.Duration `yaml:"keys_reload" flag:"keys-reload" cmd:"serve"`
	CORSOrigins      []string      `yaml:"cors_origins" flag:"cors-origin" cmd:"serve"`
	JWT              APIJWT        `yaml:"jwt"`
	CursorSecretFile string        `yaml:"cursor_secret_file" flag:"cursor-secret-file" env:"WALHOUSE_CURSOR_SECRET_FILE" secretvar:"WALHOUSE_CURSOR_SECRET" cmd:"serve"`
	CursorSecretEnv  string        `yaml:"cursor_secret_env" flag:"cursor-secret-file" secret:"env" cmd:"serve"`
	AuditKeyFile     string        `yaml:"audit_key_file" flag:"audit-key-file" secretvar:"WALHOUSE_AUDIT_KEY"`
	CaptureURLs      []string      `yaml:"capture_urls" flag:"capture-url" env:"WALHOUSE_CAPTURE_URL" cmd:"serve"`
	CaptureTimeout   time.Duration `yaml:"capture_timeout" flag:"capture-timeout" cmd:"serve"`
	LagHistory       LagHistory    `yaml:"lag_history"`
	Tokens           APITokens     `yaml:"tokens"`
	Limits           APILimits     `yaml:"limits"`
	HTTP             APIHTTPLimits `yaml:"http"`
}

// APIJWT accepts bearer JWTs beside API keys, the tenant from a claim.
type APIJWT struct {
	JWKS        string `yaml:"jwks" flag:"jwt-jwks" cmd:"serve"`
	TenantClaim string `yaml:"tenant_claim" flag:"jwt-tenant-claim" cmd:"serve"`
	Issuer      string `yaml:"issuer" flag:"jwt-issuer" cmd:"serve"`
	Audience    string `yaml:"audience" flag:"jwt-audience" cmd:"serve"`
	Scopes      string `yaml:"scopes" flag:"jwt-scopes" cmd:"serve"`
}

// LagHistory is the lag history serve samples for /v1/lag/history and
// the status page's charts.
type LagHistory struct {
	Interval time.Duration `yaml:"interval" flag:"lag-history-interval" cmd:"serve"`
	Span     time.Duration `yaml:"span" flag:"lag-history-span" cmd:"serve"`
}

// APITokens are the reads that wait for consistency tokens
// (docs/consistency.md).
type APITokens struct {
	Source  string        `yaml:"source" flag:"token-source" cmd:"serve"`
	Wait    time.Duration `yaml:"wait" flag:"token-wait" cmd:"serve"`
	MaxWait time.Duration `yaml:"max_wait" flag:"max-token-wait" cmd:"serve"`
}

// APILimits bound what one query or export may cost.
type APILimits struct {
	DefaultRows                   int           `yaml:"default_rows" flag:"default-limit" cmd:"serve"`
	MaxRows                       int           `yaml:"max_rows" flag:"max-limit" cmd:"serve"`
	MaxExecutionTime              time.Duration `yaml:"max_execution_time" flag:"max-execution-time" cmd:"serve"`
	MaxResultRows                 int           `yaml:"max_result_rows" flag:"max-result-rows" cmd:"serve"`
	MaxResultBytes                int64         `yaml:"max_result_bytes" flag:"max-result-bytes" env:"WALHOUSE_MAX_RESULT_BYTES" cmd:"serve"`
	MaxPageBytes                  int64         `yaml:"max_page_bytes" flag:"max-page-bytes" env:"WALHOUSE_MAX_PAGE_BYTES" cmd:"serve"`
	MaxConcurrent                 int           `yaml:"max_concurrent" flag:"max-concurrent" cmd:"serve"`
	MaxInFlight                   int           `yaml:"max_in_flight" flag:"max-in-flight" env:"WALHOUSE_MAX_IN_FLIGHT" cmd:"serve"`
	MaxMemoryUsage                int64         `yaml:"max_memory_usage" flag:"max-memory-usage" env:"WALHOUSE_MAX_MEMORY_USAGE" cmd:"serve"`
	MaxBytesBeforeExternalGroupBy int64         `yaml:"max_bytes_before_external_group_by" flag:"max-bytes-before-external-group-by" env:"WALHOUSE_MAX_BYTES_BEFORE_EXTERNAL_GROUP_BY" cmd:"serve"`
	MaxBytesBeforeExternalSort    int64         `yaml:"max_bytes_before_external_sort" flag:"max-bytes-before-external-sort" env:"WALHOUSE_MAX_BYTES_BEFORE_EXTERNAL_SORT" cmd:"serve"`
	MaxThreads                    int           `yaml:"max_threads" flag:"max-threads" env:"WALHOUSE_MAX_THREADS" cmd:"serve"`
	ExportMaxTime                 time.Duration `yaml:"export_max_time" flag:"export-max-time" env:"WALHOUSE_EXPORT_MAX_TIME" cmd:"serve,export"`
	ExportMaxRows                 int64         `yaml:"export_max_rows" flag:"export-max-rows" env:"WALHOUSE_EXPORT_MAX_ROWS" cmd:"serve,export"`
	ExportMaxBytes                int64         `yaml:"export_max_bytes" flag:"export-max-bytes" env:"WALHOUSE_EXPORT_MAX_BYTES" cmd:"serve,export"`
}

// APIHTTPLimits bound the HTTP server.
type APIHTTPLimits struct {
	ReadHeaderTimeout time.Duration `yaml:"read_header_timeout" flag:"read-header-timeout" env:"WALHOUSE_READ_HEADER_TIMEOUT" cmd:"serve"`
	ReadTimeout       time.Duration `yaml:"read_timeout" flag:"read-timeout" env:"WALHOUSE_READ_TIMEOUT" cmd:"serve"`
	WriteTimeout      time.Duration `yaml:"write_timeout" flag:"write-timeout" env:"WALHOUSE_WRITE_TIMEOUT" cmd:"serve"`
	IdleTimeout       time.Duration `yaml:"idle_timeout" flag:"idle-timeout" env:"WALHOUSE_IDLE_TIMEOUT" cmd:"serve"`
	MaxHeaderBytes    int           `yaml:"max_header_bytes" flag:"max-header-bytes" env:"WALHOUSE_MAX_HEADER_BYTES" cmd:"serve"`
}

// TableLayout is the shape of one ClickHouse table: its flag's value is
// this struct as JSON (schema.Layout has the same fields and the rules).
type TableLayout struct {
	// OrderBy is the sorting key: the tenant column first, and every
	// primary-key column.
	OrderBy []string `yaml:"order_by" json:"order_by,omitempty"`
	// PartitionBy is a partition expression, e.g. toYYYYMM(created_at).
	PartitionBy string `yaml:"partition_by" json:"partition_by,omitempty"`
	// Settings are MergeTree settings of the table.
	Settings map[string]string `yaml:"settings" json:"settings,omitempty"`
	// ExcludeColumns never leave PostgreSQL: capture reads them neither in
	// copies nor in the stream.
	ExcludeColumns []string `yaml:"exclude_columns" json:"exclude_columns,omitempty"`
	// Columns override some columns' ClickHouse types, by name.
	Columns map[string]ColumnLayout `yaml:"columns" json:"columns,omitempty"`
}

// ColumnLayout is one column's ClickHouse type in a TableLayout.
type ColumnLayout struct {
	// Type is LowCardinality(String) (text, enums), Decimal(P, S),
	// String or Float64 (numeric), DateTime64(P) (timestamps), JSON
	// (json, jsonb), or Enum8, Enum16 or Enum (enums: built from their
	// labels; Enum is the narrower that holds them).
	Type string `yaml:"type" json:"type"`
	// OnOverflow is dead_letter (the default: a value the type cannot
	// hold exactly goes to the dead letters) or, for Decimal(P, S), clamp
	// (a value beyond the range is stored as the bound).
	OnOverflow string `yaml:"on_overflow" json:"on_overflow,omitempty"`
}

// Log is how every command logs.
type Log struct {
	Level  string `yaml:"level" flag:"log-level" env:"WALHOUSE_LOG_LEVEL"`
	Format string `yaml:"format" flag:"log-format" env:"WALHOUSE_LOG_FORMAT"`
}

// Idempotency is the retention of Layer 1's key table
// (walhouse.idempotency_keys), applied by walhouse keys prune.
type Idempotency struct {
	RetentionDays int    `yaml:"retention_days" flag:"retention-days" env:"DATA_IDEMPOTENCY_KEY_RETENTION_DAYS" cmd:"keys"`
	PruneBatch    int    `yaml:"prune_batch" flag:"batch-size" cmd:"keys"`
	PruneAt       string `yaml:"prune_at" flag:"daily-at" env:"WALHOUSE_IDEMPOTENCY_PRUNE_AT" cmd:"keys"`
}
