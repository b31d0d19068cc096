package config

import (
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/walhouse/walhouse/record"
)

// validate checks the values the file gives (only those: a key it leaves
// out keeps its flag's default, checked where the flag is used) and
// returns every problem.
func (c *Config) validate() []Problem {
	var ps []Problem
	bad := func(key, format string, a ...any) {
		if c.Has(key) {
			ps = append(ps, Problem{Key: key, Line: c.set[key], Msg: fmt.Sprintf(format, a...)})
		}
	}
	oneOf := func(key, v string, allowed ...string) {
		if !slices.Contains(allowed, v) {
			bad(key, "%q is not allowed; want %s", v, strings.Join(allowed, " or "))
		}
	}
	atLeast := func(key string, v, least int64) {
		if v < least {
			bad(key, "%d is too small; want at least %d", v, least)
		}
	}
	positive := func(key string, d time.Duration) {
		if d <= 0 {
			bad(key, "%s is not a positive duration; want e.g. 10s", d)
		}
	}
	inlinePassword := func(key, dsn, how string) {
		// Only a file must not hold a password: a flag or a variable
		// may (the process list and the environment are not
		// checked in).
		if !c.flagValues && hasPassword(dsn) {
			bad(key, "holds a password; secrets are never written in the configuration file: remove it from the URL and use %s", how)
		}
	}
	secret := func(prefix, fileKey, envKey, env string) {
		if c.Has(prefix+fileKey) && c.Has(prefix+envKey) {
			bad(prefix+envKey, "%s and %s both name the secret; keep one", prefix+fileKey, prefix+envKey)
		}
		if env != "" && !envName.MatchString(env) {
			bad(prefix+envKey, "%q is not an environment variable name (letters, digits and _, not starting with a digit)", env)
		}
	}

	s := &c.Source
	inlinePassword("source.postgres.url", s.Postgres.URL, "source.postgres.password_file or password_env")
	inlinePassword("source.postgres.primary_url", s.Postgres.PrimaryURL, "source.postgres.password_file or password_env (it applies to the primary too)")
	secret("source.postgres.", "password_file", "password_env", s.Postgres.PasswordEnv)
	for t := range s.TenantColumns {
		if strings.TrimSpace(t) == "" {
			bad("source.tenant_columns", "a table name is empty; want schema.table: column")
		}
	}
	cp := &c.Capture
	oneOf("capture.snapshot", cp.Snapshot, "initial", "never")
	atLeast("capture.snapshot_workers", int64(cp.SnapshotWorkers), 1)
	atLeast("capture.snapshot_chunk_pages", cp.SnapshotChunkPages, 1)
	atLeast("capture.snapshot_batch_rows", int64(cp.SnapshotBatchRows), 1)
	positive("capture.status_interval", cp.StatusInterval)
	if cp.HeartbeatInterval < 0 {
		bad("capture.heartbeat_interval", "%s is negative; want a duration, or 0 for no heartbeats", cp.HeartbeatInterval)
	}
	oneOf("capture.on_bad_row", cp.OnBadRow, "dead-letter", "stop")
	oneOf("capture.rewrite_copy", cp.RewriteCopy, "on", "off")
	atLeast("capture.rewrite_copy_max_rows", cp.RewriteCopyMaxRows, 0)
	if cp.EnvelopeVersion != 1 && cp.EnvelopeVersion != 2 {
		bad("capture.envelope_version", "%d is not an envelope version; want 2 (the default) or 1", cp.EnvelopeVersion)
	}
	if c.Has("capture.envelope_version") && c.Has("capture.snapshot_batch_rows") && cp.EnvelopeVersion == 1 && cp.SnapshotBatchRows > 1 {
		bad("capture.snapshot_batch_rows", "%d needs envelope_version 2: version 1 records carry one row each", cp.SnapshotBatchRows)
	}

	k := &c.Kafka
	if len(k.Brokers) == 0 {
		bad("kafka.brokers", "is empty; want host:port of at least one broker")
	}
	for _, b := range k.Brokers {
		if _, port, ok := strings.Cut(b, ":"); !ok || port == "" {
			bad("kafka.brokers", "%q is not host:port", b)
		}
	}
	if k.SASL.Mechanism != "" {
		oneOf("kafka.sasl.mechanism", strings.ToLower(k.SASL.Mechanism), "plain", "scram-sha-256", "scram-sha-512")
	}
	secret("kafka.sasl.", "password_file", "password_env", k.SASL.PasswordEnv)

	tp := &c.Topics
	atLeast("topics.partitions", int64(tp.Partitions), 1)
	if tp.ReplicationFactor == 0 || tp.ReplicationFactor < -1 || tp.ReplicationFactor > 32767 {
		bad("topics.replication_factor", "%d is not allowed; want -1 (the broker's default) or a number of replicas from 1", tp.ReplicationFactor)
	}
	if tp.MinInsyncReplicas == 0 || tp.MinInsyncReplicas < -1 {
		bad("topics.min_insync_replicas", "%d is not allowed; want -1 (the broker's default) or a number of replicas from 1", tp.MinInsyncReplicas)
	}
	oneOf("topics.durability", strings.ToLower(tp.Durability), "warn", "refuse", "off")
	if err := record.ValidateMaxBytes(tp.MaxRecordBytes); err != nil {
		bad("topics.max_record_bytes", "%v", err)
	}
	if strings.TrimSpace(tp.Prefix) == "" {
		bad("topics.prefix", "is empty; want a topic name prefix such as walhouse")
	}

	sk := &c.Sink
	atLeast("sink.max_batch", int64(sk.MaxBatch), 1)
	atLeast("sink.insert_parallelism", int64(sk.Parallelism), 1)
	positive("sink.max_wait", sk.MaxWait)
	if atLeast("sink.fetch_min_bytes", int64(sk.FetchMin), 1); sk.FetchMin > 1<<30 {
		bad("sink.fetch_min_bytes", "%d is too large; want at most %d (1 GiB)", sk.FetchMin, 1<<30)
	}
	oneOf("sink.mismatch_mode", sk.MismatchMode, "error", "warn")
	if sk.Group == "" {
		bad("sink.group", "is empty; want a consumer group name")
	}

	d := &c.Dedup
	inlinePassword("dedup.addr", d.Addr, "dedup.password_file or password_env")
	atLeast("dedup.ttl_hours", int64(d.TTLHours), 1)
	secret("dedup.", "password_file", "password_env", d.PasswordEnv)

	ch := &c.ClickHouse
	inlinePassword("clickhouse.url", ch.URL, "clickhouse.password_file or password_env")
	if c.Has("clickhouse.url") {
		u, err := url.Parse(ch.URL)
		if err != nil || !slices.Contains([]string{"clickhouse", "tcp", "http", "https"}, u.Scheme) || u.Host == "" {
			bad("clickhouse.url", "%q is not a ClickHouse DSN; want clickhouse://host:9000 (native protocol) or http://host:8123 (HTTP interface)", ch.URL)
		}
	}
	if strings.TrimSpace(ch.Database) == "" {
		bad("clickhouse.database", "is empty; want a database name such as walhouse")
	}
	secret("clickhouse.", "password_file", "password_env", ch.PasswordEnv)

	a := &c.API
	secret("api.", "cursor_secret_file", "cursor_secret_env", a.CursorSecretEnv)
	l := &a.Limits
	atLeast("api.limits.default_rows", int64(l.DefaultRows), 1)
	atLeast("api.limits.max_rows", int64(l.MaxRows), 1)
	positive("api.limits.max_execution_time", l.MaxExecutionTime)
	atLeast("api.limits.max_result_rows", int64(l.MaxResultRows), 0)
	atLeast("api.limits.max_result_bytes", l.MaxResultBytes, 1)
	atLeast("api.limits.max_page_bytes", l.MaxPageBytes, 1)
	atLeast("api.limits.max_concurrent", int64(l.MaxConcurrent), 1)
	atLeast("api.limits.max_in_flight", int64(l.MaxInFlight), 1)
	atLeast("api.limits.max_memory_usage", l.MaxMemoryUsage, 1)
	atLeast("api.limits.max_bytes_before_external_group_by", l.MaxBytesBeforeExternalGroupBy, 0)
	atLeast("api.limits.max_bytes_before_external_sort", l.MaxBytesBeforeExternalSort, 0)
	atLeast("api.limits.max_threads", int64(l.MaxThreads), 1)
	positive("api.limits.export_max_time", l.ExportMaxTime)
	atLeast("api.limits.export_max_rows", l.ExportMaxRows, 1)
	atLeast("api.limits.export_max_bytes", l.ExportMaxBytes, 1)
	if c.Has("api.limits.default_rows") && c.Has("api.limits.max_rows") && l.DefaultRows > l.MaxRows {
		bad("api.limits.default_rows", "%d is above api.limits.max_rows (%d)", l.DefaultRows, l.MaxRows)
	}
	h := &a.HTTP
	positive("api.http.read_header_timeout", h.ReadHeaderTimeout)
	positive("api.http.read_timeout", h.ReadTimeout)
	positive("api.http.write_timeout", h.WriteTimeout)
	positive("api.http.idle_timeout", h.IdleTimeout)
	atLeast("api.http.max_header_bytes", int64(h.MaxHeaderBytes), 1024)

	positive("api.capture_timeout", a.CaptureTimeout)
	positive("api.lag_history.interval", a.LagHistory.Interval)
	positive("api.lag_history.span", a.LagHistory.Span)

	e := &c.Erasure
	secret("erasure.", "key_file", "key_env", e.KeyEnv)
	positive("erasure.refresh", e.Refresh)
	if e.MaxAge < 0 {
		bad("erasure.max_age", "%s is negative; want a duration, or 0 for twice erasure.refresh", e.MaxAge)
	}
	positive("erasure.settle", e.Settle)
	if e.CleanupInterval < 0 {
		bad("erasure.cleanup_interval", "%s is negative; want a duration, or 0 for no scheduled cleanup", e.CleanupInterval)
	}
	positive("erasure.cleanup_min_age", e.CleanupMinAge)

	id := &c.Idempotency
	atLeast("idempotency.retention_days", int64(id.RetentionDays), 1)
	atLeast("idempotency.prune_batch", int64(id.PruneBatch), 1)
	if _, err := time.Parse("15:04", id.PruneAt); err != nil {
		bad("idempotency.prune_at", "%q is not a time of day; want HH:MM in UTC, e.g. 03:00", id.PruneAt)
	}

	v := &c.Verify
	for _, t := range v.Tables {
		if sch, tbl, ok := strings.Cut(t, "."); !ok || sch == "" || tbl == "" {
			bad("verify.tables", "%q is not schema.table", t)
		}
	}
	if v.Every < 0 {
		bad("verify.every", "%s is negative; want a duration, or 0 for one round", v.Every)
	}
	atLeast("verify.bucket_rows", int64(v.BucketRows), 1)
	atLeast("verify.max_bucket_rows", int64(v.MaxBucketRows), 1)
	atLeast("verify.max_mismatches", int64(v.MaxMismatches), 1)
	atLeast("verify.rows_per_second", int64(v.RowsPerSecond), 0)
	positive("verify.statement_timeout", v.StatementTimeout)
	positive("verify.load_wait", v.LoadWait)
	positive("verify.max_execution_time", v.MaxExecutionTime)
	atLeast("verify.max_memory_usage", v.MaxMemoryUsage, 1)

	ps = append(ps, c.validateLayouts()...)
	oneOf("log.level", strings.ToLower(c.Log.Level), "debug", "info", "warn", "error")
	oneOf("log.format", c.Log.Format, "text", "json")
	return ps
}

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// hasPassword reports whether a DSN holds a password: user:pass@ or a
// password parameter in a URL, password= in a libpq keyword/value string.
func hasPassword(dsn string) bool {
	if strings.Contains(dsn, "://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return strings.Contains(dsn, "@") // unparsable: be careful
		}
		_, has := u.User.Password()
		return has || u.Query().Has("password")
	}
	for _, field := range strings.Fields(dsn) {
		if k, _, ok := strings.Cut(field, "="); ok && strings.TrimSpace(k) == "password" {
			return true
		}
	}
	return false
}
