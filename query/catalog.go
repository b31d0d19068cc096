package query

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/walhouse/walhouse/schema"
)

// Conn is the part of a ClickHouse connection the query API uses. A
// clickhouse-go driver.Conn (clickhouse.Open) satisfies it; handler tests
// may pass a fake.
type Conn interface {
	Query(ctx context.Context, query string, args ...any) (driver.Rows, error)
}

var _ Conn = driver.Conn(nil)

// SyncTable is the name of the table, in the replicated database, where the
// sink records how far each Kafka partition of each source table is loaded.
// It is never listed or readable through the API.
const SyncTable = schema.SyncTable

// Column is one readable column of a replicated table.
type Column struct {
	Name string `json:"name"`
	// Type is the ClickHouse type, as system.columns reports it.
	Type string `json:"type"`
	// Filterable is false for types filters cannot compare (arrays, maps…).
	Filterable bool `json:"filterable"`

	typ colType
	// expr is the SQL that reads the column when it is not its name: a
	// path into a JSON column (jsonPathColumn).
	expr string
}

// Table is a replicated table as the catalog discovered it.
type Table struct {
	Database string   `json:"-"`
	Name     string   `json:"name"`
	Columns  []Column `json:"columns"`
	// TenantColumn is the first column of the sorting key.
	TenantColumn string `json:"-"`
	// SortingKey is the ORDER BY of the table (tenant column first).
	SortingKey []string `json:"-"`

	// open: the tenant column is a column of the source table (see
	// schema.IsSourceColumn), so every tenant may read the table, rows or
	// not. A table whose tenant column walhouse added (--default-tenant)
	// holds one fixed tenant's rows: only a tenant with rows there reads it.
	open bool

	// inKey holds the columns system.columns flags is_in_sorting_key:
	// by their exact names, to check the decoded SortingKey against. A
	// Distributed table (cluster) flags none; its local table's key is
	// then checked by name only.
	inKey map[string]bool
	// sourced holds the columns that come from the source table.
	sourced map[string]bool
	// partitionOutsideKey: a column of the partition key is not in the
	// sorting key (system.columns), so two versions of one row may sit in
	// two partitions and FINAL must merge across them (see setFinal).
	// Never so for the tables walhouse creates (schema.Layout); a
	// Distributed table flags no partition columns, its local table is
	// walhouse's.
	partitionOutsideKey bool
}

// Column returns the named column, including the hidden _is_deleted.
func (t *Table) Column(name string) (Column, bool) {
	for _, c := range t.Columns {
		if c.Name == name {
			return c, true
		}
	}
	return Column{}, false
}

// qualified returns the quoted database.table name.
func (t *Table) qualified() string {
	return schema.QuoteIdent(t.Database) + "." + schema.QuoteIdent(t.Name)
}

// Catalog discovers the replicated tables of one database from
// system.tables and system.columns, caching them for a short time so that
// each request is validated against the real columns without a catalog
// query per request. It is safe for concurrent use.
type Catalog struct {
	conn     Conn
	database string
	ttl      time.Duration
	now      func() time.Time

	mu      sync.Mutex
	tables  map[string]*Table
	fetched time.Time

	tenantsMu sync.Mutex
	tenants   map[string]tenantTables // by tenant

	zonesMu sync.Mutex
	zones   map[string]bool // system.time_zones, once read
}

// tenantTables are the names of the tables one tenant has rows in, as
// found at fetched.
type tenantTables struct {
	names   map[string]bool
	fetched time.Time
}

// NewCatalog returns a Catalog of database that refreshes at most every ttl
// (0 means 10 s).
func NewCatalog(conn Conn, database string, ttl time.Duration) *Catalog {
	if ttl <= 0 {
		ttl = 10 * time.Second
	}
	return &Catalog{conn: conn, database: database, ttl: ttl, now: time.Now, tenants: map[string]tenantTables{}}
}

// ErrUnknownTable is returned by Catalog.Table for a name that is not a
// readable replicated table.
var ErrUnknownTable = errors.New("unknown table")

// Table returns the named table, or ErrUnknownTable.
func (c *Catalog) Table(ctx context.Context, name string) (*Table, error) {
	tables, err := c.load(ctx)
	if err != nil {
		return nil, err
	}
	t, ok := tables[name]
	if !ok {
		return nil, fmt.Errorf("%w %q in database %s", ErrUnknownTable, name, c.database)
	}
	return t, nil
}

// Tables returns every readable table, sorted by name.
func (c *Catalog) Tables(ctx context.Context) ([]*Table, error) {
	tables, err := c.load(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]*Table, 0, len(tables))
	for _, t := range tables {
		out = append(out, t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// TenantTables returns the tables tenant can read, sorted by name:
//
//   - a table whose tenant column is a column of the source table, when
//     the tenant is a valid value of it: the table belongs to every tenant,
//     and one with no row yet reads as empty. Whether other tenants have
//     rows there changes nothing in the answer.
//   - a table whose tenant column walhouse added (a table mapped to one
//     fixed tenant by --default-tenant), when it holds a row of the tenant
//     (live or deleted): such a table is that tenant's alone, so a key of
//     another tenant never learns its name.
func (c *Catalog) TenantTables(ctx context.Context, tenant string, lim Limits) ([]*Table, error) {
	all, err := c.Tables(ctx)
	if err != nil {
		return nil, err
	}
	var out, fixed []*Table
	for _, t := range all {
		switch {
		case !t.open:
			fixed = append(fixed, t)
		case t.holds(tenant):
			out = append(out, t)
		}
	}
	names, err := c.tenantNames(ctx, tenant, fixed, lim)
	if err != nil {
		return nil, err
	}
	for _, t := range fixed {
		if names[t.Name] {
			out = append(out, t)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// holds reports whether tenant is a valid value of t's tenant column.
func (t *Table) holds(tenant string) bool {
	tc, ok := t.Column(t.TenantColumn)
	if !ok {
		return false
	}
	_, err := tc.typ.bindValue(tenantValue(tc.typ, tenant))
	return err == nil
}

// TenantTable returns the named table if tenant can read it (see
// TenantTables), else ErrUnknownTable with the same message as for a
// table that does not exist.
func (c *Catalog) TenantTable(ctx context.Context, tenant string, lim Limits, name string) (*Table, error) {
	tables, err := c.TenantTables(ctx, tenant, lim)
	if err != nil {
		return nil, err
	}
	for _, t := range tables {
		if t.Name == name {
			return t, nil
		}
	}
	return nil, fmt.Errorf("%w %q in database %s", ErrUnknownTable, name, c.database)
}

// tenantNames returns the names of the tables of all that hold a row of
// tenant, cached for the catalog's ttl.
func (c *Catalog) tenantNames(ctx context.Context, tenant string, all []*Table, lim Limits) (map[string]bool, error) {
	c.tenantsMu.Lock()
	defer c.tenantsMu.Unlock()
	if tt, ok := c.tenants[tenant]; ok && c.now().Sub(tt.fetched) < c.ttl {
		return tt.names, nil
	}
	names := map[string]bool{}
	st, probed := BuildTenantTables(all, tenant, lim)
	if len(probed) > 0 {
		rows, err := c.conn.Query(statementContext(ctx, st), st.SQL)
		if err != nil {
			return nil, fmt.Errorf("find the tables of the caller's tenant: %w", err)
		}
		defer rows.Close()
		for rows.Next() {
			var i uint32
			if err := rows.Scan(&i); err != nil {
				return nil, fmt.Errorf("find the tables of the caller's tenant: %w", err)
			}
			if int(i) < len(probed) {
				names[probed[i].Name] = true
			}
		}
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("find the tables of the caller's tenant: %w", err)
		}
	}
	now := c.now()
	for t, tt := range c.tenants { // forget tenants not seen for a while
		if now.Sub(tt.fetched) >= c.ttl {
			delete(c.tenants, t)
		}
	}
	c.tenants[tenant] = tenantTables{names: names, fetched: now}
	return names, nil
}

// BuildTenantTables builds one statement that tells which of tables hold
// a row of tenant: it returns the index in probed of each such table.
// Tables whose tenant column cannot hold the tenant's value are not
// probed (the tenant can have no rows there). Each part reads at most one
// row of the tenant's range of the sorting key, without FINAL.
func BuildTenantTables(tables []*Table, tenant string, lim Limits) (st Statement, probed []*Table) {
	params := map[string]string{}
	var parts []string
	for _, t := range tables {
		tc, ok := t.Column(t.TenantColumn)
		if !ok {
			continue
		}
		v, err := tc.typ.bindValue(tenantValue(tc.typ, tenant))
		if err != nil {
			continue
		}
		i := len(probed)
		params[fmt.Sprintf("t%d", i)] = v
		parts = append(parts, fmt.Sprintf("(SELECT toUInt32(%d) FROM %s WHERE %s = {t%d:%s} LIMIT 1)",
			i, t.qualified(), schema.QuoteIdent(t.TenantColumn), i, tc.typ.Param))
		probed = append(probed, t)
	}
	lim = lim.withDefaults()
	set := lim.resourceSettings()
	set["max_execution_time"] = seconds(lim.MaxExecutionTime)
	return Statement{SQL: strings.Join(parts, "\nUNION ALL\n"), Params: params, Settings: set}, probed
}

func (c *Catalog) load(ctx context.Context) (map[string]*Table, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.tables != nil && c.now().Sub(c.fetched) < c.ttl {
		return c.tables, nil
	}
	tables, err := c.fetch(ctx)
	if err != nil {
		return nil, err
	}
	c.tables, c.fetched = tables, c.now()
	return tables, nil
}

// tablesQuery lists the replicated tables of {db:String} with their
// sorting keys: the ReplacingMergeTree tables of one server, and, on a
// cluster (schema.Placement), the Distributed tables, which have no
// sorting key of their own, with that of their local table of the same
// name in {local:String}. Both are read through {db:String}.
const tablesQuery = `SELECT name, sorting_key FROM system.tables
WHERE database = {db:String} AND engine LIKE '%ReplacingMergeTree' AND NOT startsWith(name, '_walhouse')
UNION ALL
SELECT name, sorting_key FROM system.tables
WHERE database = {local:String} AND engine LIKE '%ReplacingMergeTree' AND NOT startsWith(name, '_walhouse')
  AND name IN (SELECT name FROM system.tables WHERE database = {db:String} AND engine = 'Distributed')`

func (c *Catalog) fetch(ctx context.Context) (map[string]*Table, error) {
	qctx := ch.Context(ctx, ch.WithParameters(ch.Parameters{"db": schema.EscapeParam(c.database), "local": schema.EscapeParam(schema.LocalDatabase(c.database))}))
	rows, err := c.conn.Query(qctx, tablesQuery)
	if err != nil {
		return nil, fmt.Errorf("list the tables of %s: %w", c.database, err)
	}
	tables := map[string]*Table{}
	for rows.Next() {
		var name, key string
		if err := rows.Scan(&name, &key); err != nil {
			rows.Close()
			return nil, fmt.Errorf("list the tables of %s: %w", c.database, err)
		}
		tables[name] = &Table{Database: c.database, Name: name, SortingKey: schema.SplitSortingKey(key)}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list the tables of %s: %w", c.database, err)
	}

	columns, err := schema.ReadDatabaseColumns(ctx, c.conn, c.database)
	if err != nil {
		return nil, err
	}
	for table, cols := range columns {
		t, ok := tables[table]
		if !ok {
			continue
		}
		for _, col := range cols {
			if col.InSortingKey {
				if t.inKey == nil {
					t.inKey = map[string]bool{}
				}
				t.inKey[col.Name] = true
			}
			if col.InPartitionKey && !col.InSortingKey {
				t.partitionOutsideKey = true
			}
			if schema.IsSourceColumn(col.Comment) {
				if t.sourced == nil {
					t.sourced = map[string]bool{}
				}
				t.sourced[col.Name] = true
			}
			ct := parseColType(col.Type)
			t.Columns = append(t.Columns, Column{Name: col.Name, Type: col.Type, Filterable: ct.Kind != kindOther, typ: ct})
		}
	}
	for name, t := range tables {
		if !t.valid() {
			delete(tables, name) // not a walhouse table: never readable
			continue
		}
		t.TenantColumn = t.SortingKey[0]
		t.open = t.sourced[t.TenantColumn]
	}
	return tables, nil
}

// valid reports whether t has the shape walhouse creates: a sorting key
// whose columns exist, starting with the tenant column, and the
// _is_deleted column. The key's names, decoded from sorting_key, must be
// exactly the columns system.columns flags as in it (when it flags any):
// system.columns has the names as they are, sorting_key only their order.
func (t *Table) valid() bool {
	if len(t.SortingKey) < 1 {
		return false
	}
	for _, k := range t.SortingKey {
		if _, ok := t.Column(k); !ok {
			return false
		}
		if t.inKey != nil && !t.inKey[k] {
			return false
		}
	}
	if t.inKey != nil && len(t.inKey) != len(t.SortingKey) {
		return false
	}
	_, ok := t.Column(schema.DeletedColumn)
	return ok
}
