package capture

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/walhouse/walhouse/capture/pgoutput"
	"github.com/walhouse/walhouse/record"
)

// handleCopyData handles one CopyData message of the replication protocol:
// a keepalive, or WAL data, which the translator turns into what capture
// produces.
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
		s.receive(record.LSN(ka.ServerWALEnd), ka.ServerWALEnd)
		if !s.tr.inTx {
			s.acks.idle(record.LSN(ka.ServerWALEnd))
		}
		if err := s.walBeatDue(ctx, record.LSN(ka.ServerWALEnd)); err != nil {
			return err
		}
		if err := s.markDue(ctx, record.LSN(ka.ServerWALEnd)); err != nil {
			return err
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
		s.receive(record.LSN(xld.WALStart), xld.ServerWALEnd)
		if err := s.tr.handle(ctx, record.LSN(xld.WALStart), xld.WALData); err != nil {
			return err
		}
		// A commit's WALStart is its end: what committed before is sent.
		if err := s.walBeatDue(ctx, s.received); err != nil {
			return err
		}
		return s.markDue(ctx, s.received)
	default:
		return fmt.Errorf("replication stream: unknown CopyData message %q", data[0])
	}
}

// receive moves the position received up to at (never back) and records
// the server's WAL end, both from a message of the stream.
func (s *stream) receive(at record.LSN, walEnd pglogrepl.LSN) {
	s.received = max(s.received, at)
	// Stored from keepalives too: an idle stream confirms up to their WAL
	// end, and the status must never show less received than confirmed.
	s.c.received.Store(uint64(s.received))
	s.c.walEnd.Store(uint64(walEnd))
}

// translator turns the pgoutput messages of one replication session into
// what capture produces: records, dead letters of changes that cannot
// become records, truncate markers and heartbeats, handed to out in stream
// order. It keeps the relation cache and the transaction in progress
// (eventIds, versions and ordinals come from there).
//
// It holds no connection, Kafka client or clock of its own: building a
// relation asks cat, the captured tables and their copies are the stream's
// (tables), and records get their IngestedAt from now. So its tests drive
// it with scripted messages (translate_test.go); the stream wires it to
// PostgreSQL and Kafka. Only the stream's goroutine calls it.
type translator struct {
	cfg      *config
	sourceID string
	cat      relationCatalog
	tables   tableSet
	out      output
	key      messageKey // verifies walhouse's logical messages
	ignored  *ignoredMessages
	now      func() time.Time

	rels map[uint32]*relation
	// noticed holds the relations that an event trigger notice described
	// since their last Relation message: the trigger runs, so a rewrite
	// without a notice is no rewrite (see rewrittenByCatalog).
	noticed map[uint32]bool
	// retyped holds, by relation, why its last Relation message shows a
	// rewrite no notice reported, until its first change says where
	// (rewrittenByCatalog).
	retyped map[uint32]string
	// enumCopied holds, by captured table, the version of the copy the
	// last enum rename notice asked for, so that the notices of a root's
	// partitions, all at one commit, ask once (enumRenamed).
	enumCopied map[string]record.LSN
	// watchEnumLabels is set when no event trigger notice reports enum
	// renames: enums holds what capture knows of each enum's labels, by
	// type OID (enumwatch.go).
	watchEnumLabels bool
	enums           map[uint32]*enumWatch
	// unjoined holds descriptions of relations that are not captured
	// tables (yet): see describe.
	unjoined map[uint32]*pglogrepl.RelationMessage

	// transaction in progress
	inTx       bool
	commitLSN  record.LSN
	commitTime time.Time
	ordinal    uint32
	// move is set while the delete half of a row's move is emitted
	// (record.HeaderMove).
	move bool

	// reused from change to change, so the hot path does not allocate
	change pgoutput.RowChange
	rec    record.Record
	values []record.Value
	oldKey []record.Value
	// the tuples of a change cut to the relation's kept columns
	keptNew, keptOld []pgoutput.TupleColumn
}

// relationCatalog is what building a relation asks of the source's
// catalog; *catalog answers it over a connection, tests script it.
type relationCatalog interface {
	typeOf(ctx context.Context, oid uint32) (typeInfo, error)
	tableKey(ctx context.Context, relID uint32) (map[string]bool, error)
	attnums(ctx context.Context, relID uint32) (map[string]columnInfo, error)
	// setColumns records a relation's columns as a DDL message in the
	// stream numbered them (see ddl.go).
	setColumns(relID uint32, cols map[string]columnInfo)
	// volatileDefaults returns the relation's columns with a default and
	// no stored value for older rows (see rewrittenByCatalog).
	volatileDefaults(ctx context.Context, relID uint32) (map[string]bool, error)
	// enumLabels returns an enum type's labels in its order, as the
	// catalog has them now.
	enumLabels(ctx context.Context, oid uint32) ([]string, error)
}

// tableSet is what the translator asks of the stream about the tables.
type tableSet interface {
	// captured reports whether table ("schema.table") is captured.
	captured(table string) bool
	// join takes a table that was described but not captured into the
	// stream at its first change (errTableRefused: it stays out).
	join(ctx context.Context, table string) error
	// described is called with every relation of a captured table built
	// from a Relation message, before any of its records (its topic must
	// exist by then); errTableRefused: the table was left out.
	described(ctx context.Context, rel *relation, relID uint32) error
	// leave takes a captured table that cannot be captured any more (why:
	// its Relation message has no key or tenant to map) out of the stream.
	leave(ctx context.Context, table string, why error) error
	// refusedChanges counts the changes of a table left out.
	refusedChanges(table string) prometheus.Counter
	// fillUnchanged replaces the unchanged TOAST values of a change of
	// case c with the source's where the sink could not find them
	// (fillCase.fromSource): an update's while the table's online copy
	// runs (see online.go), a key-changing update's and an insert's
	// always. An insert has some only when pgoutput sends an update that
	// moved a row into a publication's row filter as an insert, without
	// the old row to take them from (the table's replica identity is not
	// FULL): ClickHouse never had the row.
	fillUnchanged(ctx context.Context, rel *relation, c fillCase, values []record.Value) error
	// rewritten copies a captured table again after DDL rewrote its rows
	// without row changes (rewrite.go).
	rewritten(ctx context.Context, rw rewrite) error
}

// output takes what the translator produces, in stream order.
type output interface {
	// begin and commit delimit a transaction; everything between them
	// belongs to it.
	begin()
	commit(end record.LSN, at time.Time)
	// record takes one change of rel as r, encoded as key and value. All
	// of them alias buffers that are reused after it returns. move says r
	// is the delete of a row's old position whose new one follows
	// (record.HeaderMove).
	record(rel *relation, r *record.Record, key, value []byte, move bool) error
	// badRow takes a change that cannot become a record.
	badRow(b badRow) error
	// truncate takes the TRUNCATE of a captured table.
	truncate(ctx context.Context, rel *relation, tr record.Truncate) error
	// heartbeat takes an authenticated heartbeat written at at.
	heartbeat(ctx context.Context, lsn record.LSN, at time.Time) error
}

// handle decodes one pgoutput message, received at lsn, and acts on it.
func (t *translator) handle(ctx context.Context, lsn record.LSN, msg []byte) error {
	if len(msg) == 0 {
		return errors.New("pgoutput: empty message")
	}
	switch msg[0] {
	case pgoutput.MessageTypeInsert, pgoutput.MessageTypeUpdate, pgoutput.MessageTypeDelete:
		if !t.inTx {
			return fmt.Errorf("pgoutput: %c message outside a transaction at %s", msg[0], lsn)
		}
		if err := pgoutput.DecodeRowChange(msg, &t.change); err != nil {
			return fmt.Errorf("pgoutput at %s: %w", lsn, err)
		}
		return t.rowChange(ctx, lsn, &t.change)
	case pgoutput.MessageTypeBegin:
		var m pglogrepl.BeginMessage
		if err := m.Decode(msg[1:]); err != nil {
			return fmt.Errorf("pgoutput begin at %s: %w", lsn, err)
		}
		t.begin(&m)
		return nil
	case pgoutput.MessageTypeCommit:
		var m pglogrepl.CommitMessage
		if err := m.Decode(msg[1:]); err != nil {
			return fmt.Errorf("pgoutput commit at %s: %w", lsn, err)
		}
		return t.commit(lsn, &m)
	case pgoutput.MessageTypeRelation:
		m, err := pglogrepl.Parse(msg)
		if err != nil {
			return fmt.Errorf("pgoutput relation at %s: %w", lsn, err)
		}
		return t.describe(ctx, lsn, m.(*pglogrepl.RelationMessage))
	case pgoutput.MessageTypeTruncate:
		if !t.inTx {
			return fmt.Errorf("pgoutput: truncate outside a transaction at %s", lsn)
		}
		m, err := pgoutput.DecodeTruncate(msg)
		if err != nil {
			return fmt.Errorf("pgoutput truncate at %s: %w", lsn, err)
		}
		return t.truncate(ctx, lsn, m)
	case pgoutput.MessageTypeMessage:
		m, err := pgoutput.DecodeLogicalMessage(msg)
		if err != nil {
			t.ignored.note("?", lsn, fmt.Errorf("%w: %w", errMalformed, err))
			return nil
		}
		return t.logical(ctx, lsn, m)
	case msgOversized:
		return t.oversized(ctx, lsn, msg)
	case pgoutput.MessageTypeType, pgoutput.MessageTypeOrigin:
		return nil // types are looked up in the catalog; origins are not replicated
	default:
		return fmt.Errorf("pgoutput: unknown message type %q at %s", msg[0], lsn)
	}
}

// begin starts a transaction.
func (t *translator) begin(m *pglogrepl.BeginMessage) {
	t.inTx = true
	t.commitLSN = record.LSN(m.FinalLSN)
	t.commitTime = m.CommitTime.UTC()
	t.ordinal = 0
	t.out.begin()
}

// commit ends the transaction in progress.
func (t *translator) commit(lsn record.LSN, m *pglogrepl.CommitMessage) error {
	if !t.inTx {
		return fmt.Errorf("pgoutput: commit outside a transaction at %s", lsn)
	}
	t.out.commit(record.LSN(m.TransactionEndLSN), m.CommitTime)
	t.inTx = false
	return nil
}

// describe takes a Relation message, received at lsn. A captured table's
// relation is built (and replaces the one cached); an excluded table's is
// marked skipped.
func (t *translator) describe(ctx context.Context, lsn record.LSN, rm *pglogrepl.RelationMessage) error {
	name := rm.Namespace + "." + rm.RelationName
	if t.cfg.excluded(name) {
		t.rels[rm.RelationID] = &relation{name: name, skip: true}
		return nil
	}
	if !t.tables.captured(name) {
		// Not (yet) a captured table. PostgreSQL also describes
		// relations under which it publishes no change: with
		// publish_via_partition_root, a partition's own description
		// comes next to its root's, whose name the changes carry. So a
		// table joins the stream at its first change, not here.
		delete(t.rels, rm.RelationID)
		t.unjoined[rm.RelationID] = rm
		return nil
	}
	return t.setRelation(ctx, lsn, rm)
}

// logical acts on walhouse's own logical messages, which it trusts only
// when they carry a valid MAC (see messages.go); anything else with its
// prefixes is counted and skipped. Other applications' messages are not
// replicated.
func (t *translator) logical(ctx context.Context, lsn record.LSN, m pgoutput.LogicalMessage) error {
	switch m.Prefix {
	case heartbeatPrefix:
		if m.Transactional || t.inTx {
			t.ignored.note(m.Prefix, lsn, fmt.Errorf("%w: capture writes heartbeats outside transactions", errMisplaced))
			return nil
		}
		at, err := t.key.heartbeatTime(m.Content)
		if err != nil {
			t.ignored.note(m.Prefix, lsn, err)
			return nil
		}
		return t.out.heartbeat(ctx, lsn, at)
	case rewritePrefix:
		return t.rewrite(ctx, lsn, m)
	case recopyPrefix:
		return t.recopy(ctx, lsn, m)
	case ddlPrefix:
		content, ok := t.key.verify(m.Content)
		if !ok {
			t.ignored.note(m.Prefix, lsn, errUnauthenticated)
			return nil
		}
		oid, cols, err := parseDDLNotice(content)
		if err != nil {
			t.ignored.note(m.Prefix, lsn, fmt.Errorf("%w: %w", errMalformed, err))
			return nil
		}
		t.cat.setColumns(oid, cols)
		if _, known := t.rels[oid]; known { // only those can be compared
			t.noticed[oid] = true
		}
	}
	return nil
}

// setRelation builds the relation of a captured table from its
// description. A table that can no longer be mapped (its key, replica
// identity or tenant column changed while captured) is left out, and the
// other tables go on (refused.go). A table whose new description shows
// DDL that may have rewritten it, with no event trigger notice, is copied
// again (rewrittenByCatalog).
func (t *translator) setRelation(ctx context.Context, lsn record.LSN, rm *pglogrepl.RelationMessage) error {
	name := rm.Namespace + "." + rm.RelationName
	prev, noticed := t.rels[rm.RelationID], t.noticed[rm.RelationID]
	delete(t.noticed, rm.RelationID)
	rel, err := buildRelation(ctx, t.cat, t.cfg, t.sourceID, rm)
	if errors.Is(err, errUncapturable) {
		if err := t.tables.leave(ctx, name, err); err != nil {
			return err
		}
		rel = t.refused(name)
	} else if err != nil {
		return err
	} else if err := t.tables.described(ctx, rel, rm.RelationID); errors.Is(err, errTableRefused) {
		rel = t.refused(name)
	} else if err != nil {
		return err
	}
	delete(t.unjoined, rm.RelationID)
	t.rels[rm.RelationID] = rel
	if prev == nil || prev.skip || rel.skip || noticed {
		return nil
	}
	return t.rewrittenByCatalog(ctx, rm.RelationID, prev, rel)
}

// refused returns the relation of a table left out: its changes are
// counted, not produced.
func (t *translator) refused(table string) *relation {
	return &relation{name: table, skip: true, refused: t.tables.refusedChanges(table)}
}

// leaveOut marks the relations of table, which was just left out, as such.
func (t *translator) leaveOut(table string) {
	for id, rel := range t.rels {
		if rel.name == table {
			t.rels[id] = t.refused(table)
		}
	}
}

// relation returns the relation a change refers to. A described relation
// that is not a captured table joins the stream here, at its first change
// (a table added to the publication while capture runs).
func (t *translator) relation(ctx context.Context, lsn record.LSN, id uint32) (*relation, bool, error) {
	if rel, ok := t.rels[id]; ok {
		if len(t.retyped) > 0 {
			if err := t.retypedChange(ctx, lsn, id); err != nil {
				return nil, false, err
			}
		}
		return rel, true, nil
	}
	rm, ok := t.unjoined[id]
	if !ok {
		return nil, false, nil
	}
	name := rm.Namespace + "." + rm.RelationName
	if strings.Contains(rm.Namespace, ".") {
		// Never captured (publishedTables): the poll says why.
		t.rels[id] = t.refused(name)
		return t.rels[id], true, nil
	}
	if !t.tables.captured(name) {
		err := t.tables.join(ctx, name)
		if errors.Is(err, errTableRefused) {
			t.rels[id] = t.refused(name)
			return t.rels[id], true, nil
		}
		if err != nil {
			return nil, false, err
		}
	}
	if err := t.setRelation(ctx, lsn, rm); err != nil {
		return nil, false, err
	}
	return t.rels[id], true, nil
}
