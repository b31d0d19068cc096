package capture

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
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

	rows      atomic.Int64  // records produced
	marks     atomic.Uint64 // consistency marks sent (tables × rounds; marks.go)
	confirmed atomic.Uint64
	received  atomic.Uint64
	walEnd    atomic.Uint64 // the server's WAL end, from its messages
	lastEvent atomic.Int64  // Unix µs of the newest commit or heartbeat read
	runs      atomic.Int64  // replication sessions that reached streaming (see reconnecting)
	acks      atomic.Pointer[ackTracker]
	dlq       *deadLetters
	ignored   *ignoredMessages
	refused   *refusedTables
	rewrites  *prometheus.CounterVec // table rewrites noticed (rewrite.go)
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
	return &Capturer{cfg: cfg, producer: p, log: log, dlq: newDeadLetters(cfg.dlqTopic, log), ignored: newIgnoredMessages(log), refused: newRefusedTables(log), rewrites: newRewritesCounter()}, nil
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
	// Refused lists the published tables capture leaves out because it
	// cannot capture them whole, by name.
	Refused []record.RefusedTable
}

// Stats returns the current progress; it is safe to call from any goroutine.
func (c *Capturer) Stats() Stats {
	st := Stats{Rows: c.rows.Load(), Received: record.LSN(c.received.Load()), Confirmed: record.LSN(c.confirmed.Load()), ServerWALEnd: record.LSN(c.walEnd.Load()), DeadLetters: c.dlq.count(), Refused: c.refused.list()}
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
	conn, err := connect(ctx, c.cfg.connString, connOptions{})
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	st, err := c.openSite(ctx, conn)
	if err != nil {
		return nil, err
	}
	defer st.close(ctx)
	s, err := prepare(ctx, conn, &c.cfg)
	if err != nil {
		return nil, err
	}
	c.leaveOut(s.refused)
	return s.tables, nil
}

// Run streams until ctx is done or a fatal error occurs (with
// WithReconnect, a lost connection is not one). On return every confirmed
// position is durable in Kafka.
func (c *Capturer) Run(ctx context.Context) (err error) {
	defer func() { c.logStop(err) }()
	return c.reconnecting(ctx, c.run)
}

// run is one session: connect, prepare, stream until an error.
func (c *Capturer) run(ctx context.Context) error {
	// Unchanged TOAST values read during an online copy come over this
	// connection: a row over the bound is replaced unread (online.go).
	var catBound *boundedReader
	catConn, err := connect(ctx, c.cfg.connString, connOptions{
		maxRow: c.cfg.maxRecordBytes + receiveSlack, bounded: func(b *boundedReader) { catBound = b },
	})
	if err != nil {
		return err
	}
	defer catConn.Close(context.WithoutCancel(ctx))
	site, err := c.openSite(ctx, catConn)
	if err != nil {
		return err
	}
	defer site.close(ctx)
	src, err := prepare(ctx, catConn, &c.cfg)
	if err != nil {
		return err
	}
	c.leaveOut(src.refused)
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
	version := src.version
	if !version.tested() {
		c.log.Warn("this PostgreSQL major is newer than the newest walhouse is tested on; capture uses it as that one", "server_version", version, "tested_up_to", newestMajor)
	}
	notices := site.standby && site.trigger // a standby's is the primary's (openSite)
	if version.logicalMessages() && !site.standby {
		if err := installDDLTrigger(ctx, catConn); err != nil {
			c.log.Warn("DDL event trigger not installed: renames are followed only when capture keeps up", "err", err)
		} else {
			notices = true
		}
	} else if !version.logicalMessages() {
		c.log.Info("this PostgreSQL major cannot stream the DDL event trigger's notices (14+): renames are followed only when capture keeps up", "server_version", version)
	}
	key, err := loadMessageKey(ctx, catConn, c.log)
	if err != nil {
		return err
	}
	replConn, err := connect(ctx, c.cfg.connString, connOptions{replication: true, maxCopyData: c.cfg.maxRecordBytes + receiveSlack})
	if err != nil {
		return err
	}
	defer replConn.Close(context.WithoutCancel(ctx))
	if err := c.checkDroppedSlot(ctx, catConn, src.tables); err != nil {
		return err
	}
	start, snapName, created, err := ensureSlot(ctx, catConn, replConn.PgConn(), &c.cfg, site)
	if err != nil {
		return err
	}
	if err := c.ensureFailover(ctx, catConn, replConn.PgConn()); err != nil {
		return err
	}
	for t := range src.refused {
		// Captured before, and left out while capture was stopped.
		if err := c.markLeftOut(ctx, t, start); err != nil {
			return err
		}
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
	c.log.Info("streaming", "slot", c.cfg.slot, "publication", c.cfg.publication, "start_lsn", start, "tables", len(src.tables), "source_id", src.id, "server_version", version)
	cat := newCatalog(catConn)
	cat.bound = catBound
	cat.notices = notices
	if err := cat.bootstrap(ctx, src.tables); err != nil {
		return err
	}
	s := c.newStream(streamConfig{
		conn:     replConn.PgConn(),
		cat:      cat,
		sourceID: src.id,
		tables:   src.tables,
		version:  version,
		start:    start,
		online:   online,
		key:      key,
		site:     site,
	})
	if err := s.seedLeaves(ctx); err != nil {
		return err
	}
	if s.tr.watchEnumLabels {
		if s.tr.enums, err = capturedEnums(ctx, catConn, src.tables); err != nil {
			return err
		}
	}
	return s.run(ctx, start)
}

// leaveOut records the tables prepare left out, and forgets those left out
// before that are captured again or gone.
func (c *Capturer) leaveOut(refused map[string]error) {
	c.refused.retain(func(t string) bool { return refused[t] != nil })
	for _, t := range slices.Sorted(maps.Keys(refused)) {
		c.refused.leave(t, c.cfg.publication, refused[t])
	}
}

func (c *Capturer) newAcks(start record.LSN) *ackTracker {
	a := newAckTracker(start)
	c.acks.Store(a)
	return a
}
