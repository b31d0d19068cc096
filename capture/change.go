package capture

import (
	"context"
	"errors"
	"fmt"
	"unsafe"

	"github.com/walhouse/walhouse/capture/pgoutput"
	"github.com/walhouse/walhouse/record"
)

// rowChange turns a decoded row change, received at lsn, into one record
// (two when an update changed the key: a delete of the old key, then the
// new row), or into a dead letter when it cannot become one.
func (t *translator) rowChange(ctx context.Context, lsn record.LSN, ch *pgoutput.RowChange) error {
	if !t.inTx {
		return fmt.Errorf("pgoutput: %c message outside a transaction at %s", ch.Kind, lsn)
	}
	rel, ok, err := t.relation(ctx, lsn, ch.RelationID)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("pgoutput: change for unknown relation %d at %s", ch.RelationID, lsn)
	}
	if rel.skip {
		rel.skipped()
		return nil
	}
	// Excluded columns go no further than here: no record, no dead
	// letter, no log line carries them.
	cur, old := ch.New, ch.Old
	if rel.keep != nil {
		t.keptNew, cur = keepColumns(t.keptNew[:0], cur, rel.keep)
		t.keptOld, old = keepColumns(t.keptOld[:0], old, rel.keep)
	}
	switch ch.Kind {
	case pgoutput.MessageTypeInsert:
		return t.emit(ctx, rel, lsn, record.Insert, cur, nil, nil)
	case pgoutput.MessageTypeDelete:
		return t.emit(ctx, rel, lsn, record.Delete, old, nil, nil)
	case pgoutput.MessageTypeUpdate:
	default:
		return fmt.Errorf("pgoutput: message type %q at %s is not a row change", ch.Kind, lsn)
	}
	var fill []pgoutput.TupleColumn
	if ch.OldKind == pgoutput.TupleOldRow {
		fill = old // REPLICA IDENTITY FULL: unchanged TOAST values are in the old row
	}
	if len(old) > 0 && keyChanged(rel, old, cur) {
		// The delete takes the update's ordinal and leaves it to the row
		// (record.MoveSource): the eventIds of the transaction's other
		// records do not depend on which updates the layout sees as moves.
		ordinal := t.ordinal
		t.move = true
		err := t.emit(ctx, rel, lsn, record.Delete, old, nil, nil)
		t.move, t.ordinal = false, ordinal
		if err != nil {
			return err
		}
		return t.emit(ctx, rel, lsn, record.Update, cur, old, fill)
	}
	return t.emit(ctx, rel, lsn, record.Update, cur, nil, fill)
}

// keepColumns appends to dst the columns of tuple at the indexes keep
// and returns dst both as the buffer to keep and as the cut tuple. A
// tuple too short for keep (a message that does not match its relation)
// is returned whole, for emit to refuse as it refuses any such tuple; an
// empty one (no old tuple) stays empty.
func keepColumns(dst, tuple []pgoutput.TupleColumn, keep []int) (buf, cut []pgoutput.TupleColumn) {
	if len(tuple) == 0 || keep[len(keep)-1] >= len(tuple) {
		return dst, tuple
	}
	for _, i := range keep {
		dst = append(dst, tuple[i])
	}
	return dst, dst
}

// keyChanged reports an update that moved the row to another ClickHouse
// key: its primary key, its tenant or a sorting column of its layout
// changed (ClickHouse orders by tenant,
// then key; a tenant outside the primary key is in the old tuple only with
// REPLICA IDENTITY FULL, which capture requires for such tables).
func keyChanged(rel *relation, old, cur []pgoutput.TupleColumn) bool {
	// An unchanged TOAST value (a key of about 2 KB or more, stored out of
	// line) is unchanged on either side.
	if i := rel.tenantIdx; i >= 0 && i < len(old) && i < len(cur) && old[i].Kind != pgoutput.TupleUnchanged && cur[i].Kind != pgoutput.TupleUnchanged &&
		(old[i].Kind != cur[i].Kind || string(old[i].Data) != string(cur[i].Data)) {
		return true
	}
	for _, i := range rel.keyIdx {
		if i >= len(old) || i >= len(cur) {
			return true
		}
		if old[i].Kind == pgoutput.TupleNull || old[i].Kind == pgoutput.TupleUnchanged || cur[i].Kind == pgoutput.TupleUnchanged {
			continue // not sent: unchanged
		}
		if string(old[i].Data) != string(cur[i].Data) {
			return true
		}
	}
	// The layout's sorting columns (in the replica identity, so the old
	// tuple carries them; NULL is a value here, not "not sent").
	for _, i := range rel.moveIdx {
		if i >= len(old) || i >= len(cur) {
			return true
		}
		if old[i].Kind == pgoutput.TupleUnchanged || cur[i].Kind == pgoutput.TupleUnchanged {
			continue // an unchanged TOAST value
		}
		if old[i].Kind != cur[i].Kind || string(old[i].Data) != string(cur[i].Data) {
			return true
		}
	}
	return false
}

// emit builds and encodes one record and hands it to the output. Values
// alias the WAL buffer; the output encodes or copies them before the next
// message is received.
func (t *translator) emit(ctx context.Context, rel *relation, lsn record.LSN, op record.Op, tuple, oldKey, fill []pgoutput.TupleColumn) error {
	if len(tuple) != len(rel.columns) {
		t.ordinal++
		return t.out.badRow(t.bad(rel, nil, record.ReasonInvalid, fmt.Errorf("%w: pgoutput sent a row of %d columns for a relation of %d", record.ErrInvalid, len(tuple), len(rel.columns))))
	}
	t.values = toValues(t.values[:0], tuple, fill)
	if op != record.Delete { // an insert too: an update into a row filter is sent as one
		for _, i := range rel.keyIdx {
			if i < len(t.values) && t.values[i].Unchanged {
				// A key value PostgreSQL stored out of line: an UPDATE
				// that leaves it alone sends it as unchanged TOAST, and
				// the default replica identity sends no old row to take it
				// from, so nothing says which row changed (nor which
				// row fillUnchanged would read the others from).
				t.ordinal++
				return t.out.badRow(t.bad(rel, nil, record.ReasonInvalid, fmt.Errorf("%w: primary-key column %q is stored out of line (TOAST: a key of about 2 KB or more) and PostgreSQL does not send it with an UPDATE that leaves it alone; set REPLICA IDENTITY FULL on %s (its old rows then carry the key), then load the rows such updates changed with walhouse verify --repair", record.ErrInvalid, rel.columns[i].Name, rel.name)))
			}
		}
	}
	if op != record.Delete && hasUnchanged(t.values) {
		if err := t.tables.fillUnchanged(ctx, rel, unchangedIn(op, oldKey), t.values); errors.Is(err, ErrRowTooLarge) {
			t.ordinal++
			b := t.bad(rel, nil, record.ReasonTooLarge, err)
			b.key = primaryKeyJSON(rel.columns, rel.keyIdx, t.values)
			return t.out.badRow(b)
		} else if err != nil {
			return err
		}
	}
	if len(rel.labelled) > 0 {
		if err := t.refreshLabels(ctx, rel, t.values); err != nil {
			return err
		}
	}
	if len(rel.enums) > 0 && t.watchEnumLabels {
		if err := t.watchEnums(ctx, rel, lsn, t.values); err != nil {
			return err
		}
	}
	version := record.Version(lsn)
	if t.move {
		version = record.MoveVersion(lsn) // below the row that follows it
	}
	r := &t.rec
	*r = record.Record{
		OccurredAt:   t.commitTime,
		IngestedAt:   t.now().UTC(),
		TenantColumn: rel.tenantColumn,
		Source:       rel.source,
		LSN:          lsn,
		CommitLSN:    t.commitLSN,
		Ordinal:      t.ordinal,
		Version:      version,
		Op:           op,
		Columns:      rel.columns,
		SchemaID:     rel.schemaID,
		Values:       t.values,
	}
	if oldKey != nil {
		t.oldKey = toValues(t.oldKey[:0], oldKey, nil)
		r.OldKey = t.oldKey
	}
	source := rel.eventSource
	if t.move {
		source = rel.moveSource
	}
	r.EventID = record.EventID(source, t.commitLSN, t.ordinal, t.commitTime)
	t.ordinal++ // also for a change set aside: the eventIds after it stay as they were
	if rel.tenantIdx >= 0 {
		v := t.values[rel.tenantIdx]
		if v.Null || v.Unchanged {
			return t.out.badRow(t.bad(rel, r, record.ReasonNoTenant, fmt.Errorf("the tenant column %s is NULL, so the row belongs to no tenant; make the column NOT NULL, or give such rows a tenant", rel.tenantColumn)))
		}
		r.TenantID = v.Text
	} else {
		r.TenantID = t.cfg.defaultTenant
	}
	if err := r.ValidateRow(); err != nil { // the columns were checked once, in buildRelation
		return t.out.badRow(t.bad(rel, r, record.ReasonInvalid, fmt.Errorf("the change does not form a valid record: %w", err)))
	}
	// A large record's size is known before it is encoded: one over the
	// bound is never written, one under it gets a buffer of its size.
	exact, err := preflight(rel.enc, r, t.cfg.maxRecordBytes)
	if err != nil {
		return t.out.badRow(t.bad(rel, r, record.ReasonTooLarge, err))
	}
	// Key and value share one buffer, sized from the table's last record so
	// it rarely grows; the relation's encoder copies the parts that depend
	// only on the table.
	capacity := rel.lastSize + rel.lastSize/8
	if exact > 0 {
		capacity = exact
	}
	_, key, value := rel.enc.AppendKeyValue(make([]byte, 0, capacity), r)
	size := len(value) + len(key)
	if err := checkRecordSize(size, t.cfg.maxRecordBytes); err != nil {
		return t.out.badRow(t.bad(rel, r, record.ReasonTooLarge, err))
	}
	if exact == 0 { // a large record says nothing about the table's next one
		rel.lastSize = max(size, 256)
	}
	return t.out.record(rel, r, key, value, t.move)
}

// fillCase is the kind of change whose values still have unchanged TOAST
// markers (pgoutput's 'u') once the old row, if it came, gave its own,
// which decides where capture looks for them.
type fillCase uint8

const (
	// fillUpdate is an update that kept the row's ClickHouse key. The
	// sink takes the values from the row's previous version, which is in
	// the same partition and loads first; only while the table's online
	// copy runs may that version be a copied row not loaded yet
	// (online.go).
	fillUpdate fillCase = iota + 1
	// fillKeyChange is an update that moved the row to another ClickHouse
	// key (keyChanged): its previous version is under the old key, in
	// another partition that may not have loaded it yet, or already
	// merged with the move's delete. Capture reads the values from the
	// source row, by its new key.
	fillKeyChange
	// fillInsert is an update that moved a row into a publication's row
	// filter, which pgoutput sends as an insert: ClickHouse never had the
	// row.
	fillInsert
)

// unchangedIn returns the case of a change of kind op (not a delete);
// oldKey is set for an update that changed the row's key, as in emit.
func unchangedIn(op record.Op, oldKey []pgoutput.TupleColumn) fillCase {
	switch {
	case op == record.Insert:
		return fillInsert
	case oldKey != nil:
		return fillKeyChange
	default:
		return fillUpdate
	}
}

// fromSource reports whether capture reads the unchanged values of a
// change of this case from the source row; copying says the table's
// online copy runs. A case it does not know reads the source too, which
// is always correct, only slower.
func (c fillCase) fromSource(copying bool) bool {
	if c == fillUpdate {
		return copying
	}
	return true
}

// String says what the case is, for error messages.
func (c fillCase) String() string {
	switch c {
	case fillUpdate:
		return "an update"
	case fillKeyChange:
		return "an update that changed the row's ClickHouse key"
	case fillInsert:
		return "an update sent as an insert (a row moved into a row filter)"
	default:
		return fmt.Sprintf("fill case %d", uint8(c))
	}
}

// bad describes a change of the transaction in progress that cannot become
// a record; r is the record as far as it was built, or nil.
func (t *translator) bad(rel *relation, r *record.Record, reason string, err error) badRow {
	b := badRow{table: rel.name, topic: rel.topic, commit: t.commitLSN, rec: r, reason: reason, err: err}
	if r != nil {
		b.key = primaryKeyJSON(rel.columns, rel.keyIdx, r.Values)
	}
	return b
}

// toValues converts tuple columns to record values. Text aliases the WAL
// buffer (no copy): the record is encoded before the buffer is reused.
func toValues(dst []record.Value, tuple, fill []pgoutput.TupleColumn) []record.Value {
	for i, col := range tuple {
		if col.Kind == pgoutput.TupleUnchanged && i < len(fill) && (fill[i].Kind == pgoutput.TupleText || fill[i].Kind == pgoutput.TupleNull) {
			col = fill[i]
		}
		switch col.Kind {
		case pgoutput.TupleNull:
			dst = append(dst, record.Value{Null: true})
		case pgoutput.TupleUnchanged:
			dst = append(dst, record.Value{Unchanged: true})
		default:
			dst = append(dst, record.Value{Text: unsafe.String(unsafe.SliceData(col.Data), len(col.Data))})
		}
	}
	return dst
}
