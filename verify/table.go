package verify

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/walhouse/walhouse/record"
	"github.com/walhouse/walhouse/schema"
)

// column is one compared column: its name on each side, the type the sink
// converts its values for, and its ClickHouse type (for casts).
type column struct {
	pg, ch string
	typ    schema.Type
	chType string
	src    record.Column
}

// table is a source table and the ClickHouse table that holds it.
type table struct {
	source record.Source
	chName string
	// tenant is the tenant column; synthetic when the source has none (its
	// pg name is then empty and the tenant is not compared).
	tenant    column
	synthetic bool
	// keys are the source's primary-key columns other than the tenant, in
	// key order; cols every other compared column.
	keys, cols []column
	// ranged: the first key is an integer, so buckets are key ranges.
	ranged bool
	// tenantLeads: the tenant is the primary key's first column, so its
	// distinct values are found by walking the key's index.
	tenantLeads bool
	// columns lists all(), set by finish.
	columns []column
	// filter is the row filter of the publication capture streams the
	// table from, as PostgreSQL deparses it; "" for none (rowFilter).
	filter string
}

// ErrNotReplicated is returned for a table that has no ClickHouse table
// (yet): capture has not copied it, or it is not published.
var ErrNotReplicated = errors.New("table has no ClickHouse table")

// pgColumn is a PostgreSQL column as the catalog describes it.
type pgColumn struct {
	attnum int16
	name   string
	src    record.Column
	key    int // position in the primary key, from 1; 0 when not a key column
}

// describe reads both catalogs and pairs the columns.
func (v *Verifier) describe(ctx context.Context, conn *pgx.Conn, src record.Source) (*table, error) {
	pgCols, err := pgColumns(ctx, conn, src)
	if err != nil {
		return nil, err
	}
	t := &table{source: src, chName: schema.TableName(src)}
	if t.filter, err = rowFilter(ctx, conn, v.cfg.publication, src); err != nil {
		return nil, err
	}
	chCols, sortKey, err := v.chColumns(ctx, t.chName)
	if err != nil {
		return nil, err
	}
	if len(chCols) == 0 {
		return nil, fmt.Errorf("%s (ClickHouse table %s.%s): %w", src.Schema+"."+src.Table, v.cfg.database, t.chName, ErrNotReplicated)
	}
	tenantName := firstSortColumn(sortKey)
	byAttnum := map[int16]pgColumn{}
	for _, c := range pgCols {
		byAttnum[c.attnum] = c
	}
	var keys []pgColumn
	for _, c := range pgCols {
		if c.key > 0 {
			keys = append(keys, c)
		}
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("%s.%s has no primary key nor replica identity index: walhouse does not capture it, so there is nothing to verify", src.Schema, src.Table)
	}
	keyCol := map[int16]int{}
	for _, k := range keys {
		keyCol[k.attnum] = k.key
	}
	keyed := make([]column, 0, len(keys))
	keyPos := make([]int, 0, len(keys))
	for _, c := range chCols {
		attnum, dropped := schema.ColumnAttnum(c.Comment)
		if c.Name == tenantName && attnum == 0 {
			typ, ok := schema.LoadedType(record.Column{Type: "text"}, c.Type)
			if !ok {
				return nil, fmt.Errorf("ClickHouse column %s.%s has type %s, which walhouse does not create", t.chName, c.Name, c.Type)
			}
			t.tenant, t.synthetic = column{ch: c.Name, typ: typ, chType: c.Type}, true
			continue
		}
		if attnum == 0 || dropped {
			continue // walhouse's own columns, and columns whose source is gone
		}
		p, ok := byAttnum[attnum]
		if !ok {
			continue // dropped in PostgreSQL; the sink has not seen the drop yet
		}
		typ, ok := schema.LoadedType(p.src, c.Type)
		if !ok {
			return nil, fmt.Errorf("ClickHouse column %s.%s has type %s, which walhouse does not create", t.chName, c.Name, c.Type)
		}
		col := column{pg: p.name, ch: c.Name, typ: typ, chType: strings.TrimSuffix(strings.TrimPrefix(c.Type, "Nullable("), ")"), src: p.src}
		if !strings.HasPrefix(c.Type, "Nullable(") {
			col.chType = c.Type
		}
		switch {
		case c.Name == tenantName:
			t.tenant, t.tenantLeads = col, p.key == 1
		case keyCol[attnum] > 0:
			keyed = append(keyed, col)
			keyPos = append(keyPos, keyCol[attnum])
		default:
			t.cols = append(t.cols, col)
		}
	}
	if t.tenant.ch == "" {
		return nil, fmt.Errorf("ClickHouse table %s: its sort key %q does not start with a tenant column walhouse knows", t.chName, sortKey)
	}
	// Keys in primary-key order.
	t.keys = make([]column, len(keyed))
	order := make([]int, len(keyed))
	for i := range keyed {
		rank := 0
		for j := range keyed {
			if keyPos[j] < keyPos[i] {
				rank++
			}
		}
		order[i] = rank
	}
	for i, c := range keyed {
		t.keys[order[i]] = c
	}
	if len(t.keys) == 0 {
		return nil, fmt.Errorf("%s.%s: no key column besides the tenant %s in ClickHouse table %s", src.Schema, src.Table, t.tenant.pg, t.chName)
	}
	t.ranged = t.keys[0].typ.Integer()
	return t.finish(), nil
}

// firstSortColumn returns the first column of a ClickHouse sorting_key
// expression ("tenant_id, id" or "`a b`, id").
func firstSortColumn(key string) string {
	key = strings.TrimSpace(key)
	if strings.HasPrefix(key, "`") {
		var b strings.Builder
		for i := 1; i < len(key); i++ {
			switch {
			case key[i] == '\\' && i+1 < len(key):
				i++
				b.WriteByte(key[i])
			case key[i] == '`':
				return b.String()
			default:
				b.WriteByte(key[i])
			}
		}
		return b.String()
	}
	name, _, _ := strings.Cut(key, ",")
	return strings.TrimSpace(name)
}

// chColumns reads the columns of ClickHouse table name and its sorting
// key; none when there is no such table.
func (v *Verifier) chColumns(ctx context.Context, name string) ([]schema.ExistingColumn, string, error) {
	cols, err := schema.ReadColumns(ctx, v.ch, v.cfg.database, name)
	if err != nil || len(cols) == 0 {
		return nil, "", err
	}
	info, _, err := schema.ReadTableInfo(ctx, v.ch, v.cfg.database, name)
	if err != nil {
		return nil, "", err
	}
	return cols, info.SortingKey, nil
}

// rowFilter returns the row filter with which publication pub publishes
// src (PostgreSQL 15+), "" for none (see WithPublication).
func rowFilter(ctx context.Context, conn *pgx.Conn, pub string, src record.Source) (string, error) {
	var version int
	if err := conn.QueryRow(ctx, "SELECT current_setting('server_version_num')::int").Scan(&version); err != nil {
		return "", fmt.Errorf("read the server version: %w", err)
	}
	if version < 150000 {
		return "", nil // no row filters before 15
	}
	rows, err := conn.Query(ctx, `SELECT pubname, coalesce(rowfilter, '') FROM pg_catalog.pg_publication_tables
		WHERE schemaname = $1 AND tablename = $2 ORDER BY 1`, src.Schema, src.Table)
	if err != nil {
		return "", fmt.Errorf("read how publications publish %s.%s: %w", src.Schema, src.Table, err)
	}
	var (
		name, filter string
		filtered     []string // publications that filter the table
		own          *string  // pub's filter, if pub publishes the table
	)
	_, err = pgx.ForEachRow(rows, []any{&name, &filter}, func() error {
		if name == pub {
			f := filter
			own = &f
		}
		if filter != "" {
			filtered = append(filtered, name)
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("read how publications publish %s.%s: %w", src.Schema, src.Table, err)
	}
	switch {
	case own != nil:
		return *own, nil
	case len(filtered) > 0:
		return "", fmt.Errorf("%s.%s is published with a row filter by %s, and --publication %q does not publish it: name the publication capture streams it from with --publication, so that verify compares the rows capture sends", src.Schema, src.Table, strings.Join(filtered, ", "), pub)
	}
	return "", nil
}

// pgColumns reads a table's live columns with their types resolved as
// capture resolves them (domains to their base type, arrays to their
// element type) and their place in the key capture uses (the primary key,
// or the replica identity index).
func pgColumns(ctx context.Context, conn *pgx.Conn, src record.Source) ([]pgColumn, error) {
	rel := pgx.Identifier{src.Schema, src.Table}.Sanitize()
	rows, err := conn.Query(ctx, `
		SELECT a.attnum, a.attname, a.atttypid, a.atttypmod,
		       coalesce(array_position(i.indkey::int2[], a.attnum), 0)
		FROM pg_catalog.pg_attribute a
		LEFT JOIN LATERAL (
		  -- capture's key: the primary key or, without one, the replica identity index
		  SELECT indkey FROM pg_catalog.pg_index
		  WHERE indrelid = a.attrelid AND (indisprimary OR indisreplident)
		  ORDER BY indisprimary DESC LIMIT 1) i ON true
		WHERE a.attrelid = $1::regclass AND a.attnum > 0 AND NOT a.attisdropped
		ORDER BY a.attnum`, rel)
	if err != nil {
		return nil, fmt.Errorf("read the columns of %s: %w", rel, err)
	}
	type raw struct {
		attnum int16
		name   string
		oid    uint32
		typmod int32
		key    int32
	}
	rs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (raw, error) {
		var x raw
		err := r.Scan(&x.attnum, &x.name, &x.oid, &x.typmod, &x.key)
		return x, err
	})
	if err != nil {
		return nil, fmt.Errorf("read the columns of %s: %w", rel, err)
	}
	types := map[uint32]record.Column{}
	out := make([]pgColumn, 0, len(rs))
	for _, x := range rs {
		c, err := pgType(ctx, conn, types, x.oid)
		if err != nil {
			return nil, err
		}
		c.Name, c.TypMod, c.Attnum, c.Key = x.name, x.typmod, x.attnum, x.key > 0
		out = append(out, pgColumn{attnum: x.attnum, name: x.name, src: c, key: int(x.key)})
	}
	return out, nil
}

// pgType resolves a type OID as capture's catalog does: a domain to its
// base type, an array to its element type with Array set.
func pgType(ctx context.Context, conn *pgx.Conn, seen map[uint32]record.Column, oid uint32) (record.Column, error) {
	if c, ok := seen[oid]; ok {
		return c, nil
	}
	var (
		name, typtype, typcat string
		elem, base            uint32
	)
	if err := conn.QueryRow(ctx, `SELECT typname, typtype::text, typcategory::text, typelem, typbasetype FROM pg_catalog.pg_type WHERE oid = $1`, oid).
		Scan(&name, &typtype, &typcat, &elem, &base); err != nil {
		return record.Column{}, fmt.Errorf("look up type %d in pg_type: %w", oid, err)
	}
	var c record.Column
	switch {
	case typtype == "d" && base != 0:
		b, err := pgType(ctx, conn, seen, base)
		if err != nil {
			return record.Column{}, err
		}
		c = b
	case typcat == "A" && elem != 0:
		e, err := pgType(ctx, conn, seen, elem)
		if err != nil {
			return record.Column{}, err
		}
		c = record.Column{Type: e.Type, Enum: e.Enum, Array: true}
	default:
		c = record.Column{Type: name, Enum: typtype == "e"}
	}
	seen[oid] = c
	return c, nil
}
