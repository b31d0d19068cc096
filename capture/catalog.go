package capture

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/walhouse/walhouse/capture/pgoutput"
	"github.com/walhouse/walhouse/record"
	"github.com/walhouse/walhouse/schema"
)

// typeInfo is what capture records about a PostgreSQL type.
type typeInfo struct {
	name  string // base (or element) type name
	enum  bool
	array bool
	oid   uint32 // of the base (or element) type: an enum's, for its labels
}

// relation is the cached shape of one published table, built from a
// pgoutput Relation message and the catalog.
type relation struct {
	name         string             // "schema.table"
	quoted       string             // name as an SQL identifier
	skip         bool               // excluded or left out: its changes are not captured
	refused      prometheus.Counter // of a table left out: counts its changes
	source       record.Source
	eventSource  string // record.ChangeSource of the table: the source of its changes' eventIds
	moveSource   string // record.MoveSource of the table: that of its moves' deletes
	topic        string
	columns      []record.Column
	schemaID     string
	tenantColumn string // empty when the tenant is the configured default
	tenantIdx    int    // index of the tenant column, -1 for the default tenant
	keyIdx       []int  // indexes of the key columns
	// keep are the indexes, in the Relation message and its tuples, of
	// the columns captured when the layout excludes some
	// (schema.Layout.ExcludeColumns); nil: every column. Tuples are cut
	// to these before anything else reads them, so every other index
	// here is one into columns.
	keep []int
	// moveIdx are the indexes of the columns of the table's layout
	// (WithTableLayout) outside the tenant and the key: a change of one
	// moves the row in ClickHouse, as a key change does.
	moveIdx []int
	// labelled are the enum columns whose labels the records carry (the
	// layout stores them as Enum8 or Enum16, schema.IsEnumOverride).
	labelled []labelledColumn
	// enums are the other enum columns (stored as text), arrays and
	// domains of enums included, whose values capture checks against the
	// enum's labels when no event trigger reports renames (enumwatch.go).
	enums    []enumColumn
	full     bool     // REPLICA IDENTITY FULL: old tuples carry every column
	lastSize int      // size of the table's last encoded record
	keyTypes []string // SQL types of the key columns, once looked up
	fillFrom string   // what fillFromSource reads, once looked up (fillFrom)
	enc      *record.Encoder
}

// skipped counts a change of a table left out; one of an excluded table is
// not counted.
func (r *relation) skipped() {
	if r.refused != nil {
		r.refused.Inc()
	}
}

// catalog answers questions about relations and types over a regular
// (non-replication) connection, and caches the answers.
type catalog struct {
	conn *pgx.Conn
	// bound replaces the rows of conn over the read bound
	// (receive_bound.go), or is nil.
	bound *boundedReader
	types map[uint32]typeInfo
	// columns holds, per relation, the attnums by name as of the newest
	// DDL message seen in the stream: exact, unlike the catalog, which may
	// be ahead of the stream.
	columns map[uint32]map[string]columnInfo
	// notices is set when DDL messages reach the stream (the event trigger
	// is installed and the server streams logical messages, 14+): columns
	// then follows them. Without them every Relation message reads the
	// catalog as it is then, which is exact while capture keeps up.
	notices bool
}

func newCatalog(conn *pgx.Conn) *catalog {
	return &catalog{conn: conn, types: map[uint32]typeInfo{}, columns: map[uint32]map[string]columnInfo{}}
}

var _ relationCatalog = (*catalog)(nil)

// setColumns records a relation's columns as a DDL message numbered them.
func (c *catalog) setColumns(relID uint32, cols map[string]columnInfo) { c.columns[relID] = cols }

// typeOf resolves a type OID: domains to their base type, arrays to their
// element type with array set.
func (c *catalog) typeOf(ctx context.Context, oid uint32) (typeInfo, error) {
	if t, ok := c.types[oid]; ok {
		return t, nil
	}
	var (
		name            string
		typtype, typcat string
		elem, base      uint32
	)
	err := c.conn.QueryRow(ctx,
		`SELECT typname, typtype::text, typcategory::text, typelem, typbasetype FROM pg_catalog.pg_type WHERE oid = $1`,
		oid).Scan(&name, &typtype, &typcat, &elem, &base)
	if err != nil {
		return typeInfo{}, fmt.Errorf("look up type %d in pg_type: %w", oid, err)
	}
	var t typeInfo
	switch {
	case typtype == "d" && base != 0:
		if t, err = c.typeOf(ctx, base); err != nil {
			return typeInfo{}, err
		}
	case typcat == "A" && elem != 0:
		et, err := c.typeOf(ctx, elem)
		if err != nil {
			return typeInfo{}, err
		}
		t = typeInfo{name: et.name, enum: et.enum, array: true, oid: et.oid}
	default:
		t = typeInfo{name: name, enum: typtype == "e", oid: oid}
	}
	c.types[oid] = t
	return t, nil
}

// enumLabels reads an enum type's labels in its order. They are never
// cached: a label added later (ALTER TYPE ... ADD VALUE) changes neither
// the type's OID nor the table, so no Relation message would say so.
func (c *catalog) enumLabels(ctx context.Context, oid uint32) ([]string, error) {
	return queryEnumLabels(ctx, c.conn, oid)
}

// queryEnumLabels reads an enum type's labels in its order, one more than
// record.MaxEnumLabels at most (so that too many are seen).
func queryEnumLabels(ctx context.Context, q interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}, oid uint32) ([]string, error) {
	rows, err := q.Query(ctx, `SELECT enumlabel FROM pg_catalog.pg_enum WHERE enumtypid = $1 ORDER BY enumsortorder LIMIT $2`, oid, record.MaxEnumLabels+1)
	if err != nil {
		return nil, fmt.Errorf("read the labels of enum type %d from pg_enum: %w", oid, err)
	}
	labels, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("read the labels of enum type %d from pg_enum: %w", oid, err)
	}
	return labels, nil
}

// tableKey returns the primary-key columns of a table or, without one, the
// columns of its replica identity index.
func (c *catalog) tableKey(ctx context.Context, relID uint32) (map[string]bool, error) {
	rows, err := c.conn.Query(ctx, `
		SELECT a.attname
		FROM pg_catalog.pg_index i
		JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)
		WHERE i.indrelid = $1
		  AND i.indexrelid = (
		    SELECT indexrelid FROM pg_catalog.pg_index
		    WHERE indrelid = $1 AND (indisprimary OR indisreplident)
		    ORDER BY indisprimary DESC LIMIT 1)`, relID)
	if err != nil {
		return nil, fmt.Errorf("look up the primary key of relation %d: %w", relID, err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("look up the primary key of relation %d: %w", relID, err)
	}
	key := make(map[string]bool, len(names))
	for _, n := range names {
		key[n] = true
	}
	return key, nil
}

// attnums returns the catalog numbers of a relation's columns by name. The
// catalog may be ahead of the stream (a later rename); a name it no longer
// has gets no number, and consumers fall back to matching by name.
func (c *catalog) attnums(ctx context.Context, relID uint32) (map[string]columnInfo, error) {
	if known, ok := c.columns[relID]; ok && c.notices {
		return known, nil
	}
	// The value older rows read for a column added with a default, as the
	// event trigger reports it (ddl.go).
	rows, err := c.conn.Query(ctx, `SELECT attname, attnum, CASE WHEN atthasmissing THEN (attmissingval::text::text[])[1] END
		FROM pg_catalog.pg_attribute WHERE attrelid = $1 AND attnum > 0 AND NOT attisdropped`, relID)
	if err != nil {
		return nil, fmt.Errorf("read the column numbers of relation %d: %w", relID, err)
	}
	out := map[string]columnInfo{}
	var (
		name    string
		num     int16
		missing *string
	)
	_, err = pgx.ForEachRow(rows, []any{&name, &num, &missing}, func() error {
		out[name] = columnInfo{attnum: num, missing: missing}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read the column numbers of relation %d: %w", relID, err)
	}
	return out, nil
}

// volatileDefaults returns the columns of a relation that have a default
// but no stored value for older rows: added with a volatile default, which
// PostgreSQL wrote into every row by rewriting the table (or given a
// default after they were added). It reads the catalog as it is now, not
// the cache: see rewrittenByCatalog.
func (c *catalog) volatileDefaults(ctx context.Context, relID uint32) (map[string]bool, error) {
	rows, err := c.conn.Query(ctx, `SELECT attname FROM pg_catalog.pg_attribute
		WHERE attrelid = $1 AND attnum > 0 AND NOT attisdropped AND atthasdef AND NOT atthasmissing`, relID)
	if err != nil {
		return nil, fmt.Errorf("read the column defaults of relation %d: %w", relID, err)
	}
	out := map[string]bool{}
	var name string
	if _, err := pgx.ForEachRow(rows, []any{&name}, func() error {
		out[name] = true
		return nil
	}); err != nil {
		return nil, fmt.Errorf("read the column defaults of relation %d: %w", relID, err)
	}
	return out, nil
}

// bootstrap records the current column numbers of the captured tables.
// Right after the slot was created they are exact for the stream's start;
// after a restart they are the catalog's current ones, which DDL messages
// then keep exact (see ddl.go).
func (c *catalog) bootstrap(ctx context.Context, tables []string) error {
	for _, t := range tables {
		var oid uint32
		if err := c.conn.QueryRow(ctx, "SELECT $1::regclass::oid", quoteTable(t)).Scan(&oid); err != nil {
			return fmt.Errorf("look up table %s: %w", t, err)
		}
		nums, err := c.attnums(ctx, oid)
		if err != nil {
			return err
		}
		c.columns[oid] = nums
	}
	return nil
}

// relationTenant returns the tenant column configured for a table.
func (c *config) relationTenant(schema, table string) string {
	if col, ok := c.tenantColumns[schema+"."+table]; ok {
		return col
	}
	return c.tenantColumn
}

// relationKey returns the key columns of a relation as of its Relation
// message's place in the WAL, which may be far behind the catalog. With
// REPLICA IDENTITY DEFAULT or USING INDEX the message flags exactly the
// columns of the primary key or the identity index then, so it says
// itself; only REPLICA IDENTITY FULL, which flags every column, needs the
// catalog's key (today's: the WAL does not record an earlier one).
func relationKey(ctx context.Context, cat relationCatalog, m *pglogrepl.RelationMessage) (map[string]bool, error) {
	name := m.Namespace + "." + m.RelationName
	var key map[string]bool
	switch m.ReplicaIdentity {
	case pgoutput.ReplicaIdentityNothing:
		return nil, refusal(reasonIdentity, "table %s has REPLICA IDENTITY NOTHING, so updates and deletes cannot be captured: run ALTER TABLE %s REPLICA IDENTITY DEFAULT", name, name)
	case pgoutput.ReplicaIdentityFull:
		var err error
		if key, err = cat.tableKey(ctx, m.RelationID); err != nil {
			return nil, err
		}
	default:
		key = make(map[string]bool, 4)
		for _, col := range m.Columns {
			if col.Flags&pgoutput.ColumnInIdentity != 0 {
				key[col.Name] = true
			}
		}
	}
	if len(key) == 0 {
		return nil, refusal(reasonNoKey, "table %s has no primary key: walhouse needs one to identify rows in ClickHouse; add a PRIMARY KEY, or REPLICA IDENTITY USING INDEX on a unique index", name)
	}
	return key, nil
}

// layoutColumns finds the sorting-key columns of the table's layout l in
// its Relation message m (r's key and tenant already found) and sets
// r.moveIdx. It refuses a layout whose columns the table lacks, that does
// not start with the tenant column, or whose columns are outside the
// replica identity: the delete of the old row would lack their old
// values and land elsewhere than the row it removes.
func (r *relation) layoutColumns(l schema.Layout, m *pglogrepl.RelationMessage) error {
	if len(l.OrderBy) == 0 {
		return nil
	}
	if r.tenantIdx >= 0 && l.OrderBy[0] != r.tenantColumn {
		return refusal(reasonLayout, "table %s: its layout's order_by starts with %s, not with the tenant column %s; put the tenant column first", r.name, l.OrderBy[0], r.tenantColumn)
	}
	var missing []string
	for _, c := range l.OrderBy {
		i := slices.IndexFunc(r.columns, func(col record.Column) bool { return col.Name == c })
		if i < 0 {
			if r.tenantIdx < 0 && c == schema.DefaultTenant {
				continue // the tenant column walhouse adds
			}
			return refusal(reasonLayout, "table %s has no column %s, which its layout's order_by names: fix the layout (or add the column)", r.name, c)
		}
		if i == r.tenantIdx || slices.Contains(r.keyIdx, i) {
			continue
		}
		k := slices.IndexFunc(m.Columns, func(col *pglogrepl.RelationMessageColumn) bool { return col.Name == c })
		if m.Columns[k].Flags&pgoutput.ColumnInIdentity == 0 {
			missing = append(missing, c)
		}
		r.moveIdx = append(r.moveIdx, i)
	}
	if len(missing) > 0 {
		return refusal(reasonIdentity, "table %s: its layout sorts by %s, outside the replica identity, so an update of one could not remove the row at its old position (and a delete would miss it); run ALTER TABLE %s REPLICA IDENTITY FULL (or REPLICA IDENTITY USING INDEX on a unique index holding them)", r.name, strings.Join(missing, ", "), r.quoted)
	}
	return nil
}

// withoutAddedTenant drops from a layout's columns that a table lacks the
// tenant column walhouse adds to a table without one (hasTenant false).
func withoutAddedTenant(missing []string, hasTenant bool) []string {
	return slices.DeleteFunc(missing, func(c string) bool { return !hasTenant && c == schema.DefaultTenant })
}

// buildRelation turns a Relation message into the cached relation, checking
// everything that would otherwise fail row by row later.
func buildRelation(ctx context.Context, cat relationCatalog, cfg *config, sourceID string, m *pglogrepl.RelationMessage) (*relation, error) {
	name := m.Namespace + "." + m.RelationName
	key, err := relationKey(ctx, cat, m)
	if err != nil {
		return nil, err
	}
	nums, err := cat.attnums(ctx, m.RelationID)
	if err != nil {
		return nil, err
	}
	r := &relation{
		name:        name,
		quoted:      pgx.Identifier{m.Namespace, m.RelationName}.Sanitize(),
		source:      record.Source{ID: sourceID, Schema: m.Namespace, Table: m.RelationName},
		eventSource: record.ChangeSource(sourceID, m.Namespace, m.RelationName),
		moveSource:  record.MoveSource(sourceID, m.Namespace, m.RelationName),
		topic:       record.TopicName(cfg.topicPrefix, m.Namespace, m.RelationName),
		tenantIdx:   -1,
		full:        m.ReplicaIdentity == pgoutput.ReplicaIdentityFull,
	}
	tenantCol := cfg.relationTenant(m.Namespace, m.RelationName)
	layout := cfg.layouts[name]
	for _, c := range layout.ExcludeColumns {
		// A column the publication's column list leaves out is not in
		// the message, but the table has it (nums): it is out twice.
		if _, ok := nums[c]; !ok && !slices.ContainsFunc(m.Columns, func(col *pglogrepl.RelationMessageColumn) bool { return col.Name == c }) {
			// A misspelt name would stream the column it meant to keep in.
			return nil, refusal(reasonLayout, "table %s has no column %s, which its layout's exclude_columns names: fix the layout (capture leaves the table out rather than stream a column meant to stay in PostgreSQL)", name, c)
		}
	}
	for k, col := range m.Columns {
		if layout.Excludes(col.Name) {
			if key[col.Name] || col.Name == tenantCol {
				return nil, refusal(reasonLayout, "table %s: its layout excludes %s, a key or tenant column, which identifies its rows in ClickHouse: keep it", name, col.Name)
			}
			continue
		}
		if len(layout.ExcludeColumns) > 0 {
			r.keep = append(r.keep, k)
		}
		i := len(r.columns) // the column's index in the relation's (kept) columns
		t, err := cat.typeOf(ctx, col.DataType)
		if err != nil {
			return nil, fmt.Errorf("table %s column %s: %w", name, col.Name, err)
		}
		rc := record.Column{Name: col.Name, Type: t.name, Enum: t.enum, Array: t.array, TypMod: col.TypeModifier, Key: key[col.Name], Attnum: nums[col.Name].attnum, Missing: nums[col.Name].missing}
		if o, ok := layout.Columns[col.Name]; ok && schema.IsEnumOverride(o.Type) {
			if !t.enum || t.array {
				return nil, refusal(reasonLayout, "table %s: its layout stores column %s as %s, which is for PostgreSQL enum columns, and %s is %s: use LowCardinality(String) for text, or remove the override", name, col.Name, o.Type, col.Name, columnTypeName(t))
			}
			if rc.Labels, err = cat.enumLabels(ctx, t.oid); err != nil {
				return nil, fmt.Errorf("table %s column %s: %w", name, col.Name, err)
			}
			if len(rc.Labels) > record.MaxEnumLabels {
				return nil, refusal(reasonLayout, "table %s: enum column %s has more than %d labels, more than a ClickHouse Enum16 holds: store it as LowCardinality(String)", name, col.Name, record.MaxEnumLabels)
			}
			r.labelled = append(r.labelled, newLabelledColumn(i, t.oid, rc.Labels))
		} else if t.enum && t.oid != 0 {
			r.enums = append(r.enums, enumColumn{idx: i, oid: t.oid, array: t.array})
		}
		inIdentity := col.Flags&pgoutput.ColumnInIdentity != 0
		if rc.Key {
			r.keyIdx = append(r.keyIdx, i)
			if !inIdentity {
				return nil, refusal(reasonIdentity, "table %s: key column %s is not part of the replica identity, so deletes would not carry it; use the primary key as replica identity (ALTER TABLE %s REPLICA IDENTITY DEFAULT)", name, col.Name, name)
			}
		}
		if col.Name == tenantCol {
			r.tenantIdx = i
			r.tenantColumn = col.Name
			if !inIdentity {
				return nil, refusal(reasonIdentity, "table %s: tenant column %s is not part of the primary key, so deletes would not say which tenant they belong to; add it to the primary key or run ALTER TABLE %s REPLICA IDENTITY FULL", name, col.Name, name)
			}
		}
		r.columns = append(r.columns, rc)
	}
	if len(r.keyIdx) != len(key) {
		return nil, refusal(reasonColumnList, "table %s: the relation message lacks some primary-key columns (catalog has %d, stream has %d): the key changed, or the publication's column list leaves key columns out; add them to the table's column list in publication %s (ALTER PUBLICATION ... DROP TABLE, then ADD TABLE with the key columns listed)", name, len(key), len(r.keyIdx), cfg.publication)
	}
	if err := r.layoutColumns(layout, m); err != nil {
		return nil, err
	}
	if _, has := nums[tenantCol]; r.tenantIdx < 0 && cfg.defaultTenant == "" && has && !slices.ContainsFunc(m.Columns, func(col *pglogrepl.RelationMessageColumn) bool { return col.Name == tenantCol }) {
		// The table has its tenant column, but the publication's column
		// list leaves it out: say so rather than that it has none. (With
		// a default tenant, checkEntry refuses it next, from the catalog,
		// before any row.)
		return nil, refusal(reasonColumnList, "table %s: the column list of publication %s leaves out its tenant column %s, which says whose each row is: add it to the table's column list (ALTER PUBLICATION ... DROP TABLE, then ADD TABLE with it listed)", name, cfg.publication, tenantCol)
	}
	if r.tenantIdx < 0 && cfg.defaultTenant == "" {
		return nil, refusal(reasonNoTenant, "table %s has no tenant column %q: add one, name another with --tenant-column-for %s=COLUMN, or map the table to a fixed tenant with --default-tenant", name, tenantCol, name)
	}
	if err := record.ValidateColumns(r.tenantColumn, r.columns); err != nil {
		return nil, refusal(reasonColumns, "table %s: %w", name, err)
	}
	for _, c := range r.columns {
		// walhouse stores an array's elements Nullable, and ClickHouse
		// sorts by no Nullable: the sink could never create the table.
		if c.Array && (c.Key || c.Name == r.tenantColumn) {
			role := "key"
			if c.Name == r.tenantColumn {
				role = "tenant"
			}
			return nil, refusal(reasonColumns, "table %s: its %s column %s is an array (%s[]), which walhouse cannot sort a ClickHouse table by: give the table a key (or a tenant column) of single values in PostgreSQL, or leave it out with --exclude-tables", name, role, c.Name, c.Type)
		}
	}
	r.lastSize = 256 + 64*len(r.columns)
	if err := r.setSchema(ctx, cfg); err != nil {
		return nil, err
	}
	return r, nil
}

// setSchema makes r's columns its schema: the id, the encoder and, with
// envelope 2, the registry entry, published before any record refers to
// it.
func (r *relation) setSchema(ctx context.Context, cfg *config) error {
	name := r.name
	r.schemaID = record.SchemaID(r.tenantColumn, r.columns)
	r.enc = record.NewEncoder(r.source, r.tenantColumn, r.columns, r.schemaID, cfg.envelope)
	if cfg.envelope == 2 {
		// Before any record that refers to it: a sink that meets the record
		// must find the schema. Only a relation's first sight in this process
		// waits for Kafka; later ones are answered from memory.
		if err := cfg.schemas.Register(ctx, r.enc.Schema()); err != nil {
			if errors.Is(err, record.ErrSchemaIDConflict) {
				// A hash collision, maybe crafted by whoever may create
				// tables: leave this table out rather than stop capture.
				return refusal(reasonColumns, "table %s: %w", name, err)
			}
			return fmt.Errorf("table %s: publish its schema %s: %w", name, r.schemaID, err)
		}
	}
	return nil
}

func columnTypeName(t typeInfo) string {
	if t.array {
		return t.name + "[]"
	}
	return t.name
}
