package query

import (
	"fmt"
	"io"
	"math/big"
	"reflect"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/compress/zstd"

	"github.com/walhouse/walhouse/schema"
)

// parquetTableColumn is the discriminator column of a Parquet export: the
// table each row comes from. It starts with an underscore, walhouse's own
// namespace (like _version), so it never collides with a table's group.
const parquetTableColumn = "_table"

// parquetRowGroupRows bounds the rows of one Parquet row group. The writer
// holds a whole row group in memory before writing it out, so this bounds
// an export's memory: measured on the orders shape, 16,384 rows keep about
// 8 MiB live, while 32,768 or 65,536 keep 42 MiB (parquet-go's buffers grow
// in steps). Subject exports are small; their row groups need not be large.
const parquetRowGroupRows = 16_384

// parquetExport writes the rows of an export as one Parquet file:
//
//	_table: the table name (required string)
//	<table>: optional group with that table's columns, present only in the
//	         table's own rows
//
// so that tables of different shapes share one file, each column keeps a
// Parquet type derived from its ClickHouse type (see parquetNode), and a
// reader selects one table with `WHERE _table = 'orders'` and its group.
// Nullable columns are optional. Row groups hold at most
// parquetRowGroupRows rows.
type parquetExport struct {
	w       *parquet.GenericWriter[any] // rows only: its schema is built at run time
	schema  *parquet.Schema
	tables  map[string]*parquetTable
	inGroup int // rows written since the last row group
	row     parquet.Row
}

// parquetTable is where one table's values go in a Parquet row.
type parquetTable struct {
	name     string
	template parquet.Row // every column null, _table set
	columns  []parquetColumn
}

// parquetColumn converts one result column into a leaf value.
type parquetColumn struct {
	index    int // leaf column index in the schema
	maxDef   int // definition level of a present value
	optional bool
	convert  func(v reflect.Value) (parquet.Value, error)
}

// exportColumns are the columns an export reads, in order: all but
// _is_deleted (BuildExport selects the same).
func exportColumns(t *Table) []Column {
	out := make([]Column, 0, len(t.Columns))
	for _, c := range t.Columns {
		if c.Name != schema.DeletedColumn {
			out = append(out, c)
		}
	}
	return out
}

// parquetSchema builds the schema of an export of tables.
func parquetSchema(tables []*Table) (*parquet.Schema, error) {
	root := parquet.Group{parquetTableColumn: parquet.String()}
	for _, t := range tables {
		if t.Name == parquetTableColumn {
			return nil, reqErr("format", "a table named %q cannot be exported as Parquet (the name is the file's table column); use jsonl or csv", t.Name)
		}
		g := parquet.Group{}
		for _, c := range exportColumns(t) {
			node := parquetNode(c.typ)
			if c.typ.Nullable {
				node = parquet.Optional(node)
			}
			g[c.Name] = node
		}
		root[t.Name] = parquet.Optional(g)
	}
	return parquet.NewSchema("walhouse_export", root), nil
}

// parquetNode is the Parquet type of a ClickHouse column type: the
// logical type that keeps its values exact, or UTF-8 text where Parquet
// has none (128/256-bit integers, decimals beyond 18 digits: their exact
// decimal text; arrays, maps and other nested types: JSON, as in CSV).
func parquetNode(t colType) parquet.Node {
	switch t.Kind {
	case kindString:
		return parquet.String()
	case kindInt:
		switch {
		case t.intBits > 64:
			return parquet.String()
		case t.unsigned:
			return parquet.Uint(t.intBits)
		default:
			return parquet.Int(t.intBits)
		}
	case kindFloat:
		if t.Param == "Float32" {
			return parquet.Leaf(parquet.FloatType)
		}
		return parquet.Leaf(parquet.DoubleType)
	case kindDecimal:
		switch {
		case t.precision <= 9:
			return parquet.Decimal(t.scale, t.precision, parquet.Int32Type)
		case t.precision <= 18:
			return parquet.Decimal(t.scale, t.precision, parquet.Int64Type)
		default:
			return parquet.String()
		}
	case kindBool:
		return parquet.Leaf(parquet.BooleanType)
	case kindUUID:
		return parquet.UUID()
	case kindDate:
		return parquet.Date()
	case kindDateTime:
		return parquet.Timestamp(parquet.Microsecond)
	default:
		return parquet.String()
	}
}

func newParquetExport(w io.Writer, tables []*Table) (*parquetExport, error) {
	sch, err := parquetSchema(tables)
	if err != nil {
		return nil, err
	}
	pe := &parquetExport{
		schema: sch,
		tables: map[string]*parquetTable{},
		w: parquet.NewGenericWriter[any](w, sch, parquet.Compression(&zstd.Codec{}),
			parquet.MaxRowsPerRowGroup(parquetRowGroupRows), parquet.CreatedBy("walhouse", "", "")),
	}
	nullRow := make(parquet.Row, len(sch.Columns()))
	for i := range nullRow {
		nullRow[i] = parquet.NullValue().Level(0, 0, i)
	}
	discriminator, _ := sch.Lookup(parquetTableColumn)
	for _, t := range tables {
		pt := &parquetTable{name: t.Name, template: append(parquet.Row(nil), nullRow...)}
		pt.template[discriminator.ColumnIndex] = parquet.ByteArrayValue([]byte(t.Name)).Level(0, 0, discriminator.ColumnIndex)
		for _, c := range exportColumns(t) {
			leaf, ok := sch.Lookup(t.Name, c.Name)
			if !ok {
				return nil, fmt.Errorf("parquet schema lacks %s.%s", t.Name, c.Name)
			}
			pt.columns = append(pt.columns, parquetColumn{
				index: leaf.ColumnIndex, maxDef: leaf.MaxDefinitionLevel, optional: c.typ.Nullable,
				convert: parquetConverter(c.typ),
			})
		}
		pe.tables[t.Name] = pt
	}
	return pe, nil
}

// writeRow writes the scanned row of table.
func (pe *parquetExport) writeRow(table string, sc *rowScanner) error {
	pt := pe.tables[table]
	if len(sc.targets) != len(pt.columns) {
		return fmt.Errorf("parquet: %s returned %d columns, the schema has %d", table, len(sc.targets), len(pt.columns))
	}
	pe.row = append(pe.row[:0], pt.template...)
	for i, c := range pt.columns {
		v := reflect.ValueOf(sc.targets[i]).Elem()
		for v.Kind() == reflect.Pointer && !v.IsNil() {
			v = v.Elem()
		}
		if v.Kind() == reflect.Pointer { // NULL
			if !c.optional {
				return fmt.Errorf("parquet: NULL in %s.%s, which is not Nullable", table, sc.names[i])
			}
			// The table's group is present (level 1), the value is not.
			pe.row[c.index] = parquet.NullValue().Level(0, c.maxDef-1, c.index)
			continue
		}
		pv, err := c.convert(v)
		if err != nil {
			return fmt.Errorf("parquet: %s.%s: %w", table, sc.names[i], err)
		}
		pe.row[c.index] = pv.Level(0, c.maxDef, c.index)
	}
	if _, err := pe.w.WriteRows([]parquet.Row{pe.row}); err != nil {
		return fmt.Errorf("write a Parquet row: %w", err)
	}
	// Row groups are cut here rather than left to the writer alone, so
	// their size does not depend on its internals.
	if pe.inGroup++; pe.inGroup == parquetRowGroupRows {
		pe.inGroup = 0
		if err := pe.w.Flush(); err != nil {
			return fmt.Errorf("write a Parquet row group: %w", err)
		}
	}
	return nil
}

// close writes the last row group and the footer.
func (pe *parquetExport) close() error {
	if err := pe.w.Close(); err != nil {
		return fmt.Errorf("finish the Parquet file: %w", err)
	}
	return nil
}

// parquetConverter returns the conversion of a non-NULL scanned value of
// type t into the Parquet value of parquetNode(t).
func parquetConverter(t colType) func(reflect.Value) (parquet.Value, error) {
	text := func(v reflect.Value) (parquet.Value, error) {
		return parquet.ByteArrayValue([]byte(fieldText(jsonValue(v, false)))), nil
	}
	switch t.Kind {
	case kindString:
		return func(v reflect.Value) (parquet.Value, error) {
			if v.Kind() != reflect.String {
				return text(v)
			}
			return parquet.ByteArrayValue([]byte(v.String())), nil
		}
	case kindInt:
		switch {
		case t.intBits > 64:
			return text
		case t.unsigned && t.intBits == 64:
			return func(v reflect.Value) (parquet.Value, error) { return parquet.Int64Value(int64(v.Uint())), nil }
		case t.unsigned:
			return func(v reflect.Value) (parquet.Value, error) { return parquet.Int32Value(int32(uint32(v.Uint()))), nil }
		case t.intBits == 64:
			return func(v reflect.Value) (parquet.Value, error) { return parquet.Int64Value(v.Int()), nil }
		default:
			return func(v reflect.Value) (parquet.Value, error) { return parquet.Int32Value(int32(v.Int())), nil }
		}
	case kindFloat:
		if t.Param == "Float32" {
			return func(v reflect.Value) (parquet.Value, error) { return parquet.FloatValue(float32(v.Float())), nil }
		}
		return func(v reflect.Value) (parquet.Value, error) { return parquet.DoubleValue(v.Float()), nil }
	case kindDecimal:
		if t.precision > 18 {
			return text
		}
		return func(v reflect.Value) (parquet.Value, error) {
			s, _ := jsonValue(v, false).(string)
			n, err := unscaledDecimal(s, t.scale)
			if err != nil {
				return parquet.Value{}, err
			}
			if t.precision <= 9 {
				return parquet.Int32Value(int32(n)), nil
			}
			return parquet.Int64Value(n), nil
		}
	case kindBool:
		return func(v reflect.Value) (parquet.Value, error) { return parquet.BooleanValue(v.Bool()), nil }
	case kindUUID:
		return func(v reflect.Value) (parquet.Value, error) {
			s, _ := jsonValue(v, false).(string)
			u, err := uuid.Parse(s)
			if err != nil {
				return parquet.Value{}, fmt.Errorf("read UUID %q: %w", s, err)
			}
			return parquet.FixedLenByteArrayValue(u[:]), nil
		}
	case kindDate:
		return func(v reflect.Value) (parquet.Value, error) {
			ts, ok := v.Interface().(time.Time)
			if !ok {
				return parquet.Value{}, fmt.Errorf("a date scanned as %s", v.Type())
			}
			return parquet.Int32Value(int32(daysSinceEpoch(ts))), nil
		}
	case kindDateTime:
		return func(v reflect.Value) (parquet.Value, error) {
			ts, ok := v.Interface().(time.Time)
			if !ok {
				return parquet.Value{}, fmt.Errorf("a timestamp scanned as %s", v.Type())
			}
			return parquet.Int64Value(ts.UnixMicro()), nil
		}
	default:
		return text
	}
}

// daysSinceEpoch is the Parquet DATE of t's calendar day (in UTC), also
// before 1970.
func daysSinceEpoch(t time.Time) int64 {
	y, m, d := t.UTC().Date()
	return time.Date(y, m, d, 0, 0, 0, 0, time.UTC).Unix() / 86400
}

// unscaledDecimal turns the exact text of a decimal ("-12.5") into its
// unscaled integer at scale ("-1250" at scale 2), which is how Parquet
// stores DECIMAL. Text with more fractional digits than scale, or too
// large for 64 bits, is an error: the column type cannot produce it.
func unscaledDecimal(s string, scale int) (int64, error) {
	m := decimalTextRe.FindStringSubmatch(s)
	if m == nil {
		return 0, fmt.Errorf("%q is not a decimal number", s)
	}
	frac := m[2]
	if len(frac) > scale {
		return 0, fmt.Errorf("%q has more than %d decimal places", s, scale)
	}
	digits := m[1] + frac + strings.Repeat("0", scale-len(frac))
	n, ok := new(big.Int).SetString(digits, 10)
	if !ok || !n.IsInt64() {
		return 0, fmt.Errorf("%q does not fit a 64-bit decimal", s)
	}
	if strings.HasPrefix(s, "-") {
		n.Neg(n)
	}
	return n.Int64(), nil
}
