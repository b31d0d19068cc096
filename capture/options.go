package capture

import (
	"context"
	"errors"
	"fmt"
	"path"
	"regexp"
	"strings"
	"time"

	"github.com/walhouse/walhouse/internal/failpoint"
	"github.com/walhouse/walhouse/record"
	"github.com/walhouse/walhouse/schema"
)

// This file holds every option of New, as franz-go's kgo keeps its
// client's options in config.go: the config they set, its defaults (all in
// defaults), then the options by section, each saying what it does and its
// default, then validate, which New runs on the whole config.

// Option configures a Capturer. Options are applied in order by New, which
// then validates the whole configuration at once.
type Option func(*config)

// config is what the options set; defaults gives its starting values.
type config struct {
	connString string // New's argument

	// Source: the database, its slot and its publication.
	slot           string
	createSlot     bool
	failover       bool // create the slot with failover = true (failover.go)
	publication    string
	tables         []string
	exclude        []string
	includeKeys    bool          // capture IdempotencyKeyTable when published
	primary        string        // the primary's connection string, for a standby (standby.go)
	reconnect      time.Duration // how long Run reconnects after losing PostgreSQL (failover.go)
	statusInterval time.Duration
	sourceID       string

	// Topics.
	topicPrefix string
	partitions  int32
	replication int16
	topics      TopicCreator

	// Records.
	tenantColumn    string
	tenantColumns   map[string]string
	layouts         map[string]schema.Layout // by "schema.table"
	defaultTenant   string
	envelope        int
	schemas         SchemaRegistry
	maxRecordBytes  int
	maxPendingBytes int
	onBadRow        BadRowPolicy
	dlqTopic        string // default "<prefix>-dlq"

	// Snapshots and copies.
	snapshot      bool
	resnapshot    map[string]bool
	resnapshotAll bool
	workers       int
	chunkPages    int64
	// snapshotBatchRows is the most rows a snapshot record carries
	// (envelope version 2); 1 sends each row as a record of its own.
	snapshotBatchRows int
	state             StateStore
	// rewriteCopy copies a table again after DDL rewrote it (rewrite.go);
	// rewriteCopyMaxRows (0: no limit) marks larger tables inexact instead.
	rewriteCopy        bool
	rewriteCopyMaxRows int64
	// recopies are the sinks' re-copy requests (recopy.go); nil: none.
	recopies RecopyRequests

	// Heartbeats, marks and progress.
	heartbeat     time.Duration
	markInterval  time.Duration
	progressEvery time.Duration

	failpoints *failpoint.Set
	nameErrs   []error // table names given to options that do not parse
}

// defaults returns the config before any option: every default of the
// options below is here. Settings left at their zero value are listed too,
// so that this is the one place to read them.
func defaults() config {
	return config{
		// Source.
		slot:           "walhouse",
		createSlot:     true,
		failover:       false,
		publication:    "walhouse",
		tables:         nil, // the publication's tables
		exclude:        nil,
		includeKeys:    false,
		primary:        "",
		reconnect:      0, // Run returns at the first lost connection
		statusInterval: 5 * time.Second,
		sourceID:       "", // "<system identifier>/<database>", read at start

		// Topics.
		topicPrefix: "walhouse",
		partitions:  6,
		replication: -1, // the broker's default.replication.factor
		topics:      nil,

		// Records.
		tenantColumn:    "tenant_id",
		tenantColumns:   map[string]string{},
		layouts:         map[string]schema.Layout{},
		defaultTenant:   "", // tables without a tenant column are refused
		envelope:        record.EnvelopeVersion,
		schemas:         nil,
		maxRecordBytes:  record.DefaultMaxBytes,
		maxPendingBytes: 64 << 20,
		onBadRow:        DeadLetterBadRows,
		dlqTopic:        "", // validate sets "<prefix>-dlq"

		// Snapshots and copies.
		snapshot:           true,
		resnapshot:         map[string]bool{},
		workers:            4,
		chunkPages:         4096,
		snapshotBatchRows:  1000,
		state:              nil, // an interrupted snapshot starts over
		rewriteCopy:        true,
		rewriteCopyMaxRows: 0, // no limit
		recopies:           nil,

		// Heartbeats, marks and progress.
		heartbeat:     10 * time.Second,
		markInterval:  DefaultMarkInterval,
		progressEvery: 30 * time.Second,
	}
}

// Source: the database, its slot and its publication.
// ---------------------------------------------------

// WithSlot sets the logical replication slot name (default "walhouse").
// The slot is created on first start unless WithoutSlotCreation is given.
func WithSlot(name string) Option { return func(c *config) { c.slot = name } }

// WithoutSlotCreation makes New fail instead of creating a missing slot, for
// deployments where slots are managed by hand. By default a missing slot
// is created.
func WithoutSlotCreation() Option { return func(c *config) { c.createSlot = false } }

// WithFailoverSlot creates the slot with failover = true (PostgreSQL 17+),
// and turns failover on for an existing slot that lacks it
// (ALTER_REPLICATION_SLOT), so that the standbys synchronize it. Off by
// default.
func WithFailoverSlot() Option { return func(c *config) { c.failover = true } }

// WithPublication sets the publication name (default "walhouse"). A missing
// publication is created for the tables given with WithTables.
func WithPublication(name string) Option { return func(c *config) { c.publication = name } }

// WithTables names the tables to capture ("schema.table" or "table" for the
// public schema). They are added to the publication if missing. Without it,
// the publication's existing tables are captured.
func WithTables(tables ...string) Option {
	return func(c *config) { c.tables = append(c.tables, tables...) }
}

// WithExcludeTables leaves out the published tables whose "schema.table"
// name matches one of the patterns (path.Match syntax: "audit.*",
// "public.tmp_*"): no snapshot, no records. It is the way to capture most of
// a publication that is not walhouse's own, such as FOR ALL TABLES.
// Default: none; walhouse's own tables are left out whatever the patterns
// (see IdempotencyKeyTable).
func WithExcludeTables(patterns ...string) Option {
	return func(c *config) { c.exclude = append(c.exclude, patterns...) }
}

// IdempotencyKeyTable is the key table of Layer 1 (the idempotency
// package's KeyTable). Capture leaves it out of the pipeline, also from a
// publication FOR ALL TABLES or FOR TABLES IN SCHEMA walhouse, unless
// WithIdempotencyKeys asks for it: its rows are request fingerprints and
// stored responses, not data of the application, and it is pruned daily.
const IdempotencyKeyTable = "walhouse.idempotency_keys"

// messageKeyTable holds the key of capture's WAL messages (see
// messages.go); it is never captured, whatever the publication.
const messageKeyTable = "walhouse.message_key"

// WithIdempotencyKeys captures IdempotencyKeyTable when the publication
// has it (name it with WithTables to add it); by default it is left out.
func WithIdempotencyKeys() Option { return func(c *config) { c.includeKeys = true } }

// WithPrimary gives the connection string of the primary, for a capture
// whose connection string names a physical standby (PostgreSQL 16+): the
// publication, the DDL event trigger and the heartbeats are written there,
// and slot creation asks it to log a standby snapshot
// (pg_log_standby_snapshot) so that an idle primary does not hold it up.
// On a primary it is not used. Default: none, capture's connection is to
// the primary.
func WithPrimary(connString string) Option { return func(c *config) { c.primary = connString } }

// WithReconnect makes Run reconnect when it loses a connection
// (PostgreSQL restarting or failing over, a network cut, also towards
// Kafka) instead of returning, for up to d from the
// moment the connection was lost; then it returns the last error. Each
// reconnection starts over from the slot's confirmed position, so nothing
// is lost and what is read again is produced again with the same eventIds.
// Default 0: Run returns at the first lost connection.
func WithReconnect(d time.Duration) Option { return func(c *config) { c.reconnect = d } }

// WithStatusInterval sets how often the confirmed position is reported to
// PostgreSQL (default 5s). PostgreSQL's wal_sender_timeout must be longer.
func WithStatusInterval(d time.Duration) Option { return func(c *config) { c.statusInterval = d } }

// WithSourceID sets the source identity that is part of every eventId
// (default "<system identifier>/<database>"). Change it only together with a
// new slot: records re-read under another id are not recognised as
// duplicates.
func WithSourceID(id string) Option { return func(c *config) { c.sourceID = id } }

// Topics.
// -------

// WithTopicPrefix sets the Kafka topic prefix (default "walhouse"); a table's
// topic is "<prefix>.<schema>.<table>".
func WithTopicPrefix(prefix string) Option { return func(c *config) { c.topicPrefix = prefix } }

// WithTopicPartitions sets the partition count of topics walhouse creates
// (default 6). Existing topics are left as they are.
func WithTopicPartitions(n int32) Option { return func(c *config) { c.partitions = n } }

// WithTopicReplication sets the replication factor of topics walhouse
// creates (default -1: the broker's default.replication.factor).
func WithTopicReplication(n int16) Option { return func(c *config) { c.replication = n } }

// WithTopicCreator makes capture create missing topics through tc. Without
// it, topics must exist (or the broker must create them on first use).
func WithTopicCreator(tc TopicCreator) Option { return func(c *config) { c.topics = tc } }

// Records: tenants, layouts, envelope, size bounds and bad rows.
// --------------------------------------------------------------

// WithTenantColumn sets the column that holds the tenant (default
// "tenant_id").
func WithTenantColumn(name string) Option { return func(c *config) { c.tenantColumn = name } }

// WithTableTenantColumn overrides the tenant column for one table
// ("schema.table" or "table"). Default: WithTenantColumn's for every table.
func WithTableTenantColumn(table, column string) Option {
	return func(c *config) {
		if _, _, err := splitTable(table); err != nil {
			c.nameErrs = append(c.nameErrs, err)
		}
		c.tenantColumns[qualify(table)] = column
	}
}

// WithTableLayout says the ClickHouse table of table ("schema.table") has
// the sorting key of l (schema.Layout): an update that changes one of its
// columns moves the row, so capture emits a delete of the old row (a
// tombstone at the old position), then the row, as for a key change. The
// columns must be in the table's replica identity, so the delete carries
// their old values: a table whose identity lacks one is left out, with
// the fix (REPLICA IDENTITY FULL). The sink must be given the same layout.
// Default: none.
func WithTableLayout(table string, l schema.Layout) Option {
	return func(c *config) {
		if _, _, err := splitTable(table); err != nil {
			c.nameErrs = append(c.nameErrs, err)
		}
		c.layouts[qualify(table)] = l
	}
}

// WithDefaultTenant maps tables that have no tenant column to this tenant.
// Without it such tables are refused.
func WithDefaultTenant(tenant string) Option { return func(c *config) { c.defaultTenant = tenant } }

// SchemaRegistry publishes the schemas that version 2 records refer to by
// schemaId. Register returns once s is stored, so a consumer that meets a
// record can always find its schema.
type SchemaRegistry interface {
	Register(ctx context.Context, s record.Schema) error
}

// WithSchemaRegistry sets where schemas are published: a registry.Writer
// of the pipeline's kafka.SchemasTopic, as cmd/walhouse wires it. Envelope
// version 2 (the default) needs it. Default: none.
func WithSchemaRegistry(r SchemaRegistry) Option { return func(c *config) { c.schemas = r } }

// WithEnvelopeVersion sets the record envelope version written (default
// record.EnvelopeVersion, 2). Version 1 records carry their column list
// instead of referring to the schema registry: larger, for consumers that
// cannot read the registry. The sink reads both.
func WithEnvelopeVersion(v int) Option { return func(c *config) { c.envelope = v } }

// WithMaxRecordBytes bounds the key plus value of one record capture
// produces (default record.DefaultMaxBytes, 64 MiB; at least 1 MiB, at most 1 GiB). The topics
// capture creates get a max.message.bytes that holds such a record, and
// existing ones are raised to it; the producer, the sink's consumer and
// its dead-letter producer must allow the same bound (see package kafka,
// RecordLimitOpts). A row whose record is larger fails with
// ErrRowTooLarge.
func WithMaxRecordBytes(n int) Option { return func(c *config) { c.maxRecordBytes = n } }

// WithMaxPendingBytes bounds the encoded bytes produced but not yet
// acknowledged by Kafka (default 64 MiB); reading pauses at the bound.
func WithMaxPendingBytes(n int) Option { return func(c *config) { c.maxPendingBytes = n } }

// WithOnBadRow sets what capture does with a change that cannot become a
// record (default DeadLetterBadRows).
func WithOnBadRow(p BadRowPolicy) Option { return func(c *config) { c.onBadRow = p } }

// WithDeadLetterTopic sets the topic of capture's dead letters (default
// "<prefix>-dlq", kafka.DeadLetterTopic: the sink's dead-letter topic, so
// that `walhouse dlq` shows both).
func WithDeadLetterTopic(topic string) Option { return func(c *config) { c.dlqTopic = topic } }

// Snapshots and copies.
// ---------------------

// WithoutSnapshot skips every snapshot, the initial one and those of tables
// that join the publication later: only changes reach Kafka. By default
// tables are copied.
func WithoutSnapshot() Option { return func(c *config) { c.snapshot = false } }

// WithResnapshot copies the named tables ("schema.table" or "table") again,
// whatever their saved progress says: the recovery after a ClickHouse table
// was dropped; "*" names every captured table. The copy runs next to the stream (see online.go); its rows
// have the snapshot version, so they never override newer changes.
// Default: none, a table's saved progress is followed.
func WithResnapshot(tables ...string) Option {
	return func(c *config) {
		for _, t := range tables {
			if t == "*" {
				c.resnapshotAll = true
				continue
			}
			if _, _, err := splitTable(t); err != nil {
				c.nameErrs = append(c.nameErrs, err)
			}
			c.resnapshot[qualify(t)] = true
		}
	}
}

// WithSnapshotWorkers sets how many connections read snapshot chunks in
// parallel (default 4).
func WithSnapshotWorkers(n int) Option { return func(c *config) { c.workers = n } }

// WithSnapshotChunkPages sets the size of a snapshot chunk in 8 KiB heap
// pages (default 4096, 32 MiB of table): the unit of parallelism and of
// resumption after a crash.
func WithSnapshotChunkPages(n int64) Option { return func(c *config) { c.chunkPages = n } }

// WithSnapshotBatchRows sets the most snapshot rows one Kafka record
// carries (default 1000; a batch also closes at 128 KiB). Snapshot rows
// travel in row batches (see package record, "Row batches"), which cost
// capture, the broker and the sink a fraction of what a record per row
// costs; 1 sends each row as a record of its own, for consumers of the
// topics that read only single records. Envelope version 1 always sends
// single records.
func WithSnapshotBatchRows(n int) Option { return func(c *config) { c.snapshotBatchRows = n } }

// WithStateStore sets where snapshot progress is kept. Without it an
// interrupted snapshot starts over.
func WithStateStore(s StateStore) Option { return func(c *config) { c.state = s } }

// WithoutRewriteCopy turns off the copy of a table that DDL rewrote
// without row changes (ALTER COLUMN … TYPE with a conversion, ADD COLUMN
// with a volatile default; on by default): such a table is marked inexact
// instead (walhouse_capture_tables_inexact), its ClickHouse rows keeping
// the values they had before the DDL until a --resnapshot.
func WithoutRewriteCopy() Option { return func(c *config) { c.rewriteCopy = false } }

// WithRewriteCopyMaxRows marks a rewritten table with more than n rows
// inexact instead of copying it again (default 0: copy any table). Capture
// counts at most n+1 rows to decide.
func WithRewriteCopyMaxRows(n int64) Option { return func(c *config) { c.rewriteCopyMaxRows = n } }

// WithRecopies makes capture answer the sinks' re-copy requests read from r
// (see recopy.go). It needs a state store (WithStateStore). Default: none,
// requests are not read.
func WithRecopies(r RecopyRequests) Option { return func(c *config) { c.recopies = r } }

// Heartbeats, marks and progress.
// -------------------------------

// WithHeartbeatInterval sets how often capture writes a heartbeat into the
// WAL (pg_logical_emit_message; on PostgreSQL 13, which cannot stream it,
// it notes the WAL position instead) and, when the stream has passed it,
// to every partition of every table's topic (default 10s; 0 disables).
// Heartbeats keep an idle database from pinning WAL and let the sink prove
// how fresh each table is.
func WithHeartbeatInterval(d time.Duration) Option { return func(c *config) { c.heartbeat = d } }

// DefaultMarkInterval is the default of WithMarkInterval.
const DefaultMarkInterval = 100 * time.Millisecond

// WithMarkInterval sets how often capture sends consistency marks: for 2 s
// after a table's change, a heartbeat at the server's WAL position to
// every partition of the table, so that a read waiting for a write's
// consistency token does not wait for the next heartbeat (marks.go;
// default DefaultMarkInterval; 0 disables them). At most one mark per
// partition of a recently changed table per interval, whatever the load.
func WithMarkInterval(d time.Duration) Option { return func(c *config) { c.markInterval = d } }

// WithProgressInterval sets how often capture logs a progress line: rows
// produced and their rate, the positions received and confirmed, the WAL
// the slot holds back, the producer backlog and the dead letters (default
// 30s; 0 turns it off).
func WithProgressInterval(d time.Duration) Option { return func(c *config) { c.progressEvery = d } }

// Tests.
// ------

// WithFailpoints sets the named points where fault tests make capture
// crash (package failpoint); without it, or with nil, they are off.
func WithFailpoints(s *failpoint.Set) Option {
	return func(c *config) { c.failpoints = s }
}

// Validation and the names options take.
// --------------------------------------

var slotName = regexp.MustCompile(`^[a-z0-9_]{1,63}$`)

func (c *config) validate() error {
	var errs []error
	if c.connString == "" {
		errs = append(errs, errors.New("PostgreSQL connection string is empty: set --pg or WALHOUSE_SOURCE_POSTGRES_URL (e.g. postgres://user@host:5432/db)"))
	}
	if !slotName.MatchString(c.slot) {
		errs = append(errs, fmt.Errorf("slot name %q is invalid: PostgreSQL allows 1-63 lower-case letters, digits and underscores", c.slot))
	}
	if c.publication == "" {
		errs = append(errs, errors.New("publication name is empty"))
	}
	if c.topicPrefix == "" || strings.ContainsAny(c.topicPrefix, " /\\") {
		errs = append(errs, fmt.Errorf("topic prefix %q is invalid: use letters, digits, '.', '_' or '-'", c.topicPrefix))
	}
	if c.partitions < 1 {
		errs = append(errs, fmt.Errorf("topic partitions %d: need at least 1", c.partitions))
	}
	if c.replication == 0 || c.replication < -1 {
		errs = append(errs, fmt.Errorf("topic replication factor %d: need -1 (broker default) or at least 1", c.replication))
	}
	if c.tenantColumn == "" {
		errs = append(errs, errors.New("tenant column is empty"))
	}
	if c.statusInterval <= 0 || c.statusInterval > time.Minute {
		errs = append(errs, fmt.Errorf("status interval %v: want between 0 and 1m (PostgreSQL's wal_sender_timeout defaults to 60s)", c.statusInterval))
	}
	if c.workers < 1 || c.workers > 64 {
		errs = append(errs, fmt.Errorf("snapshot workers %d: want 1 to 64", c.workers))
	}
	if c.chunkPages < 1 {
		errs = append(errs, fmt.Errorf("snapshot chunk pages %d: want at least 1", c.chunkPages))
	}
	if c.progressEvery < 0 {
		errs = append(errs, fmt.Errorf("progress interval %v: want 0 (off) or positive", c.progressEvery))
	}
	if c.reconnect < 0 {
		errs = append(errs, fmt.Errorf("reconnect timeout %v: want 0 (off) or positive", c.reconnect))
	}
	if c.markInterval < 0 || c.markInterval > 0 && c.markInterval < 10*time.Millisecond {
		errs = append(errs, fmt.Errorf("mark interval %v: want 0 (off) or at least 10ms", c.markInterval))
	}
	if c.heartbeat < 0 {
		errs = append(errs, fmt.Errorf("heartbeat interval %v: want 0 (off) or positive", c.heartbeat))
	}
	if c.rewriteCopyMaxRows < 0 {
		errs = append(errs, fmt.Errorf("rewrite copy max rows %d: want 0 (no limit) or positive", c.rewriteCopyMaxRows))
	}
	if c.envelope != 1 && c.envelope != 2 {
		errs = append(errs, fmt.Errorf("envelope version %d: want 1 or 2", c.envelope))
	}
	if c.envelope == 2 && c.schemas == nil {
		errs = append(errs, errors.New("envelope version 2 needs a schema registry: give WithSchemaRegistry (a registry.Writer), or use envelope version 1"))
	}
	if c.snapshotBatchRows < 1 || c.snapshotBatchRows > 100_000 {
		errs = append(errs, fmt.Errorf("snapshot batch rows %d: want 1 (a record per row) to 100000", c.snapshotBatchRows))
	}
	if c.onBadRow != DeadLetterBadRows && c.onBadRow != StopOnBadRow {
		errs = append(errs, fmt.Errorf("bad-row policy %v: want dead-letter or stop", c.onBadRow))
	}
	if c.dlqTopic == "" {
		c.dlqTopic = c.topicPrefix + "-dlq"
	}
	if c.maxPendingBytes < 1<<20 {
		errs = append(errs, fmt.Errorf("max pending bytes %d: want at least 1 MiB", c.maxPendingBytes))
	}
	if err := record.ValidateMaxBytes(c.maxRecordBytes); err != nil {
		errs = append(errs, err)
	}
	for _, t := range c.tables {
		if _, _, err := splitTable(t); err != nil {
			errs = append(errs, err)
		}
	}
	errs = append(errs, c.nameErrs...)
	for _, p := range c.exclude {
		if _, err := path.Match(p, ""); err != nil || p == "" {
			errs = append(errs, fmt.Errorf("exclude pattern %q is invalid: want \"table\" or \"schema.table\" with * ? [...] wildcards", p))
		}
	}
	for _, t := range c.tables {
		switch qt := qualify(t); {
		case qt == IdempotencyKeyTable && !c.includeKeys:
			errs = append(errs, fmt.Errorf("table %s is Layer 1's key table, which is not captured unless asked: add --capture-idempotency-keys (capture.WithIdempotencyKeys) or drop it from --tables", qt))
		case qt == messageKeyTable:
			errs = append(errs, fmt.Errorf("table %s holds capture's message key and is never captured: drop it from --tables", qt))
		case c.excluded(qt):
			errs = append(errs, fmt.Errorf("table %s is both named with --tables and excluded by --exclude-tables: drop one of them", qt))
		}
	}
	return errors.Join(errs...)
}

// excluded reports whether the table ("schema.table") is left out: one of
// walhouse's own tables, or a match of an exclude pattern. The patterns
// were checked by validate.
func (c *config) excluded(table string) bool {
	if table == messageKeyTable || (table == IdempotencyKeyTable && !c.includeKeys) {
		return true
	}
	for _, p := range c.exclude {
		if ok, _ := path.Match(qualify(p), table); ok {
			return true
		}
	}
	return false
}

// qualify returns the canonical "schema.table" form of a table name as
// users write it (see splitTable), or the name unchanged if it does not
// parse; validate reports that.
func qualify(table string) string {
	schema, name, err := splitTable(table)
	if err != nil {
		return table
	}
	return schema + "." + name
}

// splitTable parses a table name as users write it: "table" (in the public
// schema), "schema.table", or either part in double quotes as in SQL, for
// names holding dots or quotes: "Sales"."Order.Items" ("" is a quote inside
// quotes). Unquoted parts are taken as written, without folding to lower
// case. Schema names with dots are refused: capture's canonical form is
// "schema.table", split at the first dot.
func splitTable(s string) (schema, table string, err error) {
	var parts []string
	for rest := s; ; {
		var part string
		if strings.HasPrefix(rest, `"`) {
			var b strings.Builder
			i := 1
			for ; i < len(rest); i++ {
				if rest[i] == '"' {
					if i+1 < len(rest) && rest[i+1] == '"' {
						b.WriteByte('"')
						i++
						continue
					}
					break
				}
				b.WriteByte(rest[i])
			}
			if i >= len(rest) {
				return "", "", fmt.Errorf("table %q: unterminated quoted name", s)
			}
			part, rest = b.String(), rest[i+1:]
			if rest != "" && rest[0] != '.' {
				return "", "", fmt.Errorf("table %q: want a dot after a quoted name", s)
			}
		} else if len(parts) == 0 {
			part, _, _ = strings.Cut(rest, ".")
			rest = strings.TrimPrefix(s, part)
		} else {
			part, rest = rest, ""
		}
		if part == "" {
			return "", "", fmt.Errorf("table %q: empty name", s)
		}
		parts = append(parts, part)
		if rest == "" {
			break
		}
		rest = rest[1:] // the dot
		if rest == "" {
			return "", "", fmt.Errorf("table %q: empty name after the dot", s)
		}
	}
	switch {
	case len(parts) == 1:
		return "public", parts[0], nil
	case len(parts) == 2 && strings.Contains(parts[0], "."):
		return "", "", fmt.Errorf("table %q: schema names with dots are not supported", s)
	case len(parts) == 2:
		return parts[0], parts[1], nil
	}
	return "", "", fmt.Errorf("table %q: want table, schema.table, or quoted names (\"schema\".\"table\")", s)
}

// topicOf returns the topic of a "schema.table" name.
func (c *config) topicOf(table string) string {
	schema, name, _ := strings.Cut(table, ".")
	return record.TopicName(c.topicPrefix, schema, name)
}

// maxDeadLetterValue bounds the value of a dead letter: the change as a
// record must fit the dead-letter topic, whose messages hold a record of
// the bound plus room for the dead letter's headers.
func (c *config) maxDeadLetterValue() int { return c.maxRecordBytes }
