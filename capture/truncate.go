package capture

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walhouse/walhouse/capture/pgoutput"
	"github.com/walhouse/walhouse/record"
)

// TRUNCATE is replicated as a marker (record.Truncate) sent to every
// partition of each truncated table's topic, at the TRUNCATE's place in its
// transaction. Why this is enough for the sink to remove exactly the rows
// PostgreSQL removed:
//
//   - Versions are WAL positions. TRUNCATE holds an ACCESS EXCLUSIVE lock
//     until its transaction ends, so every change of the table written
//     before it (earlier transactions, and earlier statements of its own
//     transaction) has a smaller LSN, and every change written after it (later
//     statements of its transaction, later transactions) a larger one. "Every
//     row whose latest version is below the TRUNCATE's LSN is gone" is
//     therefore exactly PostgreSQL's result, whenever it is applied.
//   - A row's changes all go to one partition, in WAL order, and the marker
//     is produced to that partition between the changes before and after the
//     TRUNCATE. Each partition's sink applies its marker only after loading
//     its own earlier records, so once every partition passed its marker,
//     every pre-TRUNCATE row of every partition has been covered.
//   - The markers are part of the transaction's acknowledgement (s.tx): the
//     slot is confirmed past the transaction only once Kafka has every
//     marker, and pgoutput sends only committed transactions, so a TRUNCATE
//     that rolled back never reaches Kafka.

// truncate turns a Truncate message, received at lsn, into a truncate
// marker for every captured table it names, as part of the current
// transaction.
func (t *translator) truncate(ctx context.Context, lsn record.LSN, m pgoutput.TruncateMessage) error {
	if !t.inTx {
		return fmt.Errorf("pgoutput: truncate outside a transaction at %s", lsn)
	}
	for _, id := range m.Relations {
		// pgoutput sends a Relation message for each table before the
		// Truncate that names it.
		rel, ok, err := t.relation(ctx, lsn, id)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("pgoutput: truncate of unknown relation %d at %s", id, lsn)
		}
		if rel.topic == "" {
			rel.skipped() // not captured (excluded, or left out)
			continue
		}
		tr := record.Truncate{
			Source:          record.Source{Schema: rel.source.Schema, Table: rel.source.Table},
			LSN:             lsn,
			CommitTime:      t.commitTime,
			At:              t.commitTime.Add(-heartbeatMargin),
			Cascade:         m.Cascade,
			RestartIdentity: m.RestartIdentity,
		}
		if err := t.out.truncate(ctx, rel, tr); err != nil {
			return err
		}
	}
	return nil
}

// truncate sends the truncate marker of a table to every partition of its
// topic.
func (s *stream) truncate(ctx context.Context, rel *relation, tr record.Truncate) error {
	if s.online.copying(rel.name) {
		// Copied rows have version 0, below every TRUNCATE, so the
		// markers remove every copied row before them in a partition
		// and none after. Stopping the copy first puts all rows it
		// read before the TRUNCATE before the markers; the copy then
		// starts over and reads what the TRUNCATE left.
		s.c.log.Info("TRUNCATE of a table being copied: the copy starts over", "table", rel.name, "lsn", tr.LSN)
		s.online.restart(rel.name)
	}
	n, err := s.partitionsForMarker(ctx, rel.topic)
	if err != nil {
		return fmt.Errorf("replicate the TRUNCATE of %s at %s: %w", rel.name, tr.LSN, err)
	}
	if err := s.produceMarkers(rel.topic, n, tr.Headers()); err != nil {
		return err
	}
	s.c.log.Info("replicating TRUNCATE", record.LogTable, rel.name, record.LogLSN, tr.LSN.String(), record.LogCommitLSN, s.tr.commitLSN.String(), "partitions", n, "cascade", tr.Cascade, "restart_identity", tr.RestartIdentity)
	return nil
}

// partitionsForMarker returns the partition count of topic, read afresh
// from Kafka when capture manages topics: a partition that missed its
// marker would keep its pre-TRUNCATE rows, so a cached count that a
// partition increase made stale must not be used. The fresh count also
// refreshes the heartbeats' cache.
func (s *stream) partitionsForMarker(ctx context.Context, topic string) (int32, error) {
	tc := s.c.cfg.topics
	if tc == nil {
		return s.c.cfg.partitions, nil
	}
	n, err := tc.Partitions(ctx, topic)
	if err != nil {
		return 0, err
	}
	s.parts[topic] = n
	return n, nil
}

// produceMarkers produces a keyless record with headers to each of the n
// partitions of topic, counted in the current transaction. The first header
// is record.HeaderHeartbeat, so capture's partitioner keeps the partition
// set here.
func (s *stream) produceMarkers(topic string, n int32, headers []record.Header) error {
	hs := make([]kgo.RecordHeader, len(headers))
	size := 0
	for i, h := range headers {
		hs[i] = kgo.RecordHeader{Key: h.Key, Value: []byte(h.Value)}
		size += len(h.Key) + len(h.Value)
	}
	tx := s.tx
	for p := int32(0); p < n; p++ {
		kr := &kgo.Record{Topic: topic, Partition: p, Headers: hs}
		if err := s.acks.add(tx, size, s.c.cfg.maxPendingBytes); err != nil {
			return fmt.Errorf("kafka did not accept a record: %w", err)
		}
		s.c.producer.Produce(s.produceCtx, kr, func(_ *kgo.Record, err error) { s.acks.ack(tx, size, err) })
	}
	return nil
}
