package capture

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/walhouse/walhouse/capture/pgoutput"
	"github.com/walhouse/walhouse/record"
	"github.com/walhouse/walhouse/schema"

	"github.com/walhouse/walhouse/capture/pgoutput/pgoutputtest"
)

// The translator's tests feed it decoded pgoutput messages and compare what
// it hands its output, one line per event, with what capture must produce.
// The catalog, the table set and the clock are scripted.

// Relation ids of the scripted tables.
const (
	relOrders   = 1 // public.orders (tenant_id, id, body), key (tenant_id, id)
	relDocs     = 2 // public.docs (id, tenant_id, body), key (id), REPLICA IDENTITY FULL
	relPlain    = 3 // public.plain (id, body), no tenant column
	relExcluded = 4 // public.secret, excluded from capture
	relLater    = 5 // public.later, captured only once it joins
)

// Type OIDs of the scripted catalog.
const (
	oidInt8      = 20
	oidText      = 25
	oidMood      = 16400 // an enum type
	oidInt8Array = 1016
)

// relationMsg describes a table the way pgoutput does. Columns are
// name:oid, with a trailing * for a column in the replica identity.
func relationMsg(id uint32, table string, identity byte, cols ...string) *pglogrepl.RelationMessage {
	m := &pglogrepl.RelationMessage{RelationID: id, Namespace: "public", RelationName: table, ReplicaIdentity: identity, ColumnNum: uint16(len(cols))}
	for _, c := range cols {
		name, oid, _ := strings.Cut(c, ":")
		col := &pglogrepl.RelationMessageColumn{Name: name, DataType: oidText, TypeModifier: -1}
		if strings.HasSuffix(oid, "*") {
			col.Flags = pgoutput.ColumnInIdentity
			oid = strings.TrimSuffix(oid, "*")
		}
		switch oid {
		case "int8":
			col.DataType = oidInt8
		case "mood":
			col.DataType = oidMood
		case "int8[]":
			col.DataType = oidInt8Array
		}
		m.Columns = append(m.Columns, col)
	}
	return m
}

var (
	ordersRel   = relationMsg(relOrders, "orders", 'd', "tenant_id:text*", "id:int8*", "body:text")
	docsRel     = relationMsg(relDocs, "docs", pgoutput.ReplicaIdentityFull, "id:int8*", "tenant_id:text*", "body:text*")
	plainRel    = relationMsg(relPlain, "plain", 'd', "id:int8*", "body:text")
	excludedRel = relationMsg(relExcluded, "secret", 'd', "tenant_id:text*", "id:int8*")
	laterRel    = relationMsg(relLater, "later", 'd', "tenant_id:text*", "id:int8*")
)

// scriptedCatalog answers a relation's lookups from maps, as the catalog
// would for the scripted tables.
type scriptedCatalog struct {
	keys     map[uint32][]string
	log      *[]string
	volatile map[string]bool // columns with a volatile default
	labels   *[]string       // the labels of every enum type
	reads    *int            // counts enumLabels calls
}

func (c scriptedCatalog) typeOf(_ context.Context, oid uint32) (typeInfo, error) {
	switch oid {
	case oidInt8:
		return typeInfo{name: "int8"}, nil
	case oidText:
		return typeInfo{name: "text"}, nil
	case oidMood:
		return typeInfo{name: "mood", enum: true, oid: oidMood}, nil
	case oidInt8Array:
		return typeInfo{name: "int8", array: true}, nil
	}
	return typeInfo{}, fmt.Errorf("type %d not scripted", oid)
}

func (c scriptedCatalog) tableKey(_ context.Context, relID uint32) (map[string]bool, error) {
	key := map[string]bool{}
	for _, k := range c.keys[relID] {
		key[k] = true
	}
	return key, nil
}

func (c scriptedCatalog) attnums(context.Context, uint32) (map[string]columnInfo, error) {
	return nil, nil
}

func (c scriptedCatalog) enumLabels(_ context.Context, oid uint32) ([]string, error) {
	if c.labels == nil {
		return nil, fmt.Errorf("enum %d not scripted", oid)
	}
	*c.reads++
	return *c.labels, nil
}

func (c scriptedCatalog) volatileDefaults(context.Context, uint32) (map[string]bool, error) {
	return c.volatile, nil
}

func (c scriptedCatalog) setColumns(relID uint32, cols map[string]columnInfo) {
	names := make([]string, 0, len(cols))
	for n, ci := range cols {
		names = append(names, fmt.Sprintf("%s=%d", n, ci.attnum))
	}
	slices.Sort(names)
	*c.log = append(*c.log, fmt.Sprintf("columns of relation %d: %s", relID, strings.Join(names, " ")))
}

// collector is the translator's table set and output: it writes what it
// is handed into log, one line per event, and checks that every record
// decodes to what the translator built.
type collector struct {
	fillErr   error // what fillUnchanged returns where it reads the source
	t         testing.TB
	log       []string
	tables    []string
	schemas   *memRegistry
	now       time.Time
	committed time.Time // commit time of the transaction in progress
	dec       record.Decoder
	// copying: tables whose copy runs. Where fillCase.fromSource says
	// so, unchanged values are filled with "from source".
	copying map[string]bool
	// refused counts the changes of tables left out, by table.
	refused map[string]prometheus.Counter
	// rows are the eventIds and payload hashes of the records that are
	// not a move's delete, in order.
	rows []string
}

func (c *collector) captured(table string) bool { return slices.Contains(c.tables, table) }

func (c *collector) join(_ context.Context, table string) error {
	c.log = append(c.log, "join "+table)
	c.tables = append(c.tables, table)
	return nil
}

func (c *collector) described(_ context.Context, rel *relation, _ uint32) error {
	c.log = append(c.log, "topic "+rel.topic)
	return nil
}

func (c *collector) leave(_ context.Context, table string, why error) error {
	c.log = append(c.log, fmt.Sprintf("leave %s %v", table, refusalReasons(why)))
	c.tables = slices.DeleteFunc(c.tables, func(t string) bool { return t == table })
	return nil
}

func (c *collector) refusedChanges(table string) prometheus.Counter {
	if c.refused[table] == nil {
		if c.refused == nil {
			c.refused = map[string]prometheus.Counter{}
		}
		c.refused[table] = prometheus.NewCounter(prometheus.CounterOpts{Name: "refused"})
	}
	return c.refused[table]
}

func (c *collector) fillUnchanged(_ context.Context, rel *relation, fc fillCase, values []record.Value) error {
	if !fc.fromSource(c.copying[rel.name]) {
		return nil
	}
	c.log = append(c.log, "read from source: "+fc.String())
	if c.fillErr != nil {
		return c.fillErr
	}
	for i := range values {
		if values[i].Unchanged {
			values[i] = record.Value{Text: "from source"}
		}
	}
	return nil
}

func (c *collector) rewritten(_ context.Context, rw rewrite) error {
	entry := fmt.Sprintf("rewritten %s at %s", rw.table, rw.at)
	if rw.recopy != "" {
		entry += " for re-copy " + rw.recopy
	}
	if rw.enum != "" {
		entry += " for enum " + rw.enum
	}
	if rw.inexact != "" {
		entry += " inexact"
	}
	c.log = append(c.log, entry)
	return nil
}

func (c *collector) begin() { c.log = append(c.log, "begin") }

func (c *collector) commit(end record.LSN, at time.Time) {
	c.log = append(c.log, fmt.Sprintf("commit %s at %s", end, at.UTC().Format(time.TimeOnly)))
}

func (c *collector) record(rel *relation, r *record.Record, key, value []byte, move bool) error {
	got, err := c.dec.Decode(value, c.schemas)
	if err != nil {
		c.t.Fatalf("record of %s does not decode: %v", rel.name, err)
	}
	if string(key) != string(r.AppendPartitionKey(nil)) {
		c.t.Errorf("record key %q, want the partition key of the record", key)
	}
	// What every record of a change carries, whatever the change.
	src := record.ChangeSource("src", got.Source.Schema, got.Source.Table)
	if move {
		src = record.MoveSource("src", got.Source.Schema, got.Source.Table)
	}
	if want := record.EventID(src, got.CommitLSN, got.Ordinal, c.committed); got.EventID != want || got.EventID != r.EventID {
		c.t.Errorf("eventId %s (built %s), want %s", got.EventID, r.EventID, want)
	}
	// A move's delete is one version below the row that follows it, so
	// the row wins wherever the two share a ClickHouse key.
	wantVersion := record.Version(got.LSN)
	if move {
		wantVersion = record.MoveVersion(got.LSN)
	}
	if !got.IngestedAt.Equal(c.now) || !got.OccurredAt.Equal(c.committed) || got.Version != wantVersion || move && got.Op != record.Delete {
		c.t.Errorf("%s: ingested %s occurred %s version %d lsn %s: want ingested %s, occurred at the commit %s, version %d (move: %t)", got.Op, got.IngestedAt, got.OccurredAt, got.Version, got.LSN, c.now, c.committed, wantVersion, move)
	}
	op := map[record.Op]string{record.Insert: "insert", record.Update: "update", record.Delete: "delete"}[got.Op]
	line := fmt.Sprintf("%s %s.%s lsn %s #%d tenant %q %s", op, got.Source.Schema, got.Source.Table, got.LSN, got.Ordinal, got.TenantID, values(got.Values))
	if got.OldKey != nil {
		line += " old key " + values(got.OldKey)
	}
	if move {
		line += " (move)"
	} else {
		c.rows = append(c.rows, got.EventID+" "+record.PayloadHash(got))
	}
	c.log = append(c.log, line)
	return nil
}

func (c *collector) badRow(b badRow) error {
	line := fmt.Sprintf("dead letter %s %s commit %s key %s", b.table, b.reason, b.commit, b.key)
	if b.rec != nil {
		line += fmt.Sprintf(" #%d", b.rec.Ordinal)
	}
	c.log = append(c.log, line)
	return nil
}

func (c *collector) truncate(_ context.Context, rel *relation, tr record.Truncate) error {
	c.log = append(c.log, fmt.Sprintf("truncate %s.%s lsn %s cascade %v", tr.Source.Schema, tr.Source.Table, tr.LSN, tr.Cascade))
	return nil
}

func (c *collector) heartbeat(_ context.Context, lsn record.LSN, at time.Time) error {
	c.log = append(c.log, fmt.Sprintf("heartbeat lsn %s at %s", lsn, at.UTC().Format(time.TimeOnly)))
	return nil
}

// values writes a row as ('text', NULL, ?) with ? for an unchanged value.
func values(vs []record.Value) string {
	out := make([]string, len(vs))
	for i, v := range vs {
		switch {
		case v.Null:
			out[i] = "NULL"
		case v.Unchanged:
			out[i] = "?"
		default:
			out[i] = "'" + v.Text + "'"
		}
	}
	return "(" + strings.Join(out, ", ") + ")"
}

// memRegistry is a schema registry in memory.
type memRegistry struct{ record.SchemaSet }

func (m *memRegistry) Register(_ context.Context, s record.Schema) error {
	m.Add(s)
	return nil
}

// Tuple columns.
func txt(v string) pgoutput.TupleColumn {
	return pgoutput.TupleColumn{Kind: pgoutput.TupleText, Data: []byte(v)}
}

var (
	null  = pgoutput.TupleColumn{Kind: pgoutput.TupleNull}
	toast = pgoutput.TupleColumn{Kind: pgoutput.TupleUnchanged}
)

// step is one decoded message and where it was received.
type step struct {
	lsn record.LSN
	msg any
}

var commitTime = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)

func begin(final record.LSN) step {
	return step{msg: &pglogrepl.BeginMessage{FinalLSN: pglogrepl.LSN(final), CommitTime: commitTime}}
}

func commit(lsn, end record.LSN) step {
	return step{lsn: lsn, msg: &pglogrepl.CommitMessage{CommitLSN: pglogrepl.LSN(lsn), TransactionEndLSN: pglogrepl.LSN(end), CommitTime: commitTime}}
}

func describe(m *pglogrepl.RelationMessage) step { return step{msg: m} }

func insert(lsn record.LSN, rel uint32, row ...pgoutput.TupleColumn) step {
	return step{lsn: lsn, msg: &pgoutput.RowChange{Kind: pgoutput.MessageTypeInsert, RelationID: rel, New: row}}
}

// update with an old tuple of kind oldKind (0: none).
func update(lsn record.LSN, rel uint32, oldKind byte, old []pgoutput.TupleColumn, row ...pgoutput.TupleColumn) step {
	return step{lsn: lsn, msg: &pgoutput.RowChange{Kind: pgoutput.MessageTypeUpdate, RelationID: rel, OldKind: oldKind, Old: old, New: row}}
}

func del(lsn record.LSN, rel uint32, oldKind byte, old ...pgoutput.TupleColumn) step {
	return step{lsn: lsn, msg: &pgoutput.RowChange{Kind: pgoutput.MessageTypeDelete, RelationID: rel, OldKind: oldKind, Old: old}}
}

func row(cols ...pgoutput.TupleColumn) []pgoutput.TupleColumn { return cols }

func logical(lsn record.LSN, transactional bool, prefix string, content []byte) step {
	return step{lsn: lsn, msg: pgoutput.LogicalMessage{Transactional: transactional, Prefix: prefix, Content: content}}
}

func truncate(lsn record.LSN, cascade bool, rels ...uint32) step {
	return step{lsn: lsn, msg: pgoutput.TruncateMessage{Cascade: cascade, Relations: rels}}
}

// feed hands a decoded message to the translator.
func feed(ctx context.Context, tr *translator, s step) error {
	switch m := s.msg.(type) {
	case *pglogrepl.BeginMessage:
		tr.begin(m)
		return nil
	case *pglogrepl.CommitMessage:
		return tr.commit(s.lsn, m)
	case *pglogrepl.RelationMessage:
		return tr.describe(ctx, s.lsn, m)
	case *pgoutput.RowChange:
		return tr.rowChange(ctx, s.lsn, m)
	case pgoutput.LogicalMessage:
		return tr.logical(ctx, s.lsn, m)
	case pgoutput.TruncateMessage:
		return tr.truncate(ctx, s.lsn, m)
	}
	panic(fmt.Sprintf("step %T", s.msg))
}

// The keys of the scripted messages: the one capture signs with, and one
// a forger made up.
var (
	captureKey = messageKey(strings.Repeat("k", messageKeyLen))
	forgerKey  = messageKey(strings.Repeat("f", messageKeyLen))
)

// newTestTranslator returns a translator over the scripted tables, with
// public.later not captured yet and public.secret excluded.
func newTestTranslator(t testing.TB, opts ...Option) (*translator, *collector, *ignoredMessages) {
	cfg := defaults()
	cfg.topicPrefix = "wh"
	reg := &memRegistry{}
	cfg.schemas = reg
	for _, o := range append([]Option{WithExcludeTables("public.secret")}, opts...) {
		o(&cfg)
	}
	col := &collector{t: t, tables: []string{"public.orders", "public.docs", "public.plain"}, schemas: reg,
		now: time.Date(2026, 3, 4, 5, 6, 8, 0, time.UTC), committed: commitTime}
	cat := scriptedCatalog{keys: map[uint32][]string{
		relOrders: {"tenant_id", "id"}, relDocs: {"id"}, relPlain: {"id"}, relExcluded: {"tenant_id", "id"}, relLater: {"tenant_id", "id"},
	}, log: &col.log, volatile: map[string]bool{"stamp": true}}
	ignored := newIgnoredMessages(slog.New(slog.DiscardHandler))
	tr := newTranslator(&cfg, "src", cat, col, col, captureKey, ignored)
	tr.now = func() time.Time { return col.now }
	return tr, col, ignored
}

func TestTranslator(t *testing.T) {
	ddl := []byte(`{"oid": 2, "columns": [[1, "id", null], [2, "tenant_id", null], [4, "body", null]]}`)
	beatAt := time.Date(2026, 3, 4, 5, 6, 9, 0, time.UTC)
	tests := []struct {
		name    string
		opts    []Option
		copying map[string]bool
		steps   []step
		want    []string
		ignored float64 // walhouse messages skipped
		refused float64 // changes of tables left out
	}{
		{
			name: "insert, update, delete",
			steps: []step{
				describe(ordersRel), begin(0x100),
				insert(0x10, relOrders, txt("acme"), txt("1"), txt("a")),
				update(0x20, relOrders, 0, nil, txt("acme"), txt("1"), txt("b")),
				del(0x30, relOrders, pgoutput.TupleOldKey, txt("acme"), txt("1"), null),
				commit(0x100, 0x108),
			},
			want: []string{
				"topic wh.public.orders", "begin",
				`insert public.orders lsn 0/10 #0 tenant "acme" ('acme', '1', 'a')`,
				`update public.orders lsn 0/20 #1 tenant "acme" ('acme', '1', 'b')`,
				`delete public.orders lsn 0/30 #2 tenant "acme" ('acme', '1', NULL)`,
				"commit 0/108 at 05:06:07",
			},
		},
		{
			name: "a key change is a delete of the old key, then the new row",
			steps: []step{
				describe(ordersRel), begin(0x100),
				update(0x20, relOrders, pgoutput.TupleOldKey, row(txt("acme"), txt("1"), null), txt("acme"), txt("2"), txt("b")),
				insert(0x30, relOrders, txt("acme"), txt("3"), txt("c")),
				commit(0x100, 0x108),
			},
			want: []string{
				"topic wh.public.orders", "begin",
				`delete public.orders lsn 0/20 #0 tenant "acme" ('acme', '1', NULL) (move)`,
				`update public.orders lsn 0/20 #0 tenant "acme" ('acme', '2', 'b') old key ('acme', '1', NULL)`, // the delete's ordinal: ordinals number changes
				`insert public.orders lsn 0/30 #1 tenant "acme" ('acme', '3', 'c')`,
				"commit 0/108 at 05:06:07",
			},
		},
		{
			name: "a tenant change outside the key deletes the row under the old tenant",
			steps: []step{
				describe(docsRel), begin(0x100),
				update(0x20, relDocs, pgoutput.TupleOldRow, row(txt("1"), txt("acme"), txt("x")), txt("1"), txt("globex"), txt("x")),
				update(0x30, relDocs, pgoutput.TupleOldRow, row(txt("1"), txt("globex"), txt("x")), txt("1"), txt("globex"), txt("y")),
				commit(0x100, 0x108),
			},
			want: []string{
				"topic wh.public.docs", "begin",
				`delete public.docs lsn 0/20 #0 tenant "acme" ('1', 'acme', 'x') (move)`,
				`update public.docs lsn 0/20 #0 tenant "globex" ('1', 'globex', 'x') old key ('1', NULL, NULL)`, // the key columns only
				`update public.docs lsn 0/30 #1 tenant "globex" ('1', 'globex', 'y')`,
				"commit 0/108 at 05:06:07",
			},
		},
		{
			name: "an excluded column is cut from every change before its record",
			opts: []Option{WithTableLayout("public.docs", schema.Layout{ExcludeColumns: []string{"body"}})},
			steps: []step{
				describe(docsRel), begin(0x100),
				insert(0x10, relDocs, txt("1"), txt("acme"), txt("secret")),
				update(0x20, relDocs, pgoutput.TupleOldRow, row(txt("1"), txt("acme"), txt("secret")), txt("1"), txt("globex"), txt("secret 2")),
				del(0x30, relDocs, pgoutput.TupleOldRow, txt("1"), txt("globex"), txt("secret 2")),
				commit(0x100, 0x108),
			},
			want: []string{
				"topic wh.public.docs", "begin",
				`insert public.docs lsn 0/10 #0 tenant "acme" ('1', 'acme')`,
				`delete public.docs lsn 0/20 #1 tenant "acme" ('1', 'acme') (move)`,
				`update public.docs lsn 0/20 #1 tenant "globex" ('1', 'globex') old key ('1', NULL)`,
				`delete public.docs lsn 0/30 #2 tenant "globex" ('1', 'globex')`,
				"commit 0/108 at 05:06:07",
			},
		},
		{
			name: "a change of a layout's sorting column is a delete of the old row, then the new row",
			opts: []Option{WithTableLayout("public.docs", schema.Layout{OrderBy: []string{"tenant_id", "body", "id"}})},
			steps: []step{
				describe(docsRel), begin(0x100),
				update(0x20, relDocs, pgoutput.TupleOldRow, row(txt("1"), txt("acme"), txt("x")), txt("1"), txt("acme"), txt("y")),
				update(0x30, relDocs, pgoutput.TupleOldRow, row(txt("1"), txt("acme"), txt("y")), txt("1"), txt("acme"), txt("y")),
				update(0x40, relDocs, pgoutput.TupleOldRow, row(txt("1"), txt("acme"), txt("y")), txt("1"), txt("acme"), null),
				update(0x50, relDocs, pgoutput.TupleOldRow, row(txt("1"), txt("acme"), toast), txt("1"), txt("acme"), toast),
				commit(0x100, 0x108),
			},
			want: []string{
				"topic wh.public.docs", "begin",
				`delete public.docs lsn 0/20 #0 tenant "acme" ('1', 'acme', 'x') (move)`,
				`update public.docs lsn 0/20 #0 tenant "acme" ('1', 'acme', 'y') old key ('1', NULL, NULL)`,
				`update public.docs lsn 0/30 #1 tenant "acme" ('1', 'acme', 'y')`,        // same body: stays
				`delete public.docs lsn 0/40 #2 tenant "acme" ('1', 'acme', 'y') (move)`, // to NULL: a move too
				`update public.docs lsn 0/40 #2 tenant "acme" ('1', 'acme', NULL) old key ('1', NULL, NULL)`,
				`update public.docs lsn 0/50 #3 tenant "acme" ('1', 'acme', ?)`, // unchanged TOAST: not a move
				"commit 0/108 at 05:06:07",
			},
		},
		{
			name: "unchanged TOAST: filled from the old row under REPLICA IDENTITY FULL, else left unchanged",
			steps: []step{
				describe(ordersRel), describe(docsRel), begin(0x100),
				update(0x20, relDocs, pgoutput.TupleOldRow, row(txt("1"), txt("acme"), txt("long")), txt("1"), txt("acme"), toast),
				update(0x30, relDocs, pgoutput.TupleOldRow, row(txt("1"), txt("acme"), toast), txt("1"), txt("acme"), toast),
				update(0x40, relOrders, 0, nil, txt("acme"), txt("1"), toast),
				commit(0x100, 0x108),
			},
			want: []string{
				"topic wh.public.orders", "topic wh.public.docs", "begin",
				`update public.docs lsn 0/20 #0 tenant "acme" ('1', 'acme', 'long')`,
				`update public.docs lsn 0/30 #1 tenant "acme" ('1', 'acme', ?)`,
				`update public.orders lsn 0/40 #2 tenant "acme" ('acme', '1', ?)`,
				"commit 0/108 at 05:06:07",
			},
		},
		{
			// A key of about 2 KB or more is stored out of line; an update
			// that leaves it alone sends it unchanged, and only an old row
			// (REPLICA IDENTITY FULL) says which row changed.
			name: "a key sent as unchanged TOAST is a dead letter naming the fix, unless the old row has it",
			steps: []step{
				describe(ordersRel), describe(docsRel), begin(0x100),
				update(0x20, relOrders, 0, nil, txt("acme"), toast, txt("new body")),
				update(0x30, relDocs, pgoutput.TupleOldRow, row(txt("1"), txt("acme"), txt("x")), toast, txt("acme"), txt("y")),
				commit(0x100, 0x108),
			},
			want: []string{
				"topic wh.public.orders", "topic wh.public.docs", "begin",
				"dead letter public.orders invalid_record commit 0/100 key ",
				`update public.docs lsn 0/30 #1 tenant "acme" ('1', 'acme', 'y')`, // no move: the key is unchanged
				"commit 0/108 at 05:06:07",
			},
		},
		{
			// The old key's version is in another partition, or merged
			// with the move's delete: the values come from the source row,
			// unless the old row (REPLICA IDENTITY FULL) has them.
			name: "unchanged TOAST of a key change is read from the source, unless the old row has it",
			steps: []step{
				describe(ordersRel), describe(docsRel), begin(0x100),
				update(0x20, relOrders, pgoutput.TupleOldKey, row(txt("acme"), txt("1"), null), txt("acme"), txt("2"), toast),
				update(0x30, relOrders, 0, nil, txt("acme"), txt("2"), toast),
				update(0x50, relDocs, pgoutput.TupleOldRow, row(txt("1"), txt("acme"), txt("long")), txt("1"), txt("globex"), toast),
				update(0x60, relDocs, pgoutput.TupleOldRow, row(txt("1"), txt("globex"), toast), txt("1"), txt("acme"), toast),
				commit(0x100, 0x108),
			},
			want: []string{
				"topic wh.public.orders", "topic wh.public.docs", "begin",
				`delete public.orders lsn 0/20 #0 tenant "acme" ('acme', '1', NULL) (move)`,
				"read from source: an update that changed the row's ClickHouse key",
				`update public.orders lsn 0/20 #0 tenant "acme" ('acme', '2', 'from source') old key ('acme', '1', NULL)`,
				`update public.orders lsn 0/30 #1 tenant "acme" ('acme', '2', ?)`, // the key stays: the sink's
				`delete public.docs lsn 0/50 #2 tenant "acme" ('1', 'acme', 'long') (move)`,
				`update public.docs lsn 0/50 #2 tenant "globex" ('1', 'globex', 'long') old key ('1', NULL, NULL)`, // the old row's
				`delete public.docs lsn 0/60 #3 tenant "globex" ('1', 'globex', ?) (move)`,
				"read from source: an update that changed the row's ClickHouse key",
				`update public.docs lsn 0/60 #3 tenant "acme" ('1', 'acme', 'from source') old key ('1', NULL, NULL)`, // the old row lacks it
				"commit 0/108 at 05:06:07",
			},
		},
		{
			name:    "unchanged TOAST of a table being copied is read from the source",
			copying: map[string]bool{"public.orders": true},
			steps: []step{
				describe(ordersRel), begin(0x100),
				update(0x40, relOrders, 0, nil, txt("acme"), txt("1"), toast),
				insert(0x50, relOrders, txt("acme"), txt("2"), txt("c")),
				commit(0x100, 0x108),
			},
			want: []string{
				"topic wh.public.orders", "begin", "read from source: an update",
				`update public.orders lsn 0/40 #0 tenant "acme" ('acme', '1', 'from source')`,
				`insert public.orders lsn 0/50 #1 tenant "acme" ('acme', '2', 'c')`,
				"commit 0/108 at 05:06:07",
			},
		},
		{
			// pgoutput sends an update that moved a row into a row filter
			// as an insert, with unchanged TOAST markers unless the old
			// row has them: ClickHouse never had the row to take them from.
			name: "unchanged TOAST of an insert (a row moved into a row filter) is read from the source",
			steps: []step{
				describe(ordersRel), begin(0x100),
				insert(0x50, relOrders, txt("acme"), txt("2"), toast),
				update(0x60, relOrders, 0, nil, txt("acme"), txt("2"), toast),
				commit(0x100, 0x108),
			},
			want: []string{
				"topic wh.public.orders", "begin", "read from source: an update sent as an insert (a row moved into a row filter)",
				`insert public.orders lsn 0/50 #0 tenant "acme" ('acme', '2', 'from source')`,
				`update public.orders lsn 0/60 #1 tenant "acme" ('acme', '2', ?)`,
				"commit 0/108 at 05:06:07",
			},
		},
		{
			name: "NULL tenant: a dead letter, and the ordinals after it stay as they were",
			steps: []step{
				describe(docsRel), begin(0x100),
				insert(0x10, relDocs, txt("1"), txt("acme"), txt("a")),
				insert(0x20, relDocs, txt("2"), null, txt("b")),
				insert(0x30, relDocs, txt("3"), txt("acme"), txt("c")),
				insert(0x40, relDocs, txt("4"), txt("acme")), // a column short
				insert(0x50, relDocs, txt("5"), txt("acme"), txt("e")),
				commit(0x100, 0x108),
			},
			want: []string{
				"topic wh.public.docs", "begin",
				`insert public.docs lsn 0/10 #0 tenant "acme" ('1', 'acme', 'a')`,
				`dead letter public.docs no_tenant commit 0/100 key {"id":"2"} #1`,
				`insert public.docs lsn 0/30 #2 tenant "acme" ('3', 'acme', 'c')`,
				`dead letter public.docs invalid_record commit 0/100 key `,
				`insert public.docs lsn 0/50 #4 tenant "acme" ('5', 'acme', 'e')`,
				"commit 0/108 at 05:06:07",
			},
		},
		{
			name: "the empty tenant is a tenant, carried as is",
			steps: []step{
				describe(ordersRel), begin(0x100),
				insert(0x10, relOrders, txt(""), txt("1"), txt("a")),
				commit(0x100, 0x108),
			},
			want: []string{
				"topic wh.public.orders", "begin",
				`insert public.orders lsn 0/10 #0 tenant "" ('', '1', 'a')`,
				"commit 0/108 at 05:06:07",
			},
		},
		{
			name: "a table without a tenant column takes the default tenant",
			opts: []Option{WithDefaultTenant("house")},
			steps: []step{
				describe(plainRel), begin(0x100),
				insert(0x10, relPlain, txt("1"), txt("a")),
				commit(0x100, 0x108),
			},
			want: []string{
				"topic wh.public.plain", "begin",
				`insert public.plain lsn 0/10 #0 tenant "house" ('1', 'a')`,
				"commit 0/108 at 05:06:07",
			},
		},
		{
			name: "a table without a tenant column or a default tenant is left out, its changes counted",
			steps: []step{
				describe(plainRel), describe(ordersRel), begin(0x100),
				insert(0x10, relPlain, txt("1"), txt("a")),
				insert(0x20, relOrders, txt("acme"), txt("1"), txt("a")),
				truncate(0x30, false, relPlain),
				commit(0x100, 0x108),
			},
			want: []string{
				"leave public.plain [no_tenant_column]", "topic wh.public.orders", "begin",
				`insert public.orders lsn 0/20 #0 tenant "acme" ('acme', '1', 'a')`,
				"commit 0/108 at 05:06:07",
			},
			refused: 2,
		},
		{
			name: "a captured table that loses its tenant column is left out, the others go on",
			steps: []step{
				describe(docsRel), describe(ordersRel), begin(0x100),
				insert(0x10, relDocs, txt("1"), txt("acme"), txt("a")),
				commit(0x100, 0x108),
				describe(relationMsg(relDocs, "docs", pgoutput.ReplicaIdentityFull, "id:int8*", "body:text*")), begin(0x200),
				insert(0x110, relDocs, txt("2"), txt("b")),
				del(0x120, relDocs, pgoutput.TupleOldRow, txt("1"), txt("a")),
				insert(0x130, relOrders, txt("acme"), txt("1"), txt("a")),
				commit(0x200, 0x208),
			},
			want: []string{
				"topic wh.public.docs", "topic wh.public.orders", "begin",
				`insert public.docs lsn 0/10 #0 tenant "acme" ('1', 'acme', 'a')`,
				"commit 0/108 at 05:06:07",
				"leave public.docs [no_tenant_column]", "begin",
				`insert public.orders lsn 0/130 #0 tenant "acme" ('acme', '1', 'a')`,
				"commit 0/208 at 05:06:07",
			},
			refused: 2,
		},
		{
			name: "a captured table whose replica identity becomes NOTHING is left out",
			steps: []step{
				describe(ordersRel),
				describe(relationMsg(relOrders, "orders", 'n', "tenant_id:text", "id:int8", "body:text")), begin(0x100),
				insert(0x10, relOrders, txt("acme"), txt("1"), txt("a")),
				commit(0x100, 0x108),
			},
			want:    []string{"topic wh.public.orders", "leave public.orders [replica_identity]", "begin", "commit 0/108 at 05:06:07"},
			refused: 1,
		},
		{
			name: "a record over the bound is a dead letter",
			opts: []Option{WithMaxRecordBytes(1024)},
			steps: []step{
				describe(ordersRel), begin(0x100),
				insert(0x10, relOrders, txt("acme"), txt("1"), txt(strings.Repeat("x", 2000))),
				insert(0x20, relOrders, txt("acme"), txt("2"), txt("b")),
				commit(0x100, 0x108),
			},
			want: []string{
				"topic wh.public.orders", "begin",
				`dead letter public.orders too_large commit 0/100 key {"id":"1","tenant_id":"acme"} #0`,
				`insert public.orders lsn 0/20 #1 tenant "acme" ('acme', '2', 'b')`,
				"commit 0/108 at 05:06:07",
			},
		},
		{
			name: "excluded tables are skipped; a described table joins at its first change",
			steps: []step{
				describe(excludedRel), describe(laterRel), begin(0x100),
				insert(0x10, relExcluded, txt("acme"), txt("1")),
				insert(0x20, relLater, txt("acme"), txt("1")),
				insert(0x30, relLater, txt("acme"), txt("2")),
				commit(0x100, 0x108),
			},
			want: []string{
				"begin", "join public.later", "topic wh.public.later",
				`insert public.later lsn 0/20 #0 tenant "acme" ('acme', '1')`,
				`insert public.later lsn 0/30 #1 tenant "acme" ('acme', '2')`,
				"commit 0/108 at 05:06:07",
			},
		},
		{
			name: "truncate marks captured tables only",
			steps: []step{
				describe(ordersRel), describe(excludedRel), describe(docsRel), begin(0x100),
				truncate(0x10, true, relOrders, relExcluded, relDocs),
				commit(0x100, 0x108),
			},
			want: []string{
				"topic wh.public.orders", "topic wh.public.docs", "begin",
				"truncate public.orders lsn 0/10 cascade true",
				"truncate public.docs lsn 0/10 cascade true",
				"commit 0/108 at 05:06:07",
			},
		},
		{
			name: "a signed heartbeat and DDL notice are taken",
			steps: []step{
				logical(0x10, false, heartbeatPrefix, captureKey.heartbeatContent(beatAt)),
				begin(0x100), logical(0x20, true, ddlPrefix, captureKey.sign(ddl)), commit(0x100, 0x108),
			},
			want: []string{
				"heartbeat lsn 0/10 at 05:06:09",
				"begin", "columns of relation 2: body=4 id=1 tenant_id=2", "commit 0/108 at 05:06:07",
			},
		},
		{
			// Captured as itself, as its partition root, or not at all.
			name: "a signed rewrite notice copies the captured table it names",
			steps: []step{
				begin(0x100),
				logical(0x20, true, rewritePrefix, captureKey.sign(rewriteOf("public", "orders", "public", "orders"))),
				logical(0x21, true, rewritePrefix, captureKey.sign(rewriteOf("public", "docs_2026", "public", "docs"))),
				logical(0x22, true, rewritePrefix, captureKey.sign(rewriteOf("public", "secret", "public", "secret"))),
				logical(0x23, true, rewritePrefix, captureKey.sign(rewriteOf("public", "unknown", "public", "unknown"))),
				commit(0x100, 0x108),
			},
			want: []string{"begin", "rewritten public.orders at 0/20", "rewritten public.docs at 0/21", "commit 0/108 at 05:06:07"},
		},
		{
			// ALTER TYPE ... RENAME VALUE: copied at the DDL's commit,
			// once for a root that its partitions each name.
			name: "a signed enum rename notice copies the captured table at the commit",
			steps: []step{
				begin(0x100),
				logical(0x20, true, rewritePrefix, captureKey.sign(enumRenameOf("public", "orders", "public", "orders"))),
				logical(0x21, true, rewritePrefix, captureKey.sign(enumRenameOf("public", "docs_2026", "public", "docs"))),
				logical(0x22, true, rewritePrefix, captureKey.sign(enumRenameOf("public", "docs_2027", "public", "docs"))),
				logical(0x23, true, rewritePrefix, captureKey.sign(enumRenameOf("public", "secret", "public", "secret"))),
				logical(0x24, true, rewritePrefix, captureKey.sign([]byte(`{"oid":42,"table":["public","orders"],"root":["public","orders"],"enum":["mood"]}`))),
				commit(0x100, 0x108),
			},
			want:    []string{"begin", "rewritten public.orders at 0/100 for enum public.mood", "rewritten public.docs at 0/100 for enum public.mood", "commit 0/108 at 05:06:07"},
			ignored: 1,
		},
		{
			// A column a layout stores as Enum8 follows the rename: a
			// table that holds the enum only there is not copied.
			name: "an enum rename notice copies no table whose every column of the enum is an Enum8",
			opts: []Option{
				WithTableLayout("public.orders", schema.Layout{Columns: map[string]schema.ColumnLayout{"body": {Type: "Enum8"}}}),
				WithTableLayout("public.docs", schema.Layout{Columns: map[string]schema.ColumnLayout{"body": {Type: "Enum8"}}}),
			},
			steps: []step{
				begin(0x100),
				logical(0x20, true, rewritePrefix, captureKey.sign(enumRenameIn("orders", []string{"body"}, []string{"body"}))),
				logical(0x21, true, rewritePrefix, captureKey.sign(enumRenameIn("docs", []string{"body", "tags"}, []string{"body"}))),
				commit(0x100, 0x108),
			},
			want: []string{"begin", "rewritten public.docs at 0/100 for enum public.mood", "commit 0/108 at 05:06:07"},
		},
		{
			// A sink's re-copy request, noticed by capture outside any
			// transaction: copied at the notice, as a rewrite; forged,
			// malformed and not captured ones are skipped.
			name: "a signed re-copy notice copies the captured table it names",
			steps: []step{
				logical(0x20, false, recopyPrefix, captureKey.sign([]byte(`{"id":"r1","table":"public.orders"}`))),
				logical(0x21, false, recopyPrefix, forgerKey.sign([]byte(`{"id":"r2","table":"public.orders"}`))),
				logical(0x22, false, recopyPrefix, captureKey.sign([]byte(`{"id":"","table":"public.orders"}`))),
				logical(0x23, false, recopyPrefix, captureKey.sign([]byte(`{"id":"r3","table":"public.secret"}`))),
				logical(0x24, false, recopyPrefix, captureKey.sign([]byte(`{"id":"r4","table":"public.unknown"}`))),
			},
			want:    []string{"rewritten public.orders at 0/20 for re-copy r1"},
			ignored: 2,
		},
		{
			// No notice: the Relation message shows a type change that
			// PostgreSQL makes by rewriting, so the table is copied at
			// the position just below its first change after it.
			name: "without a notice, a Relation message with a retyped column copies the table",
			steps: []step{
				describe(ordersRel), begin(0x100),
				describe(relationMsg(relOrders, "orders", 'd', "tenant_id:text*", "id:int8*", "body:int8")),
				insert(0x30, relOrders, txt("acme"), txt("1"), txt("7")),
				insert(0x38, relOrders, txt("acme"), txt("2"), txt("8")),
				commit(0x100, 0x108),
			},
			want: []string{
				"topic wh.public.orders", "begin", "topic wh.public.orders", "rewritten public.orders at 0/2F",
				`insert public.orders lsn 0/30 #0 tenant "acme" ('acme', '1', '7')`,
				`insert public.orders lsn 0/38 #1 tenant "acme" ('acme', '2', '8')`, "commit 0/108 at 05:06:07",
			},
		},
		{
			// A column added with a volatile default; one added without
			// (or with a default older rows read as stored) is no rewrite.
			name: "without a notice, a Relation message with a column with a volatile default copies the table",
			steps: []step{
				describe(plainRel), begin(0x100),
				describe(relationMsg(relPlain, "plain", 'd', "id:int8*", "body:text", "note:text")),
				insert(0x30, relPlain, txt("1"), txt("a"), null),
				describe(relationMsg(relPlain, "plain", 'd', "id:int8*", "body:text", "note:text", "stamp:text")),
				insert(0x40, relPlain, txt("2"), txt("b"), null, txt("now")),
				commit(0x100, 0x108),
			},
			opts: []Option{WithDefaultTenant("solo")},
			want: []string{
				"topic wh.public.plain", "begin", "topic wh.public.plain",
				`insert public.plain lsn 0/30 #0 tenant "solo" ('1', 'a', NULL)`,
				"topic wh.public.plain", "rewritten public.plain at 0/3F",
				`insert public.plain lsn 0/40 #1 tenant "solo" ('2', 'b', NULL, 'now')`, "commit 0/108 at 05:06:07",
			},
		},
		{
			// The trigger ran (its DDL notice came), and wrote no
			// rewrite notice: no rewrite, whatever the types say.
			name: "after a DDL notice, a Relation message with a retyped column copies nothing",
			steps: []step{
				describe(ordersRel), begin(0x100),
				logical(0x20, true, ddlPrefix, captureKey.sign([]byte(`{"oid": 1, "columns": [[1, "tenant_id", null], [2, "id", null], [3, "body", null]]}`))),
				describe(relationMsg(relOrders, "orders", 'd', "tenant_id:text*", "id:int8*", "body:int8")),
				insert(0x30, relOrders, txt("acme"), txt("1"), txt("7")),
				commit(0x100, 0x108),
				begin(0x200),
				describe(ordersRel), // the notice counts once
				insert(0x140, relOrders, txt("acme"), txt("1"), txt("x")),
				commit(0x200, 0x208),
			},
			want: []string{
				"topic wh.public.orders", "begin", "columns of relation 1: body=3 id=2 tenant_id=1", "topic wh.public.orders",
				`insert public.orders lsn 0/30 #0 tenant "acme" ('acme', '1', '7')`, "commit 0/108 at 05:06:07",
				"begin", "topic wh.public.orders", "rewritten public.orders at 0/13F",
				`insert public.orders lsn 0/140 #0 tenant "acme" ('acme', '1', 'x')`, "commit 0/208 at 05:06:07",
			},
		},
		{
			name: "forged, misplaced and malformed rewrite notices are skipped",
			steps: []step{
				logical(0x10, true, rewritePrefix, captureKey.sign(rewriteOf("public", "orders", "public", "orders"))), // outside a transaction
				begin(0x100),
				logical(0x20, true, rewritePrefix, forgerKey.sign(rewriteOf("public", "orders", "public", "orders"))),
				logical(0x21, false, rewritePrefix, captureKey.sign(rewriteOf("public", "orders", "public", "orders"))),
				logical(0x22, true, rewritePrefix, rewriteOf("public", "orders", "public", "orders")),
				logical(0x23, true, rewritePrefix, captureKey.sign([]byte(`{"oid":1}`))),
				commit(0x100, 0x108),
			},
			want:    []string{"begin", "commit 0/108 at 05:06:07"},
			ignored: 5,
		},
		{
			name: "forged, misplaced and malformed walhouse messages are skipped",
			steps: []step{
				logical(0x10, false, heartbeatPrefix, forgerKey.heartbeatContent(beatAt)),
				logical(0x11, true, heartbeatPrefix, captureKey.heartbeatContent(beatAt)),
				logical(0x12, false, heartbeatPrefix, captureKey.sign([]byte("soon"))),
				begin(0x100),
				logical(0x20, false, heartbeatPrefix, captureKey.heartbeatContent(beatAt)), // in a transaction
				logical(0x21, true, ddlPrefix, forgerKey.sign(ddl)),
				logical(0x22, true, ddlPrefix, ddl),
				logical(0x23, true, ddlPrefix, captureKey.sign([]byte("{"))),
				logical(0x24, true, "someone_else", []byte("hello")),
				commit(0x100, 0x108),
			},
			want:    []string{"begin", "commit 0/108 at 05:06:07"},
			ignored: 7,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr, col, ignored := newTestTranslator(t, tt.opts...)
			col.copying = tt.copying
			for i, s := range tt.steps {
				if err := feed(context.Background(), tr, s); err != nil {
					t.Fatalf("step %d (%T): %v", i, s.msg, err)
				}
			}
			if !slices.Equal(col.log, tt.want) {
				t.Errorf("got\n\t%s\nwant\n\t%s", strings.Join(col.log, "\n\t"), strings.Join(tt.want, "\n\t"))
			}
			if n := total(t, ignored.counter); n != tt.ignored {
				t.Errorf("%v walhouse messages skipped, want %v", n, tt.ignored)
			}
			var refused float64
			for _, c := range col.refused {
				refused += total(t, c)
			}
			if refused != tt.refused {
				t.Errorf("%v changes of tables left out counted, want %v", refused, tt.refused)
			}
		})
	}
}

// TestValueChangingRetype holds the catalog's view of a type change to
// PostgreSQL's: only binary-coercible changes keep the values' bytes.
func TestValueChangingRetype(t *testing.T) {
	col := func(typ string, typmod int32) record.Column {
		return record.Column{Name: "c", Type: typ, TypMod: typmod}
	}
	numeric := func(p, s int32) int32 { return (p<<16 | s) + 4 }
	tests := []struct {
		from, to record.Column
		rewrite  bool
	}{
		{col("text", -1), col("text", -1), false},
		{col("varchar", 24), col("text", -1), false},
		{col("varchar", 24), col("varchar", 34), false},
		{col("varchar", 24), col("varchar", -1), false},
		{col("text", -1), col("varchar", -1), false},
		{col("numeric", numeric(10, 2)), col("numeric", numeric(14, 2)), false},
		{col("numeric", numeric(10, 2)), col("numeric", -1), false},
		{col("varchar", 24), col("varchar", 9), true},
		{col("text", -1), col("varchar", 9), true},
		{col("text", -1), col("int4", -1), true},
		{col("int4", -1), col("int8", -1), true},
		{col("numeric", numeric(12, 2)), col("numeric", numeric(10, 0)), true},
		{col("numeric", numeric(10, 2)), col("numeric", numeric(14, 3)), true},
		{col("numeric", -1), col("numeric", numeric(10, 2)), true},
		{col("bool", -1), col("text", -1), true},
		{col("text", -1), record.Column{Name: "c", Type: "text", TypMod: -1, Array: true}, true},
	}
	for _, tt := range tests {
		if got := valueChangingRetype(tt.from, tt.to); got != tt.rewrite {
			t.Errorf("%s -> %s: rewrite = %v, want %v", typeString(tt.from), typeString(tt.to), got, tt.rewrite)
		}
	}
}

// rewriteOf returns the content of a rewrite notice of schema.table, a
// partition of root (or itself).
func rewriteOf(schema, table, rootSchema, root string) []byte {
	b, err := json.Marshal(rewriteNotice{OID: 42, Table: []string{schema, table}, Root: []string{rootSchema, root}, Reason: 4})
	if err != nil {
		panic(err)
	}
	return b
}

// enumRenameOf is the content of a rewrite notice of the event trigger
// walhouse_enum, for a table holding the enum public.mood.
func enumRenameOf(schema, table, rootSchema, root string) []byte {
	b, err := json.Marshal(rewriteNotice{OID: 42, Table: []string{schema, table}, Root: []string{rootSchema, root}, Enum: []string{"public", "mood"}})
	if err != nil {
		panic(err)
	}
	return b
}

// enumRenameIn is an enum rename notice for public.table, whose columns
// hold the enum, plain ones of the enum itself.
func enumRenameIn(table string, columns, plain []string) []byte {
	b, err := json.Marshal(rewriteNotice{OID: 42, Table: []string{"public", table}, Root: []string{"public", table}, Enum: []string{"public", "mood"}, Columns: columns, Plain: plain})
	if err != nil {
		panic(err)
	}
	return b
}

// total sums a counter over its labels.
func total(t *testing.T, c prometheus.Collector) float64 {
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, f := range families {
		for _, m := range f.GetMetric() {
			n += m.GetCounter().GetValue()
		}
	}
	return n
}

func TestTranslatorRefuses(t *testing.T) {
	tests := []struct {
		name  string
		steps []step
	}{
		{"a change outside a transaction", []step{describe(ordersRel), insert(0x10, relOrders, txt("acme"), txt("1"), txt("a"))}},
		{"a truncate outside a transaction", []step{describe(ordersRel), truncate(0x10, false, relOrders)}},
		{"a commit outside a transaction", []step{commit(0x100, 0x108)}},
		{"a change of a relation never described", []step{begin(0x100), insert(0x10, 9, txt("1"))}},
		{"a truncate of a relation never described", []step{begin(0x100), truncate(0x10, false, 9)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr, col, _ := newTestTranslator(t)
			var err error
			for _, s := range tt.steps {
				if err = feed(context.Background(), tr, s); err != nil {
					break
				}
			}
			if err == nil {
				t.Errorf("accepted; handed on %q", col.log)
			}
		})
	}
}

// discard is a table set and output that takes everything and keeps
// nothing, for measuring the translator alone.
type discard struct{ tables []string }

func (d discard) captured(table string) bool                                             { return slices.Contains(d.tables, table) }
func (discard) join(context.Context, string) error                                       { return nil }
func (discard) described(context.Context, *relation, uint32) error                       { return nil }
func (discard) leave(context.Context, string, error) error                               { return nil }
func (discard) refusedChanges(string) prometheus.Counter                                 { return nil }
func (discard) fillUnchanged(context.Context, *relation, fillCase, []record.Value) error { return nil }
func (discard) rewritten(context.Context, rewrite) error                                 { return nil }
func (discard) begin()                                                                   {}
func (discard) commit(record.LSN, time.Time)                                             {}
func (discard) record(*relation, *record.Record, []byte, []byte, bool) error             { return nil }
func (discard) badRow(badRow) error                                                      { return nil }
func (discard) truncate(context.Context, *relation, record.Truncate) error               { return nil }
func (discard) heartbeat(context.Context, record.LSN, time.Time) error                   { return nil }

// BenchmarkTranslatorInsert measures the streaming path from a pgoutput
// Insert message to an encoded record, without producing it.
func BenchmarkTranslatorInsert(b *testing.B) {
	tr, _, _ := newTestTranslator(b)
	d := discard{tables: []string{"public.orders"}}
	tr.tables, tr.out, tr.now = d, d, time.Now
	ctx := context.Background()
	if err := tr.describe(ctx, 0, ordersRel); err != nil {
		b.Fatal(err)
	}
	tr.begin(&pglogrepl.BeginMessage{FinalLSN: 1 << 40, CommitTime: commitTime})
	m := msg(pgoutput.MessageTypeInsert, relOrders, []byte{pgoutput.TupleNew}, tuple(s("acme"), s("12345"), s(strings.Repeat("body ", 20))))
	b.SetBytes(int64(len(m)))
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if err := tr.handle(ctx, record.LSN(1000+i), m); err != nil {
			b.Fatal(err)
		}
	}
}

// The encoders of the pgoutput messages the translator's tests build.
var (
	tuple = pgoutputtest.Tuple
	s     = pgoutputtest.Str
	msg   = pgoutputtest.Msg
)

// TestLayoutKeepsEventIDs: a layout that watches a column for moves adds
// the moves' deletes and changes nothing else, eventIds and payloads
// included, so Layer 2 recognises a change captured before the layout and
// captured again after it (a capture restarted with a new layout replays
// what the slot had not confirmed).
func TestLayoutKeepsEventIDs(t *testing.T) {
	steps := []step{
		describe(docsRel), begin(0x100),
		update(0x20, relDocs, pgoutput.TupleOldRow, row(txt("1"), txt("acme"), txt("x")), txt("1"), txt("acme"), txt("y")),
		update(0x30, relDocs, pgoutput.TupleOldRow, row(txt("2"), txt("acme"), txt("x")), txt("2"), txt("acme"), txt("x")),
		update(0x40, relDocs, pgoutput.TupleOldRow, row(txt("3"), txt("acme"), txt("x")), txt("3"), txt("acme"), txt("z")),
		insert(0x50, relDocs, txt("4"), txt("acme"), txt("w")),
		commit(0x100, 0x108),
	}
	capture := func(opts ...Option) *collector {
		tr, col, _ := newTestTranslator(t, opts...)
		for i, s := range steps {
			if err := feed(context.Background(), tr, s); err != nil {
				t.Fatalf("step %d (%T): %v", i, s.msg, err)
			}
		}
		return col
	}
	plain := capture()
	moves := capture(WithTableLayout("public.docs", schema.Layout{OrderBy: []string{"tenant_id", "body", "id"}}))
	if n := strings.Count(strings.Join(moves.log, "\n"), "(move)"); n != 2 {
		t.Fatalf("%d moves under the layout, want 2:\n\t%s", n, strings.Join(moves.log, "\n\t"))
	}
	if len(plain.rows) != 4 || !slices.Equal(plain.rows, moves.rows) {
		t.Errorf("the records other than the moves' deletes differ with the layout:\nwithout\n\t%s\nwith\n\t%s",
			strings.Join(plain.rows, "\n\t"), strings.Join(moves.rows, "\n\t"))
	}
}
