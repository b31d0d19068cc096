package schema

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/walhouse/walhouse/record"
)

// Names of the columns walhouse adds to every table.
const (
	VersionColumn = "_version"    // ReplacingMergeTree version: the change's LSN
	DeletedColumn = "_is_deleted" // 1 for a delete; FINAL hides the row
	CommitColumn  = "_commit_ts"  // commit time of the source transaction
	SyncedColumn  = "_synced_at"  // when the sink loaded the row
	DefaultTenant = "tenant_id"   // tenant column added when the source has none
)

// Column is one ClickHouse column that carries a source column.
type Column struct {
	Name   string
	Source record.Column
	Type   Type
	// Override is the ClickHouse type the table's layout gives the column
	// (ColumnLayout.Type), which Type is; empty: walhouse's mapping (Map).
	Override string
}

// Table is the ClickHouse shape of one source table.
type Table struct {
	Database string
	// Cluster is the ClickHouse cluster the table is on; empty: one
	// server (see Placement).
	Cluster string
	Name    string
	Source  record.Source
	// Columns carries the source columns, in source order.
	Columns []Column
	// TenantColumn is the column that holds the tenant: a source column, or
	// DefaultTenant added by walhouse when Synthetic is true.
	TenantColumn    string
	TenantSynthetic bool
	TenantType      Type
	// OrderBy is the sort key: tenant first, then the source key.
	OrderBy []string
	// PartitionBy is an optional column partitioned by month. It must never
	// change for a row: a row whose partition changes is never merged with
	// its old copy, and both stay visible even under FINAL.
	PartitionBy string
	// TenantPartitions, when PartitionBy is empty, partitions the table into
	// this many buckets of a hash of the tenant column; 0 or 1 is one
	// partition. See Options.TenantPartitions.
	TenantPartitions int
	// IndexGranularity is the table's index_granularity.
	IndexGranularity int
	// PartitionExpr is the partition expression of the table's Layout,
	// which replaces PartitionBy and TenantPartitions; empty without one.
	PartitionExpr string
	// Settings are the table's Layout settings, other than
	// index_granularity (in IndexGranularity).
	Settings map[string]string
	// NullableKey says a sorting or partition column is Nullable, which
	// ClickHouse takes only with allow_nullable_key.
	NullableKey bool
}

// Options shape the ClickHouse table built for a source table.
type Options struct {
	Database    string
	Cluster     string // optional; see Placement
	PartitionBy string // optional; see Table.PartitionBy
	// TenantPartitions splits a table without PartitionBy into this many
	// partitions by a hash of the tenant column (0 or 1: one partition).
	// Every version of a row has the same tenant, so it never changes
	// partition, and the partition key uses only sorting-key columns, so
	// ClickHouse merges FINAL within partitions by itself and skips the
	// merge for a partition already merged into one part. Each insert
	// writes one part per partition it touches: more parts to merge.
	TenantPartitions int
	// IndexGranularity is the rows per primary-key mark; 0 is
	// DefaultIndexGranularity.
	IndexGranularity int
	// Layouts are the shapes users chose for some tables, by
	// "schema.table" (see Layout); a table without one has the default
	// shape these options give.
	Layouts map[string]Layout
}

// DefaultIndexGranularity is the index_granularity of the tables walhouse
// creates: a quarter of ClickHouse's 8192, because every read is filtered
// on the tenant, the first column of the sorting key, and each part's
// first and last granule of a tenant are read whole (mostly other tenants'
// rows). With 100 tenants and 10M rows in 13 parts it cuts the rows a
// dashboard read selects by 31% (docs/benchmarks.md, FINAL). Costs: four
// times the marks in memory and on disk (a few MB per billion rows for a
// tenant and an id), and a little more work per mark on scans of the whole
// table. An existing table keeps its own: ClickHouse cannot change it
// without rewriting the table.
const DefaultIndexGranularity = 2048

// NewTable derives the ClickHouse table for a record's columns.
func NewTable(src record.Source, tenantColumn string, cols []record.Column, opts Options) (*Table, error) {
	layout, hasLayout := opts.Layouts[src.Schema+"."+src.Table]
	if layout.PartitionBy != "" {
		// The table's own partitioning replaces the default's.
		opts.PartitionBy, opts.TenantPartitions = "", 0
	}
	t := &Table{
		Database:     opts.Database,
		Cluster:      opts.Cluster,
		Name:         TableName(src),
		Source:       src,
		TenantColumn: tenantColumn,
		PartitionBy:  opts.PartitionBy,
	}
	if opts.TenantPartitions < 0 || opts.IndexGranularity < 0 {
		return nil, fmt.Errorf("table %s.%s: tenant partitions %d and index granularity %d must not be negative", src.Schema, src.Table, opts.TenantPartitions, opts.IndexGranularity)
	}
	if opts.PartitionBy == "" && opts.TenantPartitions > 1 {
		t.TenantPartitions = opts.TenantPartitions
	}
	t.IndexGranularity = cmp.Or(opts.IndexGranularity, DefaultIndexGranularity)
	if t.TenantColumn == "" {
		t.TenantColumn = DefaultTenant
		t.TenantSynthetic = true
		t.TenantType = Map(record.Column{Name: DefaultTenant, Type: "text"}, false)
		t.OrderBy = append(t.OrderBy, DefaultTenant)
	}
	if hasLayout {
		// Checked before the columns, whose overrides need valid types.
		if err := layout.Check(); err != nil {
			return nil, fmt.Errorf("table %s.%s: layout: %w", src.Schema, src.Table, err)
		}
	}
	var misfits []error // the layout's column overrides that do not fit
	for _, c := range cols {
		switch c.Name {
		case VersionColumn, DeletedColumn, CommitColumn, SyncedColumn:
			return nil, fmt.Errorf("table %s.%s: column %q clashes with a column walhouse adds; rename it in PostgreSQL or exclude the table", src.Schema, src.Table, c.Name)
		}
		if t.TenantSynthetic && c.Name == DefaultTenant {
			return nil, fmt.Errorf("table %s.%s has a column %q but it is not the configured tenant column", src.Schema, src.Table, c.Name)
		}
		isTenant := c.Name == t.TenantColumn
		typ := Map(c, !(c.Key || isTenant))
		o, overridden := layout.Columns[c.Name]
		if overridden {
			switch ot, err := override(c, typ, o, true); {
			case c.Key || isTenant:
				misfits = append(misfits, fmt.Errorf("%s is a key or tenant column, which keeps walhouse's mapping (tombstones and lookups bind its values by it)", c.Name))
			case err != nil:
				misfits = append(misfits, err)
			default:
				typ = ot
			}
		}
		if isTenant {
			t.TenantType = typ
			t.OrderBy = append(t.OrderBy, c.Name)
		}
		col := Column{Name: c.Name, Source: c, Type: typ}
		if overridden {
			col.Override = o.Type
		}
		t.Columns = append(t.Columns, col)
	}
	for _, name := range slices.Sorted(maps.Keys(layout.Columns)) {
		if _, ok := t.column(name); !ok {
			misfits = append(misfits, fmt.Errorf("no column %q in the table", name))
		}
	}
	if len(misfits) > 0 {
		// Found by the sink when it first loads the table or a new shape
		// of it (a PostgreSQL type change the override cannot follow): the
		// table stops, as for other changes it cannot take, rather than
		// sending each of its records to the dead letters.
		return nil, t.overrideMisfit(errors.Join(misfits...))
	}
	for _, c := range cols {
		if c.Key && c.Name != t.TenantColumn {
			t.OrderBy = append(t.OrderBy, c.Name)
		}
	}
	if len(t.OrderBy) < 2 {
		return nil, fmt.Errorf("table %s.%s has no primary key: add one (or a REPLICA IDENTITY USING INDEX) in PostgreSQL", src.Schema, src.Table)
	}
	for _, c := range t.Columns {
		// An array's elements are Nullable, and ClickHouse sorts by no
		// Nullable: CREATE would fail every time (capture leaves such a
		// table out; this is for records of an older capture).
		if c.Type.array && (c.Source.Key || c.Name == t.TenantColumn) {
			return nil, fmt.Errorf("table %s.%s: its key or tenant column %q is an array, which walhouse cannot sort a ClickHouse table by: give the table a key of single values in PostgreSQL, or exclude it", src.Schema, src.Table, c.Name)
		}
	}
	if t.PartitionBy != "" {
		c, ok := t.column(t.PartitionBy)
		if !ok {
			return nil, fmt.Errorf("table %s.%s: partition column %q does not exist", src.Schema, src.Table, t.PartitionBy)
		}
		if !scalars[c.Type.kind].temporal {
			return nil, fmt.Errorf("table %s.%s: partition column %q is %s; monthly partitions need a date or timestamp column", src.Schema, src.Table, t.PartitionBy, c.Source.Type)
		}
		if !c.Source.Key {
			// Deletes carry only key columns; a non-key partition column
			// would send them to the wrong partition.
			return nil, fmt.Errorf("table %s.%s: partition column %q must be part of the primary key (deletes carry only the key)", src.Schema, src.Table, t.PartitionBy)
		}
	}
	if hasLayout {
		if err := t.applyLayout(layout); err != nil {
			return nil, fmt.Errorf("table %s.%s: layout: %w", src.Schema, src.Table, err)
		}
	}
	return t, nil
}

// applyLayout replaces t's default shape by l's, checking l against t's
// columns: every problem at once.
func (t *Table) applyLayout(l Layout) error {
	if err := l.Check(); err != nil {
		return err
	}
	var errs []error
	typeOf := func(name string) (Type, bool) {
		if t.TenantSynthetic && name == t.TenantColumn {
			return t.TenantType, true
		}
		c, ok := t.column(name)
		return c.Type, ok
	}
	if len(l.OrderBy) > 0 {
		if l.OrderBy[0] != t.TenantColumn {
			errs = append(errs, fmt.Errorf("order_by starts with %q: it must start with the tenant column %q (reads, erasure and verify find the tenant there)", l.OrderBy[0], t.TenantColumn))
		}
		for _, k := range t.OrderBy {
			if !slices.Contains(l.OrderBy, k) {
				errs = append(errs, fmt.Errorf("order_by lacks %q: it must hold the tenant column and every primary-key column (%s), or two rows would share one position", k, strings.Join(t.OrderBy, ", ")))
			}
		}
		for _, c := range l.OrderBy {
			typ, ok := typeOf(c)
			switch {
			case !ok:
				errs = append(errs, fmt.Errorf("order_by: no column %q in the table", c))
			case typ.array:
				errs = append(errs, fmt.Errorf("order_by: column %q is an array; a sorting key takes single values", c))
			case typ.nullable():
				t.NullableKey = true
			}
		}
	}
	orderBy := t.OrderBy
	if len(l.OrderBy) > 0 {
		orderBy = l.OrderBy
	}
	if l.PartitionBy != "" {
		refs, _ := partitionRefs(l.PartitionBy)
		for _, c := range refs {
			typ, ok := typeOf(c)
			switch {
			case !ok:
				errs = append(errs, fmt.Errorf("partition_by: no column %q in the table", c))
			case !slices.Contains(orderBy, c):
				// Then every change that may move a row to another
				// partition changes its sorting key too: capture writes
				// the tombstone at the old position, never at the new.
				errs = append(errs, fmt.Errorf("partition_by: column %q is not in the sorting key (%s); add it to order_by", c, strings.Join(orderBy, ", ")))
			case typ.nullable():
				t.NullableKey = true
			}
		}
	}
	granularity := t.IndexGranularity
	if v, ok := l.Settings["index_granularity"]; ok {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			errs = append(errs, fmt.Errorf("settings: index_granularity = %q is not a whole number from 1", v))
		}
		granularity = n
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if len(l.OrderBy) > 0 {
		t.OrderBy = slices.Clone(l.OrderBy)
	}
	if l.PartitionBy != "" {
		t.PartitionExpr, t.PartitionBy, t.TenantPartitions = l.PartitionBy, "", 0
	}
	t.IndexGranularity = granularity
	for k, v := range l.Settings {
		if k != "index_granularity" {
			if t.Settings == nil {
				t.Settings = map[string]string{}
			}
			t.Settings[k] = v
		}
	}
	return nil
}

func (t *Table) column(name string) (Column, bool) {
	for _, c := range t.Columns {
		if c.Name == name {
			return c, true
		}
	}
	return Column{}, false
}

// Placement returns where t is kept: on one server or on a cluster.
func (t *Table) Placement() Placement {
	return Placement{Database: t.Database, Cluster: t.Cluster}
}

// QualifiedName returns the quoted database.table name that inserts and
// reads use: the table itself on one server, its Distributed table on a
// cluster.
func (t *Table) QualifiedName() string {
	return t.Placement().Qualified(t.Name)
}

// CreateDDL returns the CREATE TABLE statement of the table that stores
// t's rows, for records first seen at lsn: on one server the table itself,
// on a cluster the replicated local tables, ON CLUSTER (then create the
// Distributed table, DistributedDDL).
func (t *Table) CreateDDL(lsn record.LSN) string {
	p := t.Placement()
	var b strings.Builder
	b.WriteString(p.CreateLocal(t.Name) + "\n(\n")
	if t.TenantSynthetic {
		fmt.Fprintf(&b, "    %s %s,\n", QuoteIdent(t.TenantColumn), t.TenantType.DDL)
	}
	for _, c := range t.Columns {
		fmt.Fprintf(&b, "    %s %s%s,\n", QuoteIdent(c.Name), c.Type.DDL, columnComment(c.Source.Attnum, lsn))
	}
	fmt.Fprintf(&b, "    %s UInt64,\n", QuoteIdent(VersionColumn))
	fmt.Fprintf(&b, "    %s UInt8,\n", QuoteIdent(DeletedColumn))
	fmt.Fprintf(&b, "    %s DateTime64(6, 'UTC'),\n", QuoteIdent(CommitColumn))
	fmt.Fprintf(&b, "    %s DateTime64(6, 'UTC') DEFAULT now64(6)\n", QuoteIdent(SyncedColumn))
	b.WriteString(")\n")
	t.writeEngine(&b, t.Name)
	return b.String()
}

// RelayoutDDL returns the CREATE TABLE statement of table name, beside
// from (t's table as ClickHouse has it, in t's database), with from's
// columns exactly (types, defaults and comments, which schema evolution
// may have given it) and t's engine, partitions, sorting key and
// settings: the new table of a relayout (clickhouse/relayout.go).
func (t *Table) RelayoutDDL(name, from string) string {
	p := t.Placement()
	var b strings.Builder
	b.WriteString("CREATE TABLE " + p.Local(name) + p.onCluster() + " AS " + p.Local(from) + "\n")
	t.writeEngine(&b, name)
	return b.String()
}

// PartitionKey returns the PARTITION BY expression of t's table ("": none).
func (t *Table) PartitionKey() string {
	switch {
	case t.PartitionExpr != "":
		return partitionDDL(t.PartitionExpr)
	case t.PartitionBy != "":
		return fmt.Sprintf("toYYYYMM(%s)", QuoteIdent(t.PartitionBy))
	case t.TenantPartitions > 1:
		return fmt.Sprintf("cityHash64(%s) %% %d", QuoteIdent(t.TenantColumn), t.TenantPartitions)
	}
	return ""
}

// writeEngine writes the clauses after the columns of table name's
// CREATE TABLE: engine, partitions, sorting key, settings and comment.
func (t *Table) writeEngine(b *strings.Builder, name string) {
	p := t.Placement()
	fmt.Fprintf(b, "%s\n", p.Engine(name, QuoteIdent(VersionColumn), QuoteIdent(DeletedColumn)))
	if k := t.PartitionKey(); k != "" {
		fmt.Fprintf(b, "PARTITION BY %s\n", k)
	}
	quoted := make([]string, len(t.OrderBy))
	for i, c := range t.OrderBy {
		quoted[i] = QuoteIdent(c)
	}
	fmt.Fprintf(b, "ORDER BY (%s)\n", strings.Join(quoted, ", "))
	// A window of recent insert tokens makes a retried insert of the same
	// batch a no-op, also on a non-replicated table.
	fmt.Fprintf(b, "%s, index_granularity = %d", p.dedupSetting(), t.IndexGranularity)
	if t.NullableKey {
		b.WriteString(", allow_nullable_key = 1")
	}
	for _, k := range slices.Sorted(maps.Keys(t.Settings)) {
		fmt.Fprintf(b, ", %s = %s", k, settingLiteral(t.Settings[k]))
	}
	b.WriteString("\n")
	// The source table it belongs to: see SourceComment.
	b.WriteString("COMMENT " + QuoteString(SourceComment(t.Source)))
}

// DistributedDDL returns the CREATE TABLE statement of t's Distributed
// table on a cluster, sharded by tenant (ShardingKey), or "" on one
// server. Run it after CreateDDL.
func (t *Table) DistributedDDL() string {
	return t.Placement().DistributedDDL(t.Name, ShardingKey(t.TenantColumn), SourceComment(t.Source))
}

// Column comments carry what walhouse needs to follow renames: the source
// column's attnum (stable across RENAME COLUMN) and the LSN of the shape
// that last named the column. "walhouse:attnum=3,lsn=0/16B3748".
const commentPrefix = "walhouse:"

// columnComment returns the COMMENT clause for a source column ("" when
// its attnum is unknown).
func columnComment(attnum int16, lsn record.LSN) string {
	if attnum <= 0 {
		return ""
	}
	return fmt.Sprintf(" COMMENT %s", QuoteString(fmt.Sprintf("%sattnum=%d,lsn=%s", commentPrefix, attnum, lsn)))
}

// droppedComment marks a column whose source column was dropped at lsn;
// the column and its history stay.
func droppedComment(attnum int16, lsn record.LSN) string {
	return fmt.Sprintf(" COMMENT %s", QuoteString(fmt.Sprintf("%sattnum=%d,lsn=%s,dropped", commentPrefix, attnum, lsn)))
}

// IsSourceColumn reports whether a ClickHouse column comment marks a
// column of the source table (columnComment), as opposed to one walhouse
// added, such as a synthetic tenant column (--default-tenant), which has no
// comment.
func IsSourceColumn(comment string) bool {
	attnum, _, dropped := parseColumnComment(comment)
	return attnum > 0 && !dropped
}

// parseColumnComment reads a comment written by columnComment or
// droppedComment; other comments give zero values.
func parseColumnComment(comment string) (attnum int16, lsn record.LSN, dropped bool) {
	body, ok := strings.CutPrefix(comment, commentPrefix)
	if !ok {
		return 0, 0, false
	}
	for _, kv := range strings.Split(body, ",") {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "attnum":
			n, err := strconv.ParseInt(v, 10, 16)
			if err == nil {
				attnum = int16(n)
			}
		case "lsn":
			if l, err := record.ParseLSN(v); err == nil {
				lsn = l
			}
		case "dropped":
			dropped = true
		}
	}
	return attnum, lsn, dropped
}
