package capture

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walhouse/walhouse/capture/pgoutput"
	"github.com/walhouse/walhouse/record"
)

// A sink run with --recopy-on-gap asks for a table to be copied again when
// records of its topic were lost (record.RecopyRequest, in the compacted
// re-copy topic). Capture answers as it does a rewrite (rewrite.go), with
// one difference: no lock orders the copy against the table's writers, so
// the copy waits for them (waitForWriters).
//
//  1. The stream reads the re-copy topic every recopyPoll. For a pending
//     request of a captured table that no plan answers yet, it writes a
//     signed notice into the WAL (recopyPrefix), once per process.
//  2. When the stream decodes the notice at L, the table is copied online
//     at version Version(L), its plan saved with the request's id
//     (snapshotPlan.Recopy) so that a restart resumes it. A change written
//     before L by a transaction still open is waited for; one committed
//     before the copy reads it is in the copy; every later one has a
//     version above L. So the copy replaces what the lost records left
//     stale and never overwrites a newer change.
//  3. Once the plan is complete (every copied row acknowledged by Kafka),
//     the stream sends a re-copy done marker (record.RecopyDone) to every
//     partition of the topic: every copied row of a partition precedes it.
//     It does so again after each restart until the sink marks the request
//     done (a sink passes a marker twice harmlessly).
//
// A notice written by an earlier process that cannot be verified (capture
// without the shared message key signs with a key of its own) is skipped,
// and the request noticed again.

// recopyPrefix marks walhouse's re-copy notices in the WAL.
const recopyPrefix = "walhouse_recopy"

// recopyPoll is how often the stream reads the re-copy topic.
const recopyPoll = 5 * time.Second

// RecopyRequests is the re-copy topic as capture reads it;
// *kafka.Recopies implements it.
type RecopyRequests interface {
	// ReadNew calls each for every entry written since the last call (req
	// nil: the table's request is done).
	ReadNew(ctx context.Context, each func(table string, req *record.RecopyRequest)) error
}

// recopyNotice is the content of a re-copy notice.
type recopyNotice struct {
	ID    string `json:"id"`
	Table string `json:"table"`
}

// recopyState is what a stream knows of the re-copy requests.
type recopyState struct {
	read    time.Time
	pending map[string]record.RecopyRequest // by table
	noticed map[string]bool                 // request ids noticed by this process
	marked  map[string]bool                 // request ids whose markers this process sent
}

// recopies reads the re-copy topic every recopyPoll and moves each pending
// request of a captured table on a step (see the top of this file). A
// failure to read the topic is logged and tried again at the next poll:
// requests wait, the stream does not.
func (s *stream) recopies(ctx context.Context) error {
	r := s.c.cfg.recopies
	if r == nil || time.Since(s.rc.read) < recopyPoll {
		return nil
	}
	s.rc.read = time.Now()
	if s.rc.pending == nil {
		s.rc.pending, s.rc.noticed, s.rc.marked = map[string]record.RecopyRequest{}, map[string]bool{}, map[string]bool{}
	}
	// The stream waits while it reads: bound the read so that a broker that
	// hangs delays decoding (and the standby status PostgreSQL expects) by
	// one poll at most; what was read is kept, the rest read next time.
	rctx, cancel := context.WithTimeout(ctx, recopyPoll)
	defer cancel()
	err := r.ReadNew(rctx, func(table string, req *record.RecopyRequest) {
		if req == nil {
			delete(s.rc.pending, table)
			return
		}
		s.rc.pending[table] = *req
	})
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		s.c.log.Error("cannot read the sinks' re-copy requests; trying again", "err", err)
		// A read that failed may have waited its whole bound (a broker
		// down, its partitions not yet led elsewhere): stream for a whole
		// poll before the next, or the stream would be held back without
		// a pause for as long as the broker is down.
		s.rc.read = time.Now()
	}
	for table, req := range s.rc.pending {
		if !s.captured(table) {
			continue
		}
		if err := s.recopyStep(ctx, req); err != nil {
			return err
		}
	}
	return nil
}

// recopyStep moves req on: a notice for a request no plan answers, the
// done markers for one whose copy is complete.
func (s *stream) recopyStep(ctx context.Context, req record.RecopyRequest) error {
	if s.c.cfg.state == nil {
		if !s.rc.noticed[req.ID] {
			s.rc.noticed[req.ID] = true
			s.c.log.Error("a sink asked for a table to be copied again, and capture has no state store to follow the copy in", "table", req.Table, "recopy", req.ID)
		}
		return nil
	}
	p, err := loadPlan(ctx, &s.c.cfg, req.Table)
	if err != nil {
		return err
	}
	switch {
	case p != nil && p.RecopyRefused == req.ID:
		return nil // logged when given up
	case p != nil && p.Recopy == req.ID && p.Complete:
		if s.rc.marked[req.ID] {
			return nil
		}
		at, err := record.ParseLSN(p.CP)
		if err != nil {
			return fmt.Errorf("the snapshot state of %s: position %q: %w", req.Table, p.CP, err)
		}
		if err := s.recopyDone(ctx, req, at); err != nil {
			return err
		}
		s.rc.marked[req.ID] = true
	case p != nil && p.Recopy == req.ID:
		// Its copy runs or waits.
	case !s.rc.noticed[req.ID]:
		if err := s.recopyNotice(ctx, req); err != nil {
			return err
		}
		s.rc.noticed[req.ID] = true
	}
	return nil
}

// recopyNotice writes the signed notice of req into the WAL.
func (s *stream) recopyNotice(ctx context.Context, req record.RecopyRequest) error {
	content, err := json.Marshal(recopyNotice{ID: req.ID, Table: req.Table})
	if err != nil {
		return err
	}
	signed := s.key.sign(content)
	err = s.site.write(ctx, s.cat.conn, "write a re-copy notice", func(conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, `SELECT pg_logical_emit_message(false, $1, $2::bytea)`, recopyPrefix, signed)
		return err
	})
	if err != nil {
		return fmt.Errorf("write the re-copy notice of %s into the WAL (pg_logical_emit_message needs EXECUTE on it): %w", req.Table, err)
	}
	s.c.log.Info("a sink asked for the table to be copied again after records of its topic were lost: noticed in the WAL, the copy starts at the notice", "table", req.Table, "recopy", req.ID,
		"gap_topic", req.Topic, "gap_partition", req.Partition, "lost_from", req.From, "lost_to", req.To-1)
	return nil
}

// recopyDone sends the done markers of req's copy at at to every partition
// of the table's topic and returns once Kafka acknowledged them.
func (s *stream) recopyDone(ctx context.Context, req record.RecopyRequest, at record.LSN) error {
	src, ok := req.Source()
	if !ok {
		return nil // ParseRecopyRequest refused it already
	}
	topic := s.c.cfg.topicOf(req.Table)
	n, err := s.partitionsForMarker(ctx, topic)
	if err != nil {
		return fmt.Errorf("send the re-copy done markers of %s: %w", req.Table, err)
	}
	if err := s.c.sendDone(ctx, topic, record.RecopyDone{Source: src, ID: req.ID, LSN: at, At: time.Now().UTC(), Partitions: n}); err != nil {
		return fmt.Errorf("send the re-copy done markers of %s: %w", req.Table, err)
	}
	s.c.log.Info("the re-copy asked for by a sink is in Kafka: sent its done markers", "table", req.Table, "recopy", req.ID, "at", at, "partitions", n)
	return nil
}

// rewriteSwept sends the done markers of p, a rewrite plan whose copy is
// complete (snapshotPlan.Sweep), so that the sink sweeps the table at the
// rewrite's position, and saves p without Sweep once Kafka acknowledged
// them. A restart before that sends them again; a sink passes them twice
// harmlessly.
func (c *Capturer) rewriteSwept(ctx context.Context, p *snapshotPlan) error {
	at, err := record.ParseLSN(p.CP)
	if err != nil {
		return fmt.Errorf("the snapshot state of %s: position %q: %w", p.Table, p.CP, err)
	}
	schema, table, _ := strings.Cut(p.Table, ".")
	src := record.Source{Schema: schema, Table: table}
	topic := c.cfg.topicOf(p.Table)
	n := c.cfg.partitions
	if tc := c.cfg.topics; tc != nil {
		if n, err = tc.Partitions(ctx, topic); err != nil {
			return fmt.Errorf("send the done markers of the copy of %s after its rewrite: %w", p.Table, err)
		}
	}
	d := record.RecopyDone{Source: src, ID: record.RewriteSweepID(src, at), LSN: at, At: time.Now().UTC(), Partitions: n}
	if err := c.sendDone(ctx, topic, d); err != nil {
		return fmt.Errorf("send the done markers of the copy of %s after its rewrite: %w", p.Table, err)
	}
	p.Sweep = false
	if c.cfg.state != nil {
		if err := c.savePlan(ctx, p); err != nil {
			return err
		}
	}
	c.log.Info("the copy after the rewrite is in Kafka: sent its done markers, after which the sink removes the versions the rewrite moved from their old positions", "table", p.Table, "at", at, "partitions", n)
	return nil
}

// sendDone produces the done marker d to each of the d.Partitions
// partitions of topic and returns once Kafka acknowledged them.
func (c *Capturer) sendDone(ctx context.Context, topic string, d record.RecopyDone) error {
	hs := d.Headers()
	khs := make([]kgo.RecordHeader, len(hs))
	for i, h := range hs {
		khs[i] = kgo.RecordHeader{Key: h.Key, Value: []byte(h.Value)}
	}
	errs := make(chan error, d.Partitions)
	for p := range d.Partitions {
		c.producer.Produce(ctx, &kgo.Record{Topic: topic, Partition: p, Headers: khs}, func(_ *kgo.Record, err error) { errs <- err })
	}
	for range d.Partitions {
		if err := <-errs; err != nil {
			return err
		}
	}
	return nil
}

// recopy acts on a re-copy notice decoded at lsn: the captured table it
// names is copied again at lsn (stream.rewritten).
func (t *translator) recopy(ctx context.Context, lsn record.LSN, m pgoutput.LogicalMessage) error {
	content, ok := t.key.verify(m.Content)
	if !ok {
		t.ignored.note(m.Prefix, lsn, errUnauthenticated)
		return nil
	}
	var n recopyNotice
	if err := json.Unmarshal(content, &n); err != nil || n.ID == "" || n.Table == "" {
		t.ignored.note(m.Prefix, lsn, fmt.Errorf("%w: %w", errMalformed, errors.Join(err, errors.New("re-copy notice: want an id and a table"))))
		return nil
	}
	at := lsn
	if m.LSN != 0 {
		at = record.LSN(m.LSN)
	}
	if t.cfg.excluded(n.Table) || !t.tables.captured(n.Table) {
		return nil
	}
	return t.tables.rewritten(ctx, rewrite{table: n.Table, at: at, recopy: n.ID})
}
