package record

import "fmt"

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

// sourceWhere names the fields of source in errors.
var sourceWhere = [numSourceFields]string{sourceID: "source id", sourceSchema: "source schema", sourceTable: "source table"}

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
	columnLabels
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
	columnLabels:  "labels",
}

// readSource reads the source object.
func (d *decoder) readSource(s *scanner, e *envelope) error {
	// null leaves the source empty, as encoding/json left the struct.
	if given, err := s.open('{', "source", "an object"); !given {
		return err
	}
	f := newFields(sourceObject)
	for {
		i, err := f.next(s, &d.tok)
		if err != nil || i < 0 {
			return err
		}
		if e.source[i], err = s.readString(&d.keep, sourceWhere[i]); err != nil {
			return err
		}
	}
}

// readColumns reads the columns of a version 1 record into d.columns and
// reports whether they were given (as an array, even an empty one).
func (d *decoder) readColumns(s *scanner) (bool, error) {
	if given, err := s.open('[', "columns", "an array"); !given {
		return false, err
	}
	for first := true; ; first = false {
		more, err := s.more(first, ']')
		if err != nil || !more {
			return true, err
		}
		if len(d.columns) == MaxColumns {
			return true, fmt.Errorf("%w: columns has more than %d entries", ErrOverBudget, MaxColumns)
		}
		var c columnSpec
		given, err := s.open('{', "columns[]", "an object")
		if err != nil {
			return true, err
		}
		if given { // else a zero column, as encoding/json made it of null
			if err := d.readColumn(s, &c); err != nil {
				return true, err
			}
		}
		d.columns = append(d.columns, c)
	}
}

// readColumn reads one column object of a version 1 record, whose '{' has
// been read.
func (d *decoder) readColumn(s *scanner, c *columnSpec) error {
	f := newFields(columnObject)
	for {
		i, err := f.next(s, &d.tok)
		if err != nil || i < 0 {
			return err
		}
		switch i {
		case columnName:
			c.name, err = s.readString(&d.keep, "column name")
		case columnType:
			c.typ, err = s.readString(&d.keep, "column type")
		case columnEnum:
			c.enum, err = s.readBool("column enum")
		case columnArray:
			c.array, err = s.readBool("column array")
		case columnTypMod:
			c.typMod, err = readSigned[int32](s, "column typmod")
		case columnKey:
			c.key, err = s.readBool("column key")
		case columnAttnum:
			c.attnum, err = readSigned[int16](s, "column attnum")
		case columnMissing:
			// A *string: null leaves it nil, a string sets it.
			start := len(d.keep)
			var null, ok bool
			if d.keep, null, ok = s.appendString(d.keep); !ok {
				return s.valueError("column missing", "a string")
			}
			c.missing, c.hasMissing = span{start, len(d.keep)}, !null
		case columnLabels:
			err = d.readLabels(s, c)
		}
		if err != nil {
			return err
		}
	}
}

// readLabels reads an enum column's labels into d.labels, refusing more
// than MaxEnumLabels for the column or MaxSchemaLabels for the record
// before they are kept.
func (d *decoder) readLabels(s *scanner, c *columnSpec) error {
	c.labels = [2]int{len(d.labels), len(d.labels)}
	if given, err := s.open('[', "column labels", "an array"); !given {
		return err
	}
	for first := true; ; first = false {
		more, err := s.more(first, ']')
		if err != nil || !more {
			return err
		}
		switch {
		case len(d.labels)-c.labels[0] == MaxEnumLabels:
			return fmt.Errorf("%w: a column has more than %d enum labels", ErrOverBudget, MaxEnumLabels)
		case len(d.labels) == MaxSchemaLabels:
			return fmt.Errorf("%w: the columns have more than %d enum labels", ErrOverBudget, MaxSchemaLabels)
		}
		start := len(d.keep)
		var null, ok bool
		if d.keep, null, ok = s.appendString(d.keep); !ok || null {
			return s.valueError("column labels[]", "a string")
		}
		d.labels = append(d.labels, span{start, len(d.keep)})
		c.labels[1] = len(d.labels)
	}
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
		if n := c.labels[1] - c.labels[0]; n > 0 {
			cols[i].Labels = make([]string, n)
			for j, l := range d.labels[c.labels[0]:c.labels[1]] {
				cols[i].Labels[j] = l.of(text)
			}
		}
	}
	return cols
}
