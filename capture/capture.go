package capture

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walhouse/walhouse/record"
)

// Producer is what capture needs of Kafka: asynchronous produce with a
// completion callback. *kgo.Client satisfies it.
type Producer interface {
	Produce(ctx context.Context, r *kgo.Record, promise func(*kgo.Record, error))
}

// ErrSlotInvalidated is returned when PostgreSQL has removed WAL the slot
// still needed (wal_status = lost): the changes in between are gone, and the
// tables must be resynchronised.
var ErrSlotInvalidated = errors.New("replication slot was invalidated")

// Capturer streams changes of the published tables into Kafka. Create it
// with New; Run does the work.
type Capturer struct {
	cfg      config
	producer Producer
	log      *slog.Logger

	rows      atomic.Int64 // records produced
	confirmed atomic.Uint64
	received  atomic.Uint64
	walEnd    atomic.Uint64 // the server's WAL end, from its messages
	lastEvent atomic.Int64  // Unix µs of the newest commit or heartbeat read
	acks      atomic.Pointer[ackTracker]
	dlq       *deadLetters
	ignored   *ignoredMessages
}

// New validates the configuration and returns a Capturer that reads from
// the PostgreSQL database at connString and produces through p.
func New(connString string, p Producer, opts ...Option) (*Capturer, error) {
	cfg := defaults()
	cfg.connString = connString
	for _, o := range opts {
		o(&cfg)
	}
	if p == nil {
		return nil, errors.New("capture: a Kafka producer is required")
	}
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("capture configuration: %w", err)
	}
	log := slog.Default().With("component", "capture")
	return &Capturer{cfg: cfg, producer: p, log: log, dlq: newDeadLetters(cfg.dlqTopic, log), ignored: newIgnoredMessages(log)}, nil
}

// Stats is a snapshot of a Capturer's progress.
type Stats struct {
	Rows      int64      // records produced since start
	Received  record.LSN // newest WAL position received
	Confirmed record.LSN // position confirmed to the slot
	// ServerWALEnd is the server's WAL end as of its last message;
	// ServerWALEnd − Confirmed is the WAL the slot holds back.
	ServerWALEnd record.LSN
	// LastEvent is the commit time of the newest transaction (or the time
	// of the newest heartbeat) read from the stream; zero before the first.
	LastEvent time.Time
	// PendingBytes is the producer backlog: bytes produced but not yet
	// acknowledged by Kafka.
	PendingBytes int
	// DeadLetters counts the changes sent to the dead-letter topic (and
	// acknowledged) since start.
	DeadLetters int64
}

// Stats returns the current progress; it is safe to call from any goroutine.
func (c *Capturer) Stats() Stats {
	st := Stats{Rows: c.rows.Load(), Received: record.LSN(c.received.Load()), Confirmed: record.LSN(c.confirmed.Load()), ServerWALEnd: record.LSN(c.walEnd.Load()), DeadLetters: c.dlq.count()}
	if us := c.lastEvent.Load(); us != 0 {
		st.LastEvent = time.UnixMicro(us).UTC()
	}
	if a := c.acks.Load(); a != nil {
		st.PendingBytes = a.pending()
	}
	return st
}

// Topics returns the Kafka topic names for the given "schema.table" names.
func (c *Capturer) Topics(tables []string) []string {
	out := make([]string, len(tables))
	for i, t := range tables {
		out[i] = c.cfg.topicOf(qualify(t))
	}
	return out
}

// Setup checks the database, creates the publication and slot if missing
// and returns the names of the captured tables ("schema.table"). Run calls
// it; it is exported so that tools can prepare a source without streaming.
func (c *Capturer) Setup(ctx context.Context) ([]string, error) {
	conn, err := connect(ctx, c.cfg.connString, false)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	s, err := prepare(ctx, conn, &c.cfg)
	if err != nil {
		return nil, err
	}
	return s.tables, nil
}

// Run streams until ctx is done or a fatal error occurs. On return every
// confirmed position is durable in Kafka.
func (c *Capturer) Run(ctx context.Context) error {
	catConn, err := connect(ctx, c.cfg.connString, false)
	if err != nil {
		return err
	}
	defer catConn.Close(context.WithoutCancel(ctx))
	src, err := prepare(ctx, catConn, &c.cfg)
	if err != nil {
		return err
	}
	if tc := c.cfg.topics; tc != nil && c.cfg.onBadRow == DeadLetterBadRows {
		// One partition, like the sink's: dead letters are rare, and
		// `walhouse dlq` reads them in order.
		if err := tc.CreateTopic(ctx, c.cfg.dlqTopic, 1, c.cfg.replication); err != nil {
			return err
		}
	}
	if leaves, err := partitionsAsTables(ctx, catConn, c.cfg.publication); err != nil {
		return err
	} else if len(leaves) > 0 {
		c.log.Warn("the publication sends partitions as tables of their own: each becomes its own topic and ClickHouse table, and the partitioned table none; to capture partitioned tables as one table, run ALTER PUBLICATION ... SET (publish_via_partition_root = true) and --resnapshot them",
			"publication", c.cfg.publication, "partitions", leaves)
	}
	var version int
	if err := catConn.QueryRow(ctx, "SELECT current_setting('server_version_num')::int").Scan(&version); err != nil {
		return fmt.Errorf("read the server version: %w", err)
	}
	if version >= 140000 {
		if err := installDDLTrigger(ctx, catConn); err != nil {
			c.log.Warn("DDL event trigger not installed: renames are followed only when capture keeps up", "err", err)
		}
	}
	key, err := loadMessageKey(ctx, catConn, c.log)
	if err != nil {
		return err
	}
	replConn, err := connect(ctx, c.cfg.connString, true)
	if err != nil {
		return err
	}
	defer replConn.Close(context.WithoutCancel(ctx))
	if err := c.checkDroppedSlot(ctx, catConn, src.tables); err != nil {
		return err
	}
	start, snapName, created, err := ensureSlot(ctx, catConn, replConn.PgConn(), &c.cfg)
	if err != nil {
		return err
	}
	online := newOnlineSnapshots(c, src.id)
	if c.cfg.snapshot {
		if created {
			// The exported snapshot lives as long as replConn stays idle:
			// the snapshot runs before replication starts on it.
			if err := c.snapshot(ctx, src.id, src.tables, start, snapName); err != nil {
				return err
			}
		} else {
			// Unfinished or missing copies run next to the stream; they are
			// planned first, so that the stream knows which tables are being
			// copied before it emits anything.
			plans, _, err := c.newSnapshotter(src.id, start, "").planAll(ctx, src.tables, false, false)
			if err != nil {
				return err
			}
			for _, p := range plans {
				online.add(p.Table, start, p)
			}
		}
	}
	snapCtx, stopSnapshots := context.WithCancel(ctx)
	go online.run(snapCtx)
	defer func() { stopSnapshots(); <-online.done }()
	c.log.Info("streaming", "slot", c.cfg.slot, "publication", c.cfg.publication, "start_lsn", start, "tables", len(src.tables), "source_id", src.id)
	cat := newCatalog(catConn)
	if err := cat.bootstrap(ctx, src.tables); err != nil {
		return err
	}
	s := &stream{
		c:        c,
		tables:   src.tables,
		messages: version >= 140000,
		parts:    map[string]int32{},
		conn:     replConn.PgConn(),
		cat:      cat,
		sourceID: src.id,
		rels:     map[uint32]*relation{},
		unjoined: map[uint32]*pglogrepl.RelationMessage{},
		acks:     c.newAcks(start),
		topics:   map[string]bool{},
		online:   online,
		key:      key,
	}
	if err := s.seedLeaves(ctx); err != nil {
		return err
	}
	return s.run(ctx, start)
}

func (c *Capturer) newAcks(start record.LSN) *ackTracker {
	a := newAckTracker(start)
	c.acks.Store(a)
	return a
}

// source is what prepare learned about the database.
type source struct {
	id     string
	tables []string
}

// connect opens a connection with the session settings that make
// PostgreSQL's text output of values stable and lossless.
func connect(ctx context.Context, connString string, replication bool) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(connString)
	if err != nil {
		return nil, fmt.Errorf("parse PostgreSQL connection string: %w", err)
	}
	for k, v := range map[string]string{
		"DateStyle":          "ISO, YMD",
		"TimeZone":           "UTC",
		"IntervalStyle":      "postgres",
		"extra_float_digits": "3",
		"bytea_output":       "hex",
		"application_name":   "walhouse",
	} {
		cfg.RuntimeParams[k] = v
	}
	if replication {
		cfg.RuntimeParams["replication"] = "database"
		// The replication protocol speaks only the simple query protocol.
		cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to PostgreSQL at %s:%d: %w; check that it is running and that the URL, user and pg_hba.conf allow walhouse in", cfg.Host, cfg.Port, err)
	}
	return conn, nil
}

// prepare checks that the database can be captured, creates or extends the
// publication and validates every published table.
func prepare(ctx context.Context, conn *pgx.Conn, cfg *config) (source, error) {
	var walLevel string
	if err := conn.QueryRow(ctx, "SHOW wal_level").Scan(&walLevel); err != nil {
		return source{}, fmt.Errorf("read wal_level: %w", err)
	}
	if walLevel != "logical" {
		return source{}, fmt.Errorf("PostgreSQL has wal_level=%s but logical replication needs wal_level=logical: set it in postgresql.conf (or ALTER SYSTEM SET wal_level = logical) and restart PostgreSQL", walLevel)
	}
	var sysID, db string
	if err := conn.QueryRow(ctx, "SELECT system_identifier::text, current_database() FROM pg_control_system()").Scan(&sysID, &db); err != nil {
		return source{}, fmt.Errorf("read the system identifier: %w", err)
	}
	src := source{id: cfg.sourceID}
	if src.id == "" {
		src.id = sysID + "/" + db
	}
	if err := ensurePublication(ctx, conn, cfg); err != nil {
		return source{}, err
	}
	published, err := publishedTables(ctx, conn, cfg.publication)
	if err != nil {
		return source{}, err
	}
	for _, t := range published {
		if !cfg.excluded(t) {
			src.tables = append(src.tables, t)
		}
	}
	if len(src.tables) == 0 {
		if len(published) > 0 {
			return source{}, fmt.Errorf("every table of publication %s is excluded by --exclude-tables: nothing to capture", cfg.publication)
		}
		return source{}, fmt.Errorf("publication %s has no tables: name them with --tables", cfg.publication)
	}
	for t := range cfg.resnapshot {
		if !slices.Contains(src.tables, t) {
			return source{}, fmt.Errorf("--resnapshot %s: the table is not captured from publication %s", t, cfg.publication)
		}
	}
	errs := []error{cfg.checkNames(src.tables)}
	for _, t := range src.tables {
		if err := checkTable(ctx, conn, cfg, t); err != nil {
			errs = append(errs, err)
		}
	}
	return src, errors.Join(errs...)
}

func ensurePublication(ctx context.Context, conn *pgx.Conn, cfg *config) error {
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_publication WHERE pubname = $1)", cfg.publication).Scan(&exists); err != nil {
		return fmt.Errorf("look up publication %s: %w", cfg.publication, err)
	}
	var missing []string
	for _, t := range cfg.tables {
		qt := qualify(t)
		var oid uint32
		schema, table, _ := strings.Cut(qt, ".")
		err := conn.QueryRow(ctx, `SELECT c.oid FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind IN ('r', 'p')`, schema, table).Scan(&oid)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("table %s does not exist in the source database", qt)
		}
		if err != nil {
			return fmt.Errorf("look up table %s: %w", qt, err)
		}
		var published bool
		if exists {
			// pg_publication_tables lists a partitioned table's partitions
			// instead of the table when the publication does not publish via
			// the root; pg_publication_rel holds the table as it was added.
			if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_publication_tables WHERE pubname = $1 AND schemaname = $2 AND tablename = $3)
				OR EXISTS (SELECT 1 FROM pg_catalog.pg_publication_rel r JOIN pg_catalog.pg_publication p ON p.oid = r.prpubid WHERE p.pubname = $1 AND r.prrelid = $4)`, cfg.publication, schema, table, oid).Scan(&published); err != nil {
				return fmt.Errorf("look up publication %s: %w", cfg.publication, err)
			}
		}
		if !published {
			missing = append(missing, pgx.Identifier{schema, table}.Sanitize())
		}
	}
	pub := pgx.Identifier{cfg.publication}.Sanitize()
	switch {
	case !exists && len(missing) == 0:
		return fmt.Errorf("publication %s does not exist: name the tables to capture with --tables, or create it with CREATE PUBLICATION", cfg.publication)
	case !exists:
		_, err := conn.Exec(ctx, fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s WITH (publish_via_partition_root = true)", pub, strings.Join(missing, ", ")))
		if err != nil {
			return fmt.Errorf("create publication %s: %w (the user needs CREATE on the database and ownership of the tables)", cfg.publication, err)
		}
	case len(missing) > 0:
		if _, err := conn.Exec(ctx, fmt.Sprintf("ALTER PUBLICATION %s ADD TABLE %s", pub, strings.Join(missing, ", "))); err != nil {
			return fmt.Errorf("add tables to publication %s: %w", cfg.publication, err)
		}
	}
	return nil
}

// checkTable refuses tables that capture could not map, before any row
// flows: no primary key, or no tenant column and no default tenant.
func checkTable(ctx context.Context, conn *pgx.Conn, cfg *config, qt string) error {
	schema, table, _ := strings.Cut(qt, ".")
	var (
		hasKey    bool
		hasTenant bool
		identity  string
	)
	tenantCol := cfg.relationTenant(schema, table)
	err := conn.QueryRow(ctx, `
		SELECT
		  EXISTS (SELECT 1 FROM pg_catalog.pg_index i WHERE i.indrelid = c.oid AND (i.indisprimary OR i.indisreplident)),
		  EXISTS (SELECT 1 FROM pg_catalog.pg_attribute a WHERE a.attrelid = c.oid AND a.attname = $3 AND a.attnum > 0 AND NOT a.attisdropped),
		  c.relreplident::text
		FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relname = $2`, schema, table, tenantCol).Scan(&hasKey, &hasTenant, &identity)
	if err != nil {
		return fmt.Errorf("inspect table %s: %w", qt, err)
	}
	var errs []error
	if !hasKey {
		errs = append(errs, fmt.Errorf("table %s has no primary key: walhouse needs one to identify rows in ClickHouse; add a PRIMARY KEY, or exclude the table from publication %s", qt, cfg.publication))
	}
	if identity == "n" {
		errs = append(errs, fmt.Errorf("table %s has REPLICA IDENTITY NOTHING, so updates and deletes cannot be captured: run ALTER TABLE %s REPLICA IDENTITY DEFAULT", qt, qt))
	}
	if !hasTenant && cfg.defaultTenant == "" {
		errs = append(errs, fmt.Errorf("table %s has no tenant column %q: add one, name another with --tenant-column-for %s=COLUMN, or map the table to a fixed tenant with --default-tenant", qt, tenantCol, qt))
	}
	return errors.Join(errs...)
}

// resyncAdvice says how to recover from a slot whose changes are lost.
func resyncAdvice(slot string) string {
	return fmt.Sprintf("changes were lost, so the tables must be copied again: let the sink load what is in Kafka, stop it, drop the source's ClickHouse tables, "+
		"run SELECT pg_drop_replication_slot('%s') if the slot still exists, then start capture with --resnapshot '*' and the sink", slot)
}

// checkDroppedSlot refuses to recreate a slot that capture streamed from
// before (its saved snapshot progress says so): the changes made while it
// was missing are lost, and a new slot's copy cannot repair ClickHouse
// (copied rows have version 0, below the rows it has, and rows deleted
// meanwhile would stay). Tables named with --resnapshot are being copied
// again deliberately.
func (c *Capturer) checkDroppedSlot(ctx context.Context, conn *pgx.Conn, tables []string) error {
	cfg := &c.cfg
	if cfg.state == nil || cfg.resnapshotAll || !cfg.createSlot {
		return nil
	}
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_replication_slots WHERE slot_name = $1)", cfg.slot).Scan(&exists); err != nil {
		return fmt.Errorf("look up replication slot %s: %w", cfg.slot, err)
	}
	if exists {
		return nil
	}
	var streamed []string
	for _, t := range tables {
		if cfg.resnapshot[t] {
			continue
		}
		raw, err := cfg.state.Load(ctx, stateKey(cfg.slot, t))
		if err != nil {
			return err
		}
		if raw != nil {
			streamed = append(streamed, t)
		}
	}
	if len(streamed) == 0 {
		return nil
	}
	return fmt.Errorf("%w: slot %s is gone, but capture streamed %s from it before (saved progress in the state topic); %s",
		ErrSlotInvalidated, cfg.slot, strings.Join(streamed, ", "), resyncAdvice(cfg.slot))
}

// ensureSlot returns the position to stream from, creating the slot if it
// is missing and allowed to; a new slot also returns its exported snapshot.
func ensureSlot(ctx context.Context, conn *pgx.Conn, repl *pgconn.PgConn, cfg *config) (start record.LSN, snapshot string, created bool, err error) {
	var (
		plugin, slotType, db string
		confirmed            *string
		walStatus            *string
	)
	err = conn.QueryRow(ctx, `
		SELECT plugin, slot_type, database, confirmed_flush_lsn::text, wal_status
		FROM pg_catalog.pg_replication_slots WHERE slot_name = $1`, cfg.slot).Scan(&plugin, &slotType, &db, &confirmed, &walStatus)
	if errors.Is(err, pgx.ErrNoRows) {
		if !cfg.createSlot {
			return 0, "", false, fmt.Errorf("replication slot %s does not exist and slot creation is disabled: create it with SELECT pg_create_logical_replication_slot('%s', 'pgoutput')", cfg.slot, cfg.slot)
		}
		action := "NOEXPORT_SNAPSHOT"
		if cfg.snapshot {
			action = "EXPORT_SNAPSHOT"
		}
		res, err := pglogrepl.CreateReplicationSlot(ctx, repl, cfg.slot, "pgoutput", pglogrepl.CreateReplicationSlotOptions{Mode: pglogrepl.LogicalReplication, SnapshotAction: action})
		if err != nil {
			return 0, "", false, fmt.Errorf("create replication slot %s: %w (is max_replication_slots reached? does the user have REPLICATION?)", cfg.slot, err)
		}
		lsn, err := record.ParseLSN(res.ConsistentPoint)
		if err != nil {
			return 0, "", false, fmt.Errorf("create replication slot %s: %w", cfg.slot, err)
		}
		slog.Default().Info("created replication slot", "component", "capture", "slot", cfg.slot, "consistent_point", lsn)
		return lsn, res.SnapshotName, true, nil
	}
	if err != nil {
		return 0, "", false, fmt.Errorf("look up replication slot %s: %w", cfg.slot, err)
	}
	if slotType != "logical" || plugin != "pgoutput" {
		return 0, "", false, fmt.Errorf("replication slot %s is a %s slot with plugin %q, not a logical pgoutput slot: choose another --slot name", cfg.slot, slotType, plugin)
	}
	if walStatus != nil && *walStatus == "lost" {
		return 0, "", false, fmt.Errorf("%w: slot %s has wal_status=lost; %s", ErrSlotInvalidated, cfg.slot, resyncAdvice(cfg.slot))
	}
	if confirmed == nil {
		return 0, "", false, fmt.Errorf("replication slot %s has no confirmed position yet; is another walhouse creating it?", cfg.slot)
	}
	start, err = record.ParseLSN(*confirmed)
	return start, "", false, err
}

// stream is the state of one replication session. Only run's goroutine
// touches it, apart from the ack tracker.
type stream struct {
	c        *Capturer
	conn     *pgconn.PgConn
	cat      *catalog
	sourceID string
	rels     map[uint32]*relation
	// unjoined holds descriptions of relations that are not captured
	// tables (yet): see the 'R' case of handle.
	unjoined map[uint32]*pglogrepl.RelationMessage
	acks     *ackTracker
	topics   map[string]bool // topics known to exist
	tables   []string        // captured tables, schema.table
	online   *onlineSnapshots
	polledAt time.Time                  // when the publication's tables were last listed
	refused  map[string]bool            // tables that joined the publication under a captured table's name
	leaves   map[string]map[string]bool // partitioned tables' leaves, as last listed
	messages bool                       // server streams logical messages (PostgreSQL 14+)
	key      messageKey                 // signs heartbeats, verifies walhouse's messages
	parts    map[string]int32
	partsAt  time.Time
	lastBeat time.Time
	// produceCtx outlives a cancelled run: shutdown waits for the acks.
	produceCtx context.Context

	// transaction in progress
	inTx       bool
	tx         *txAck
	commitLSN  record.LSN
	commitTime time.Time
	ordinal    uint32

	change   rowChange
	rec      record.Record
	values   []record.Value
	oldKey   []record.Value
	received record.LSN
}

func (s *stream) run(ctx context.Context, start record.LSN) error {
	err := pglogrepl.StartReplication(ctx, s.conn, s.c.cfg.slot, pglogrepl.LSN(start), pglogrepl.StartReplicationOptions{
		PluginArgs: s.pluginArgs(),
	})
	if err != nil {
		var pgErr *pgconn.PgError
		// PostgreSQL 15 says "cannot read from logical replication slot"
		// and puts "invalidated" in the detail.
		if errors.As(err, &pgErr) && pgErr.Code == "55000" && strings.Contains(pgErr.Message+" "+pgErr.Detail, "invalidated") {
			return fmt.Errorf("%w: %s (%s); %s", ErrSlotInvalidated, pgErr.Message, pgErr.Detail, resyncAdvice(s.c.cfg.slot))
		}
		return fmt.Errorf("start replication on slot %s: %w", s.c.cfg.slot, err)
	}
	s.received = start
	s.c.confirmed.Store(uint64(start))
	interval := s.c.cfg.statusInterval
	next := time.Now().Add(interval)
	var deadline time.Time
	netConn := s.conn.Conn()
	// Cancelling ctx wakes a blocked read at once.
	stopWake := context.AfterFunc(ctx, func() { _ = netConn.SetReadDeadline(time.Now()) })
	defer stopWake()
	defer func() { _ = netConn.SetReadDeadline(time.Time{}) }()
	s.produceCtx = context.WithoutCancel(ctx)
	lastLog := time.Now()
	var lastRows int64
	for {
		if err := ctx.Err(); err != nil {
			return s.shutdown(err)
		}
		if !time.Now().Before(next) {
			if err := s.sendStatus(ctx, false); err != nil {
				return err
			}
			if err := s.beat(ctx); err != nil {
				return err
			}
			if err := s.online.failure(); err != nil {
				return s.shutdown(err)
			}
			if err := s.pollTables(ctx); err != nil {
				return err
			}
			next = time.Now().Add(interval)
			if time.Since(lastLog) >= 30*time.Second {
				rows := s.c.rows.Load()
				s.c.log.Info("progress", "rows", rows, "rows_per_s", float64(rows-lastRows)/time.Since(lastLog).Seconds(), "received_lsn", s.received, "confirmed_lsn", record.LSN(s.c.confirmed.Load()))
				lastLog, lastRows = time.Now(), rows
			}
		}
		// A read deadline per status interval, not a context per message:
		// pgconn watches a non-background context with a goroutine hand-off
		// on every call, which costs more than decoding the message.
		if next != deadline {
			deadline = next
			_ = netConn.SetReadDeadline(deadline)
		}
		msg, err := s.conn.ReceiveMessage(context.Background())
		if err != nil {
			if isTimeout(err) && ctx.Err() == nil {
				continue
			}
			if ctx.Err() != nil {
				return s.shutdown(ctx.Err())
			}
			return fmt.Errorf("receive from PostgreSQL: %w", err)
		}
		switch m := msg.(type) {
		case *pgproto3.CopyData:
			if err := s.handleCopyData(ctx, m.Data); err != nil {
				return err
			}
		case *pgproto3.ErrorResponse:
			return fmt.Errorf("replication stream: %w", pgconn.ErrorResponseToPgError(m))
		default:
			return fmt.Errorf("replication stream: unexpected message %T", msg)
		}
	}
}

func (s *stream) pluginArgs() []string {
	args := []string{"proto_version '1'", "publication_names '" + strings.ReplaceAll(s.c.cfg.publication, "'", "''") + "'"}
	if s.messages {
		args = append(args, "messages 'true'")
	}
	return args
}

// heartbeatPrefix marks walhouse's logical messages in the WAL.
const heartbeatPrefix = "walhouse_heartbeat"

// beat writes a signed heartbeat into the WAL. Its content is the server's
// time, in Unix microseconds, read just before it was written.
func (s *stream) beat(ctx context.Context) error {
	if !s.messages || s.c.cfg.heartbeat == 0 || time.Since(s.lastBeat) < s.c.cfg.heartbeat {
		return nil
	}
	s.lastBeat = time.Now()
	var now time.Time
	if err := s.cat.conn.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&now); err != nil {
		return fmt.Errorf("read the server's clock for a heartbeat: %w", err)
	}
	// The MAC is computed here, not in SQL: the key must never travel as a
	// query parameter, which the server may log.
	_, err := s.cat.conn.Exec(ctx, `SELECT pg_logical_emit_message(false, $1, $2::bytea)`, heartbeatPrefix, s.key.heartbeatContent(now))
	if err != nil {
		return fmt.Errorf("write a heartbeat into the WAL (pg_logical_emit_message needs EXECUTE on it): %w", err)
	}
	return nil
}

// heartbeatMargin is subtracted from a heartbeat's time: a transaction takes
// its commit timestamp a moment before its commit record reaches the WAL, so
// one that committed just before the heartbeat's clock reading may follow it
// in the stream.
const heartbeatMargin = time.Second

// handleHeartbeat sends a heartbeat to every partition of every captured
// table's topic. Everything that committed before the heartbeat was written
// has been produced to each partition before it.
func (s *stream) handleHeartbeat(ctx context.Context, lsn record.LSN, written time.Time) error {
	at := written.Add(-heartbeatMargin)
	s.c.lastEvent.Store(at.UnixMicro())
	tc := s.c.cfg.topics
	if tc != nil && time.Since(s.partsAt) > 5*time.Minute {
		s.parts = map[string]int32{}
		s.partsAt = time.Now()
	}
	tx := s.acks.begin()
	for _, table := range s.tables {
		if s.online.copying(table) {
			continue // its watermark waits for the copy (see online.go)
		}
		topic := s.c.cfg.topicOf(table)
		n, ok := s.parts[topic]
		if !ok {
			n = s.c.cfg.partitions
			if tc != nil {
				if err := tc.CreateTopic(ctx, topic, s.c.cfg.partitions, s.c.cfg.replication); err != nil {
					return err
				}
				var err error
				if n, err = tc.Partitions(ctx, topic); err != nil {
					return err
				}
			}
			s.parts[topic] = n
		}
		headers := []kgo.RecordHeader{
			{Key: record.HeaderHeartbeat, Value: []byte(at.Format(time.RFC3339Nano))},
			{Key: record.HeaderLSN, Value: []byte(lsn.String())},
			{Key: record.HeaderTable, Value: []byte(table)},
			{Key: record.HeaderPartitions, Value: []byte(strconv.Itoa(int(n)))},
		}
		for p := int32(0); p < n; p++ {
			kr := &kgo.Record{Topic: topic, Partition: p, Headers: headers}
			if err := s.acks.add(tx, 64, s.c.cfg.maxPendingBytes); err != nil {
				return fmt.Errorf("kafka did not accept a record: %w", err)
			}
			s.c.producer.Produce(s.produceCtx, kr, func(_ *kgo.Record, err error) { s.acks.ack(tx, 64, err) })
		}
	}
	s.acks.commit(tx, lsn)
	return nil
}

// isTimeout reports a read that hit its deadline (not a broken connection).
func isTimeout(err error) bool {
	var ne net.Error
	return pgconn.Timeout(err) || (errors.As(err, &ne) && ne.Timeout())
}

// shutdown waits (boundedly) for Kafka to acknowledge what was produced and
// reports the final durable position before returning.
func (s *stream) shutdown(cause error) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s.acks.waitPending(ctx)
	_ = s.sendStatus(ctx, false)
	return cause
}

func (s *stream) sendStatus(ctx context.Context, reply bool) error {
	durable, failure := s.acks.state()
	if failure != nil {
		return fmt.Errorf("kafka did not accept a record: %w; restart walhouse capture once the broker is healthy (nothing after the confirmed position %s is lost)", failure, durable)
	}
	s.c.confirmed.Store(uint64(durable))
	s.c.log.Debug("standby status", "received", s.received, "confirmed", durable, "in_tx", s.inTx)
	err := pglogrepl.SendStandbyStatusUpdate(ctx, s.conn, pglogrepl.StandbyStatusUpdate{
		WALWritePosition: pglogrepl.LSN(s.received),
		WALFlushPosition: pglogrepl.LSN(durable),
		WALApplyPosition: pglogrepl.LSN(durable),
		ReplyRequested:   reply,
	})
	if err != nil {
		return fmt.Errorf("send standby status to PostgreSQL: %w", err)
	}
	return nil
}

func (s *stream) handleCopyData(ctx context.Context, data []byte) error {
	if len(data) == 0 {
		return errors.New("replication stream: empty CopyData message")
	}
	switch data[0] {
	case pglogrepl.PrimaryKeepaliveMessageByteID:
		ka, err := pglogrepl.ParsePrimaryKeepaliveMessage(data[1:])
		if err != nil {
			return fmt.Errorf("replication stream: %w", err)
		}
		if lsn := record.LSN(ka.ServerWALEnd); lsn > s.received {
			s.received = lsn
		}
		s.c.walEnd.Store(uint64(ka.ServerWALEnd))
		if !s.inTx {
			s.acks.idle(record.LSN(ka.ServerWALEnd))
		}
		if ka.ReplyRequested {
			return s.sendStatus(ctx, false)
		}
		return nil
	case pglogrepl.XLogDataByteID:
		xld, err := pglogrepl.ParseXLogData(data[1:])
		if err != nil {
			return fmt.Errorf("replication stream: %w", err)
		}
		if lsn := record.LSN(xld.WALStart); lsn > s.received {
			s.received = lsn
		}
		s.c.walEnd.Store(uint64(xld.ServerWALEnd))
		s.c.received.Store(uint64(s.received))
		return s.handleWAL(ctx, record.LSN(xld.WALStart), xld.WALData)
	default:
		return fmt.Errorf("replication stream: unknown CopyData message %q", data[0])
	}
}

func (s *stream) handleWAL(ctx context.Context, lsn record.LSN, msg []byte) error {
	if len(msg) == 0 {
		return errors.New("pgoutput: empty message")
	}
	switch msg[0] {
	case 'I', 'U', 'D':
		if !s.inTx {
			return fmt.Errorf("pgoutput: %c message outside a transaction at %s", msg[0], lsn)
		}
		if err := decodeRowChange(msg, &s.change); err != nil {
			return fmt.Errorf("pgoutput at %s: %w", lsn, err)
		}
		return s.handleChange(ctx, lsn)
	case 'B':
		var m pglogrepl.BeginMessage
		if err := m.Decode(msg[1:]); err != nil {
			return fmt.Errorf("pgoutput begin at %s: %w", lsn, err)
		}
		s.inTx = true
		s.tx = s.acks.begin()
		s.commitLSN = record.LSN(m.FinalLSN)
		s.commitTime = m.CommitTime.UTC()
		s.ordinal = 0
		return nil
	case 'C':
		var m pglogrepl.CommitMessage
		if err := m.Decode(msg[1:]); err != nil {
			return fmt.Errorf("pgoutput commit at %s: %w", lsn, err)
		}
		if !s.inTx {
			return fmt.Errorf("pgoutput: commit outside a transaction at %s", lsn)
		}
		s.acks.commit(s.tx, record.LSN(m.TransactionEndLSN))
		s.inTx, s.tx = false, nil
		s.c.lastEvent.Store(m.CommitTime.UnixMicro())
		return nil
	case 'R':
		m, err := pglogrepl.Parse(msg)
		if err != nil {
			return fmt.Errorf("pgoutput relation at %s: %w", lsn, err)
		}
		rm := m.(*pglogrepl.RelationMessage)
		name := rm.Namespace + "." + rm.RelationName
		if s.c.cfg.excluded(name) {
			s.rels[rm.RelationID] = &relation{name: name, skip: true}
			return nil
		}
		if !slices.Contains(s.tables, name) {
			// Not (yet) a captured table. PostgreSQL also describes
			// relations under which it publishes no change: with
			// publish_via_partition_root, a partition's own description
			// comes next to its root's, whose name the changes carry. So a
			// table joins the stream at its first change, not here.
			delete(s.rels, rm.RelationID)
			s.unjoined[rm.RelationID] = rm
			return nil
		}
		return s.setRelation(ctx, rm)
	case 'T':
		return s.handleTruncate(ctx, lsn, msg)
	case 'M':
		return s.handleMessage(ctx, lsn, msg)
	case 'Y', 'O':
		return nil // types are looked up in the catalog; origins are not replicated
	default:
		return fmt.Errorf("pgoutput: unknown message type %q at %s", msg[0], lsn)
	}
}

// handleMessage acts on walhouse's own logical messages, which it trusts
// only when they carry a valid MAC (see messages.go); anything else with
// its prefixes is counted and skipped. Other applications' messages are
// not replicated.
func (s *stream) handleMessage(ctx context.Context, lsn record.LSN, msg []byte) error {
	m, err := decodeLogicalMessage(msg)
	if err != nil {
		s.c.ignored.note("?", lsn, fmt.Errorf("%w: %w", errMalformed, err))
		return nil
	}
	switch m.Prefix {
	case heartbeatPrefix:
		if m.Transactional || s.inTx {
			s.c.ignored.note(m.Prefix, lsn, fmt.Errorf("%w: capture writes heartbeats outside transactions", errMisplaced))
			return nil
		}
		at, err := s.key.heartbeatTime(m.Content)
		if err != nil {
			s.c.ignored.note(m.Prefix, lsn, err)
			return nil
		}
		return s.handleHeartbeat(ctx, lsn, at)
	case ddlPrefix:
		content, ok := s.key.verify(m.Content)
		if !ok {
			s.c.ignored.note(m.Prefix, lsn, errUnauthenticated)
			return nil
		}
		oid, cols, err := parseDDLNotice(content)
		if err != nil {
			s.c.ignored.note(m.Prefix, lsn, fmt.Errorf("%w: %w", errMalformed, err))
			return nil
		}
		s.cat.columns[oid] = cols
	}
	return nil
}

// setRelation builds the relation of a captured table from its
// description and makes sure its topic exists.
func (s *stream) setRelation(ctx context.Context, rm *pglogrepl.RelationMessage) error {
	rel, err := buildRelation(ctx, s.cat, &s.c.cfg, s.sourceID, rm)
	if err != nil {
		return err
	}
	if tc := s.c.cfg.topics; tc != nil && !s.topics[rel.topic] {
		if err := tc.CreateTopic(ctx, rel.topic, s.c.cfg.partitions, s.c.cfg.replication); err != nil {
			return err
		}
		s.topics[rel.topic] = true
	}
	delete(s.unjoined, rm.RelationID)
	s.rels[rm.RelationID] = rel
	return nil
}

// relation returns the relation a change refers to. A described relation
// that is not a captured table joins the stream here, at its first change
// (a table added to the publication while capture runs).
func (s *stream) relation(ctx context.Context, id uint32) (*relation, bool, error) {
	if rel, ok := s.rels[id]; ok {
		return rel, true, nil
	}
	rm, ok := s.unjoined[id]
	if !ok {
		return nil, false, nil
	}
	name := rm.Namespace + "." + rm.RelationName
	if !slices.Contains(s.tables, name) {
		err := s.addTable(ctx, name)
		if errors.Is(err, errNameTaken) {
			s.rels[id] = &relation{name: name, skip: true}
			return s.rels[id], true, nil
		}
		if err != nil {
			return nil, false, err
		}
	}
	if err := s.setRelation(ctx, rm); err != nil {
		return nil, false, err
	}
	return s.rels[id], true, nil
}

// handleChange turns the decoded row change into one record (two when an
// update changed the key: a delete of the old key, then the new row).
func (s *stream) handleChange(ctx context.Context, lsn record.LSN) error {
	ch := &s.change
	rel, ok, err := s.relation(ctx, ch.RelationID)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("pgoutput: change for unknown relation %d at %s", ch.RelationID, lsn)
	}
	if rel.skip {
		return nil
	}
	switch ch.Kind {
	case 'I':
		return s.emit(ctx, rel, lsn, record.Insert, ch.New, nil, nil)
	case 'D':
		return s.emit(ctx, rel, lsn, record.Delete, ch.Old, nil, nil)
	}
	// Update.
	old := ch.Old
	var fill []tupleColumn
	if ch.OldKind == 'O' {
		fill = old // REPLICA IDENTITY FULL: unchanged TOAST values are in the old row
	}
	if len(old) > 0 && keyChanged(rel, old, ch.New) {
		if err := s.emit(ctx, rel, lsn, record.Delete, old, nil, nil); err != nil {
			return err
		}
		return s.emit(ctx, rel, lsn, record.Update, ch.New, old, fill)
	}
	return s.emit(ctx, rel, lsn, record.Update, ch.New, nil, fill)
}

// keyChanged reports an update that moved the row to another ClickHouse
// key: its primary key or its tenant changed (ClickHouse orders by tenant,
// then key; a tenant outside the primary key is in the old tuple only with
// REPLICA IDENTITY FULL, which capture requires for such tables).
func keyChanged(rel *relation, old, cur []tupleColumn) bool {
	if i := rel.tenantIdx; i >= 0 && i < len(old) && i < len(cur) && old[i].Kind != 'u' &&
		(old[i].Kind != cur[i].Kind || string(old[i].Data) != string(cur[i].Data)) {
		return true
	}
	for _, i := range rel.keyIdx {
		if i >= len(old) || i >= len(cur) {
			return true
		}
		if old[i].Kind == 'n' || old[i].Kind == 'u' {
			continue // not sent: unchanged
		}
		if string(old[i].Data) != string(cur[i].Data) {
			return true
		}
	}
	return false
}

// emit builds, encodes and produces one record. Values alias the WAL
// buffer; they are encoded before the next message is received.
func (s *stream) emit(ctx context.Context, rel *relation, lsn record.LSN, op record.Op, tuple, oldKey, fill []tupleColumn) error {
	if len(tuple) != len(rel.columns) {
		s.ordinal++
		return s.badRow(s.bad(rel, nil, record.ReasonInvalid, fmt.Errorf("%w: pgoutput sent a row of %d columns for a relation of %d", record.ErrInvalid, len(tuple), len(rel.columns))))
	}
	s.values = toValues(s.values[:0], tuple, fill)
	if op == record.Update && hasUnchanged(s.values) && s.online.copying(rel.name) {
		if err := s.fillFromSource(ctx, rel, s.values); err != nil {
			return err
		}
	}
	r := &s.rec
	*r = record.Record{
		OccurredAt:   s.commitTime,
		IngestedAt:   time.Now().UTC(),
		TenantColumn: rel.tenantColumn,
		Source:       rel.source,
		LSN:          lsn,
		CommitLSN:    s.commitLSN,
		Ordinal:      s.ordinal,
		Version:      record.Version(lsn),
		Op:           op,
		Columns:      rel.columns,
		SchemaID:     rel.schemaID,
		Values:       s.values,
	}
	if oldKey != nil {
		s.oldKey = toValues(s.oldKey[:0], oldKey, nil)
		r.OldKey = s.oldKey
	}
	r.EventID = record.EventID(s.sourceID, s.commitLSN, s.ordinal, s.commitTime)
	s.ordinal++ // also for a change set aside: the eventIds after it stay as they were
	if rel.tenantIdx >= 0 {
		v := s.values[rel.tenantIdx]
		if v.Null || v.Unchanged {
			return s.badRow(s.bad(rel, r, record.ReasonNoTenant, fmt.Errorf("the tenant column %s is NULL, so the row belongs to no tenant; make the column NOT NULL, or give such rows a tenant", rel.tenantColumn)))
		}
		r.TenantID = v.Text
	} else {
		r.TenantID = s.c.cfg.defaultTenant
	}
	if err := r.ValidateRow(); err != nil { // the columns were checked once, in buildRelation
		return s.badRow(s.bad(rel, r, record.ReasonInvalid, fmt.Errorf("the change does not form a valid record: %w", err)))
	}
	// Key and value share one buffer, sized from the table's last record so
	// it rarely grows; the relation's encoder copies the parts that depend
	// only on the table.
	_, key, value := rel.enc.AppendKeyValue(make([]byte, 0, rel.lastSize+rel.lastSize/8), r)
	size := len(value) + len(key)
	if err := checkRecordSize(size, s.c.cfg.maxRecordBytes); err != nil {
		return s.badRow(s.bad(rel, r, record.ReasonTooLarge, err))
	}
	rel.lastSize = max(size, 256)
	kr := &kgo.Record{Topic: rel.topic, Key: key, Value: value}
	if s.online.copying(rel.name) { // see record.HeaderCopying
		kr.Headers = []kgo.RecordHeader{{Key: record.HeaderCopying, Value: []byte("1")}}
	}
	if err := s.acks.add(s.tx, size, s.c.cfg.maxPendingBytes); err != nil {
		return fmt.Errorf("kafka did not accept a record: %w", err)
	}
	tx := s.tx
	s.c.producer.Produce(s.produceCtx, kr, func(_ *kgo.Record, err error) { s.acks.ack(tx, size, err) })
	s.c.rows.Add(1)
	return nil
}

// bad describes a change of the transaction in progress that cannot become
// a record; r is the record as far as it was built, or nil.
func (s *stream) bad(rel *relation, r *record.Record, reason string, err error) badRow {
	b := badRow{table: rel.name, topic: rel.topic, commit: s.commitLSN, rec: r, reason: reason, err: err}
	if r != nil {
		b.key = primaryKeyJSON(rel.columns, rel.keyIdx, r.Values)
	}
	return b
}

// toValues converts tuple columns to record values. Text aliases the WAL
// buffer (no copy): the record is encoded before the buffer is reused.
func toValues(dst []record.Value, tuple, fill []tupleColumn) []record.Value {
	for i, col := range tuple {
		if col.Kind == 'u' && i < len(fill) && (fill[i].Kind == 't' || fill[i].Kind == 'n') {
			col = fill[i]
		}
		switch col.Kind {
		case 'n':
			dst = append(dst, record.Value{Null: true})
		case 'u':
			dst = append(dst, record.Value{Unchanged: true})
		default:
			dst = append(dst, record.Value{Text: unsafe.String(unsafe.SliceData(col.Data), len(col.Data))})
		}
	}
	return dst
}
