package capture

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walhouse/walhouse/record"
)

// heartbeatPrefix marks walhouse's logical messages in the WAL.
const heartbeatPrefix = "walhouse_heartbeat"

// beat writes a signed heartbeat into the WAL. Its content is the server's
// time, in Unix microseconds, read just before it was written. A server
// that cannot stream logical messages (13) gets a walBeat instead.
func (s *stream) beat(ctx context.Context) error {
	if s.c.cfg.heartbeat == 0 {
		return nil
	}
	if s.walBeat != nil {
		// Waiting for the stream to pass it: the server answers a reply
		// request with a keepalive that carries how far it decoded.
		return s.sendStatus(ctx, true)
	}
	if time.Since(s.lastBeat) < s.c.cfg.heartbeat {
		return nil
	}
	s.lastBeat = time.Now()
	if !s.version.logicalMessages() {
		var wb walBeat
		var lsn string
		if err := s.cat.conn.QueryRow(ctx, "SELECT clock_timestamp(), pg_current_wal_insert_lsn()::text").Scan(&wb.at, &lsn); err != nil {
			return fmt.Errorf("read the server's clock and WAL position for a heartbeat: %w", err)
		}
		var err error
		if wb.lsn, err = record.ParseLSN(lsn); err != nil {
			return fmt.Errorf("read the server's WAL position for a heartbeat: %w", err)
		}
		s.walBeat = &wb
		return s.sendStatus(ctx, true)
	}
	// On a standby, the primary writes it (see standby.go).
	return s.site.write(ctx, s.cat.conn, "write a heartbeat", func(conn *pgx.Conn) error {
		var now time.Time
		if err := conn.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&now); err != nil {
			return fmt.Errorf("read the server's clock for a heartbeat: %w", err)
		}
		// The MAC is computed here, not in SQL: the key must never travel as a
		// query parameter, which the server may log.
		_, err := conn.Exec(ctx, `SELECT pg_logical_emit_message(false, $1, $2::bytea)`, heartbeatPrefix, s.key.heartbeatContent(now))
		if err != nil {
			return fmt.Errorf("write a heartbeat into the WAL (pg_logical_emit_message needs EXECUTE on it): %w", err)
		}
		return nil
	})
}

// walBeat is a heartbeat placed by WAL position, for servers whose
// pgoutput cannot stream logical messages (PostgreSQL 13): the server's
// clock and WAL insert position, read together. Once the stream has passed
// lsn outside a transaction, every transaction whose commit record was
// written before it has been received (pgoutput sends them in commit
// order), so the heartbeat is sent as if a message written at lsn had
// arrived. heartbeatMargin covers commits timestamped before at whose
// record came after lsn, as it does for messages.
type walBeat struct {
	at  time.Time
	lsn record.LSN
}

// walBeatDue sends the pending walBeat once the stream, outside a
// transaction, has reached pos.
func (s *stream) walBeatDue(ctx context.Context, pos record.LSN) error {
	wb := s.walBeat
	if wb == nil || s.tr.inTx || pos < wb.lsn {
		return nil
	}
	s.walBeat = nil
	return s.heartbeat(ctx, wb.lsn, wb.at)
}

// heartbeatMargin is subtracted from a heartbeat's time: a transaction takes
// its commit timestamp a moment before its commit record reaches the WAL, so
// one that committed just before the heartbeat's clock reading may follow it
// in the stream.
const heartbeatMargin = time.Second

// heartbeat sends a heartbeat to every partition of every captured
// table's topic. Everything that committed before the heartbeat was written
// has been produced to each partition before it.
func (s *stream) heartbeat(ctx context.Context, lsn record.LSN, written time.Time) error {
	return s.heartbeatTo(ctx, lsn, written, s.tables)
}

// heartbeatTo sends a heartbeat to every partition of tables' topics;
// tables are captured ones.
func (s *stream) heartbeatTo(ctx context.Context, lsn record.LSN, written time.Time, tables []string) error {
	at := written.Add(-heartbeatMargin)
	s.c.lastEvent.Store(at.UnixMicro())
	tc := s.c.cfg.topics
	if tc != nil && time.Since(s.partsAt) > 5*time.Minute {
		s.parts = map[string]int32{}
		s.partsAt = time.Now()
	}
	tx := s.acks.begin()
	for _, table := range tables {
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
