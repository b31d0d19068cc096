package record

import "github.com/valyala/fastjson"

// This file holds what Decode reads of the envelope's nested objects: the
// source and a version 1 record's column descriptions (the schema it
// carries instead of naming one). decode.go reads the top-level fields and
// assembles the Record; decode_members.go reads payload, key and unchanged.

// The fields of source.
const (
	sourceID = iota
	sourceSchema
	sourceTable
	numSourceFields
)

var sourceFields = [numSourceFields]string{sourceID: "id", sourceSchema: "schema", sourceTable: "table"}

// The fields of a column of a version 1 record, in the order
// appendSchemaColumns writes them.
const (
	columnName = iota
	columnType
	columnEnum
	columnArray
	columnTypMod
	columnKey
	columnAttnum
	columnMissing
	numColumnFields
)

var columnFields = [numColumnFields]string{
	columnName:    "name",
	columnType:    "type",
	columnEnum:    "enum",
	columnArray:   "array",
	columnTypMod:  "typmod",
	columnKey:     "key",
	columnAttnum:  "attnum",
	columnMissing: "missing",
}

// readSource reads the source object.
func (d *decoder) readSource(v *fastjson.Value, e *envelope) error {
	if v == nil {
		return nil
	}
	switch v.Type() {
	case fastjson.TypeNull:
		return nil // encoding/json left the struct as it was
	case fastjson.TypeObject:
	default:
		return typeError("source", v, "an object")
	}
	o, _ := v.Object()
	f := d.nested[:numSourceFields]
	if err := visitFields(o, sourceFields[:], f, "source"); err != nil {
		return err
	}
	var err error
	if e.source[sourceID], err = d.readString(f[sourceID], &d.keep, "source id"); err != nil {
		return err
	}
	if e.source[sourceSchema], err = d.readString(f[sourceSchema], &d.keep, "source schema"); err != nil {
		return err
	}
	e.source[sourceTable], err = d.readString(f[sourceTable], &d.keep, "source table")
	return err
}

// readColumns reads the columns of a version 1 record into d.columns and
// reports whether they were given (as an array, even an empty one).
func (d *decoder) readColumns(v *fastjson.Value) (bool, error) {
	if v == nil {
		return false, nil
	}
	switch v.Type() {
	case fastjson.TypeNull:
		return false, nil
	case fastjson.TypeArray:
	default:
		return false, typeError("columns", v, "an array")
	}
	items, _ := v.Array()
	for _, item := range items {
		var c columnSpec
		switch item.Type() {
		case fastjson.TypeNull: // a zero column, as encoding/json made it
		case fastjson.TypeObject:
			if err := d.readColumn(item, &c); err != nil {
				return false, err
			}
		default:
			return false, typeError("columns[]", item, "an object")
		}
		d.columns = append(d.columns, c)
	}
	return true, nil
}

// readColumn reads one column object of a version 1 record.
func (d *decoder) readColumn(v *fastjson.Value, c *columnSpec) error {
	o, _ := v.Object()
	f := d.nested[:numColumnFields]
	if err := visitFields(o, columnFields[:], f, "column"); err != nil {
		return err
	}
	var err error
	if c.name, err = d.readString(f[columnName], &d.keep, "column name"); err != nil {
		return err
	}
	if c.typ, err = d.readString(f[columnType], &d.keep, "column type"); err != nil {
		return err
	}
	if c.enum, err = readBool(f[columnEnum], "column enum"); err != nil {
		return err
	}
	if c.array, err = readBool(f[columnArray], "column array"); err != nil {
		return err
	}
	typMod, err := d.readInt(f[columnTypMod], 32, "column typmod")
	if err != nil {
		return err
	}
	c.typMod = int32(typMod)
	if c.key, err = readBool(f[columnKey], "column key"); err != nil {
		return err
	}
	attnum, err := d.readInt(f[columnAttnum], 16, "column attnum")
	if err != nil {
		return err
	}
	c.attnum = int16(attnum)
	if v := f[columnMissing]; v != nil {
		// A *string: null leaves it nil, a string sets it.
		var null bool
		start := len(d.keep)
		if d.keep, null, err = d.appendString(d.keep, v, "column missing"); err != nil {
			return err
		}
		c.missing, c.hasMissing = span{start, len(d.keep)}, !null
	}
	return nil
}

// makeColumns builds the columns of a version 1 record, their strings cut
// from text; the Missing values share one allocation.
func (d *decoder) makeColumns(text string) []Column {
	cols := make([]Column, len(d.columns))
	var missing []string
	for i, c := range d.columns {
		cols[i] = Column{
			Name: c.name.of(text), Type: c.typ.of(text),
			Enum: c.enum, Array: c.array, TypMod: c.typMod, Key: c.key, Attnum: c.attnum,
		}
		if c.hasMissing {
			if missing == nil {
				missing = make([]string, 0, len(d.columns)-i)
			}
			missing = append(missing, c.missing.of(text))
			cols[i].Missing = &missing[len(missing)-1]
		}
	}
	return cols
}
