package capture

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walhouse/walhouse/internal/failpoint"
	"github.com/walhouse/walhouse/record"
)

// stream is the state of one replication session: it receives the WAL,
// has the translator turn it into records, produces them and confirms
// what Kafka acknowledged to the slot. Only run's goroutine touches it,
// apart from the ack tracker.
type stream struct {
	c        *Capturer
	conn     *pgconn.PgConn
	cat      *catalog
	tr       *translator
	acks     *ackTracker
	topics   map[string]bool // topics known to exist
	tables   []string        // captured tables, schema.table
	online   *onlineSnapshots
	polledAt time.Time                  // when the publication's tables were last listed
	leaves   map[string]map[string]bool // partitioned tables' leaves, as last listed
	entries  map[string]uint32          // the publication's pg_publication_rel oids by table, as last listed
	version  serverVersion              // the server's, which decides what it offers
	key      messageKey                 // signs heartbeats
	site     *site                      // where heartbeats are written
	parts    map[string]int32
	partsAt  time.Time
	lastBeat time.Time
	walBeat  *walBeat // placed, not yet passed (PostgreSQL 13)
	marks    marks    // consistency marks of recently changed tables
	// produceCtx outlives a cancelled run: shutdown waits for the acks.
	produceCtx context.Context

	tx       *txAck // of the transaction in progress
	received record.LSN
	rc       recopyState // the sinks' re-copy requests (recopy.go)
}

// streamConfig is what a stream starts from.
type streamConfig struct {
	conn     *pgconn.PgConn // the replication connection
	cat      *catalog
	sourceID string
	tables   []string
	version  serverVersion
	start    record.LSN
	online   *onlineSnapshots
	key      messageKey
	site     *site
}

// newStream returns a stream and its translator, wired to each other.
func (c *Capturer) newStream(sc streamConfig) *stream {
	s := &stream{
		c:       c,
		conn:    sc.conn,
		cat:     sc.cat,
		tables:  sc.tables,
		version: sc.version,
		parts:   map[string]int32{},
		acks:    c.newAcks(sc.start),
		topics:  map[string]bool{},
		online:  sc.online,
		key:     sc.key,
		site:    sc.site,
		marks:   marks{interval: c.cfg.markInterval},
	}
	s.tr = newTranslator(&c.cfg, sc.sourceID, sc.cat, s, s, sc.key, c.ignored)
	s.tr.watchEnumLabels = sc.cat != nil && !sc.cat.notices
	return s
}

// newTranslator returns a translator that builds relations with cat, asks
// tables about the tables and hands what it produces to out.
func newTranslator(cfg *config, sourceID string, cat relationCatalog, tables tableSet, out output, key messageKey, ignored *ignoredMessages) *translator {
	return &translator{
		cfg:        cfg,
		sourceID:   sourceID,
		cat:        cat,
		tables:     tables,
		out:        out,
		key:        key,
		ignored:    ignored,
		now:        time.Now,
		rels:       map[uint32]*relation{},
		unjoined:   map[uint32]*pglogrepl.RelationMessage{},
		noticed:    map[uint32]bool{},
		retyped:    map[uint32]string{},
		enumCopied: map[string]record.LSN{},
		enums:      map[uint32]*enumWatch{},
	}
}

func (s *stream) run(ctx context.Context, start record.LSN) error {
	err := pglogrepl.StartReplication(ctx, s.conn, s.c.cfg.slot, pglogrepl.LSN(start), pglogrepl.StartReplicationOptions{
		PluginArgs: s.version.pluginArgs(s.c.cfg.publication),
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
	s.c.runs.Add(1)
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
			refusedCopies := s.online.takeRefused()
			for _, t := range slices.Sorted(maps.Keys(refusedCopies)) {
				if s.captured(t) {
					if err := s.leave(ctx, t, refusedCopies[t]); err != nil {
						return err
					}
				}
			}
			if err := s.pollTables(ctx); err != nil {
				return err
			}
			if err := s.recopies(ctx); err != nil {
				return err
			}
			next = time.Now().Add(interval)
			if every := s.c.cfg.progressEvery; every > 0 && time.Since(lastLog) >= every {
				lastRows = s.c.logProgress(lastRows, time.Since(lastLog))
				lastLog = time.Now()
			}
		}
		if err := s.markRound(ctx, time.Now()); err != nil {
			return err
		}
		// A read deadline per status interval (or mark round), not a
		// context per message: pgconn watches a non-background context
		// with a goroutine hand-off on every call, which costs more than
		// decoding the message.
		wake := next
		if m := s.marks.wake(); !m.IsZero() && m.Before(wake) {
			wake = m
		}
		if wake != deadline {
			deadline = wake
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
	s.c.log.Debug("standby status", "received", s.received, "confirmed", durable, "in_tx", s.tr.inTx)
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

// The stream is the translator's output: it produces what the translator
// made, as part of the transaction in progress.
var _ output = (*stream)(nil)

func (s *stream) begin() { s.tx = s.acks.begin() }

func (s *stream) commit(end record.LSN, at time.Time) {
	s.acks.commit(s.tx, end)
	s.tx = nil
	s.c.lastEvent.Store(at.UnixMicro())
}

// record produces one record of the transaction in progress.
func (s *stream) record(rel *relation, _ *record.Record, key, value []byte, move bool) error {
	size := len(value) + len(key)
	kr := &kgo.Record{Topic: rel.topic, Key: key, Value: value}
	s.marks.touch(rel.name, time.Now())
	if s.online.copying(rel.name) { // see record.HeaderCopying
		kr.Headers = []kgo.RecordHeader{{Key: record.HeaderCopying, Value: []byte("1")}}
	}
	if move {
		kr.Headers = append(kr.Headers, kgo.RecordHeader{Key: record.HeaderMove, Value: []byte("1")})
	}
	if err := s.acks.add(s.tx, size, s.c.cfg.maxPendingBytes); err != nil {
		return fmt.Errorf("kafka did not accept a record: %w", err)
	}
	tx := s.tx
	s.c.producer.Produce(s.produceCtx, kr, func(_ *kgo.Record, err error) {
		// Before the ack: a crash here leaves the slot unconfirmed past it.
		s.c.cfg.failpoints.At(failpoint.CaptureProduced)
		s.acks.ack(tx, size, err)
	})
	s.c.rows.Add(1)
	return nil
}

// The stream also keeps the table set the translator asks about.
var _ tableSet = (*stream)(nil)

func (s *stream) captured(table string) bool { return slices.Contains(s.tables, table) }

func (s *stream) join(ctx context.Context, table string) error { return s.addTable(ctx, table) }

func (s *stream) refusedChanges(table string) prometheus.Counter { return s.c.refused.counter(table) }

// described makes sure a captured relation's topic exists, after looking
// at the table's publication entry again: a Relation message follows every
// change of it (a column list sends fewer columns), so a table whose column
// list leaves out a key, tenant or sorting column is left out before any
// change of its new shape is produced. Its
// key, identity and tenant column the message itself says (buildRelation).
// Relation messages are rare (one per table and session, and one after
// each such change), and the lookup is by oid, so it costs the stream
// nothing.
func (s *stream) described(ctx context.Context, rel *relation, relID uint32) error {
	if err := checkEntry(ctx, s.cat.conn, &s.c.cfg, s.version, relID, rel.source.Schema, rel.source.Table); errors.Is(err, errUncapturable) {
		if err := s.leave(ctx, rel.name, err); err != nil {
			return err
		}
		return errTableRefused
	} else if err != nil {
		return err
	}
	if tc := s.c.cfg.topics; tc != nil && !s.topics[rel.topic] {
		if err := tc.CreateTopic(ctx, rel.topic, s.c.cfg.partitions, s.c.cfg.replication); err != nil {
			return err
		}
		s.topics[rel.topic] = true
	}
	return nil
}

func (s *stream) fillUnchanged(ctx context.Context, rel *relation, c fillCase, values []record.Value) error {
	if !c.fromSource(s.online.copying(rel.name)) {
		return nil
	}
	return s.fillFromSource(ctx, rel, c, values)
}
