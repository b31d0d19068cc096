package record

import (
	"fmt"
	"time"
)

// Decode parses one wire-encoded record and validates it. A version 1
// record carries its columns; a version 2 record names its schema, which
// Decode finds in schemas (nil is allowed when only version 1 records are
// expected).
//
// Every error wraps ErrInvalid, except a version 2 record whose schema is
// not in schemas: that error wraps ErrUnknownSchema, and the caller may read
// more of the registry and try again. A record that fails with ErrInvalid
// can never be loaded and belongs in the dead-letter topic.
//
// The record must be one JSON object with nothing but white space after
// it, and must name no field twice (names match as encoding/json matched
// them: exactly, else regardless of case); the decoder before this one,
// built on encoding/json, ignored what followed the object and took the
// last of two equal names. Strings decode as they did there, invalid UTF-8
// becoming U+FFFD. ErrUnknownSchema takes precedence over what only the
// schema can show to be wrong: payload, key and unchanged names, including
// a payload or key name given twice.
//
// The returned Record shares nothing with data, which the caller may reuse
// at once; a version 2 record's Columns are the schema's slice. Decode is
// safe for concurrent use; a Decoder does the same with buffers reused from
// one record to the next.
func Decode(data []byte, schemas Schemas) (*Record, error) {
	var d Decoder
	return d.Decode(data, schemas)
}

// Decoder decodes records as Decode does, keeping its scratch buffers
// between records, so that decoding allocates only what the Record keeps. The zero value is ready to use. A Decoder is not
// safe for concurrent use: give each goroutine its own.
type Decoder struct{ d decoder }

// Decode decodes one record; see the package-level Decode.
func (d *Decoder) Decode(data []byte, schemas Schemas) (*Record, error) {
	r, err := d.d.decode(data, schemas)
	if len(data) > maxKeptRecord {
		// One huge record must not pin buffers of its size for every
		// later one.
		d.d = decoder{}
	}
	return r, err
}

// maxKeptRecord is the size above which a Decoder drops its buffers after
// use instead of keeping them.
const maxKeptRecord = 1 << 20

// decoder is the state of one Decode call, kept for the next (see Decoder).
//
// A scanner reads the record in one pass (see decode_json*.go), each value
// straight into the envelope or into the buffers here, unescaped exactly
// as encoding/json, which Decode used before, unescaped it.
type decoder struct {
	keep  []byte // unescaped strings the Record keeps; copied into one string
	check []byte // strings only checked (eventType, op, …) that had escapes
	names []byte // unescaped names of payload and key members and of unchanged
	tok   []byte // a name or time with escapes, unescaped to be checked
	tmp   []byte // the partition key rebuilt from the decoded record

	payload   []member
	key       []member
	unchanged []span // in names
	columns   []columnSpec
	labels    []span // in keep: the enum labels of all columns

	assigned []bool // per column: given by the object values reads

	// A row batch's values are members (names unused) in cells; these are
	// the end of each row there, and the key columns and values.
	cells   []member
	rowEnds []int
	keyIdx  []int
	keyVals []string
}

// span is a string in one of the decoder's buffers, by position, so it
// stays valid while the buffer grows.
type span struct{ start, end int }

func (s span) in(b []byte) []byte    { return b[s.start:s.end] }
func (s span) of(text string) string { return text[s.start:s.end] }

// member is one name and value of a payload or key object.
type member struct {
	name span // in names
	text span // in keep
	null bool
}

// columnSpec is one column of a version 1 record, its strings still spans.
type columnSpec struct {
	name, typ, missing span // in keep
	hasMissing         bool
	enum, array, key   bool
	typMod             int32
	attnum             int16
	labels             [2]int // the column's labels: labels[0]:labels[1] of decoder.labels
}

// The top-level fields of a record, in the order capture writes them, so
// that the next field is usually found at the first place looked.
const (
	fieldEventID = iota
	fieldEventType
	fieldEventVersion
	fieldOccurredAt
	fieldIngestedAt
	fieldTenantID
	fieldTenantColumn
	fieldPartitionKey
	fieldSource
	fieldLSN
	fieldCommitLSN
	fieldOrdinal
	fieldVersion
	fieldOp
	fieldSchemaID
	fieldColumns
	fieldKey
	fieldPayload
	fieldUnchanged
	fieldRows // a row batch's rows, instead of eventId, partitionKey and payload
	numRecordFields
)

var recordFields = [numRecordFields]string{
	fieldEventID:      "eventId",
	fieldEventType:    "eventType",
	fieldEventVersion: "eventVersion",
	fieldOccurredAt:   "occurredAt",
	fieldIngestedAt:   "ingestedAt",
	fieldTenantID:     "tenantId",
	fieldTenantColumn: "tenantColumn",
	fieldPartitionKey: "partitionKey",
	fieldSource:       "source",
	fieldLSN:          "lsn",
	fieldCommitLSN:    "commitLsn",
	fieldOrdinal:      "ordinal",
	fieldVersion:      "version",
	fieldOp:           "op",
	fieldSchemaID:     "schemaId",
	fieldColumns:      "columns",
	fieldKey:          "key",
	fieldPayload:      "payload",
	fieldUnchanged:    "unchanged",
	fieldRows:         "rows",
}

// envelope is what decode reads from a record before it checks it: the
// strings the Record keeps as spans of the decoder's keep, the strings it
// only checks as slices (of data, or of check for one with escapes), and
// everything else decoded.
type envelope struct {
	eventID, tenantID, tenantColumn, schemaID   span // in keep
	source                                      [numSourceFields]span
	eventType, partitionKey, lsn, commitLSN, op []byte
	eventVersion                                int64
	occurredAt, ingestedAt                      time.Time
	ordinal                                     uint32
	version                                     uint64
	// hasColumns is true when columns is given and not null (a version 1
	// record); hasKey and hasRows likewise for key and rows.
	hasColumns, hasKey, hasRows bool
	// given holds the fields given, even as null.
	given fieldSet
}

// decode is Decode with the decoder's buffers.
func (d *decoder) decode(data []byte, schemas Schemas) (*Record, error) {
	var e envelope
	if err := d.read(data, &e); err != nil {
		return nil, err
	}
	if e.given.has(fieldRows) {
		return nil, fmt.Errorf("%w: the value is a row batch (field rows), which comes with the Kafka header %s; decode it with DecodeBatch", ErrInvalid, HeaderRows)
	}
	// Every string the Record keeps, in one allocation.
	text := string(d.keep)
	var cols []Column
	schemaID := e.schemaID.of(text)
	tenantColumn := e.tenantColumn.of(text)
	switch e.eventVersion {
	case 1:
		if !e.hasColumns {
			return nil, fmt.Errorf("%w: a version 1 record must carry its columns", ErrInvalid)
		}
		cols = d.makeColumns(text)
	case 2:
		var err error
		if cols, err = d.schemaColumns(&e, schemaID, tenantColumn, schemas); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("%w: eventVersion %d is not supported (this build reads 1 and 2)", ErrInvalid, e.eventVersion)
	}
	r := &Record{
		EventID:      e.eventID.of(text),
		OccurredAt:   e.occurredAt,
		IngestedAt:   e.ingestedAt,
		TenantID:     e.tenantID.of(text),
		TenantColumn: tenantColumn,
		Source: Source{
			ID:     e.source[sourceID].of(text),
			Schema: e.source[sourceSchema].of(text),
			Table:  e.source[sourceTable].of(text),
		},
		Ordinal:  e.ordinal,
		Version:  e.version,
		Columns:  cols,
		SchemaID: schemaID,
	}
	var err error
	if r.Values, err = d.values(cols, d.payload, d.unchanged, text, false); err != nil {
		return nil, err
	}
	if e.hasKey {
		if r.OldKey, err = d.values(cols, d.key, nil, text, true); err != nil {
			return nil, err
		}
	}
	// ParseOp and ParseLSN keep nothing of their argument (their errors
	// quote it), so they may read data or the scratch buffer in place.
	if r.Op, err = ParseOp(transient(e.op)); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if r.LSN, err = ParseLSN(transient(e.lsn)); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if r.CommitLSN, err = ParseLSN(transient(e.commitLSN)); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	// A version 2 record's columns come from a registry entry whose hash
	// was checked when it was read; they need no second check.
	if e.eventVersion == 1 {
		err = r.Validate()
	} else {
		err = r.ValidateRow()
	}
	if err != nil {
		return nil, err
	}
	if eventType := e.eventType; !isEventType(eventType, r.Source, r.Op) {
		return nil, fmt.Errorf("%w: eventType %q does not match source and op (want %q)", ErrInvalid, eventType, r.EventType())
	}
	d.tmp = r.AppendPartitionKey(d.tmp[:0])
	if key := e.partitionKey; string(key) != string(d.tmp) {
		return nil, fmt.Errorf("%w: partitionKey %q does not match tenant and key (want %q)", ErrInvalid, key, d.tmp)
	}
	if e.eventVersion == 1 && schemaID != SchemaID(r.TenantColumn, r.Columns) {
		return nil, fmt.Errorf("%w: schemaId %q does not match the columns", ErrInvalid, schemaID)
	}
	return r, nil
}

// schemaColumns returns the columns of a version 2 record from schemas.
func (d *decoder) schemaColumns(e *envelope, schemaID, tenantColumn string, schemas Schemas) ([]Column, error) {
	if e.hasColumns {
		return nil, fmt.Errorf("%w: a version 2 record refers to its columns by schemaId and must not carry them", ErrInvalid)
	}
	if schemaID == "" {
		return nil, fmt.Errorf("%w: schemaId is missing", ErrInvalid)
	}
	var s Schema
	ok := false
	if schemas != nil {
		s, ok = schemas.Schema(schemaID)
	}
	if !ok {
		return nil, fmt.Errorf("%w %q: it is not in the schema registry", ErrUnknownSchema, schemaID)
	}
	if s.TenantColumn != tenantColumn {
		return nil, fmt.Errorf("%w: tenantColumn %q differs from schema %s's %q", ErrInvalid, tenantColumn, schemaID, s.TenantColumn)
	}
	return s.Columns, nil
}

// isEventType reports whether eventType is Record.EventType of a record
// with src and op, without building that string.
func isEventType(eventType []byte, src Source, op Op) bool {
	verb := op.verb()
	n := len(src.Schema)
	m := n + 1 + len(src.Table)
	return len(eventType) == m+1+len(verb) &&
		string(eventType[:n]) == src.Schema && eventType[n] == '.' &&
		string(eventType[n+1:m]) == src.Table && eventType[m] == '.' &&
		string(eventType[m+1:]) == verb
}

// read reads every field of the record in data into e and the decoder's
// buffers, checking what JSON alone decides: syntax, names, types and
// ranges. What it accepts, encoding/json accepted into the record's old
// wire struct (except a field given twice, and data after the object), and
// what it rejects, encoding/json rejected; so ErrUnknownSchema is reported
// exactly when it was before.
func (d *decoder) read(data []byte, e *envelope) error {
	d.reset()
	s := &scanner{data: data}
	if s.peek() != '{' {
		return fmt.Errorf("%w: a record is a JSON object, not %s", ErrInvalid, s.kind())
	}
	s.pos++
	f := newFields(recordObject)
	for {
		i, err := f.next(s, &d.tok)
		if err != nil {
			return err
		}
		if i < 0 {
			break
		}
		if err := d.readField(s, i, e); err != nil {
			return err
		}
	}
	e.given = f.given
	if s.peek(); s.pos != len(data) {
		return fmt.Errorf("%w: data after the record's object, at byte %d: %q", ErrInvalid, s.pos, excerpt(data[s.pos:]))
	}
	return nil
}

// readField reads the value of the record's field i.
func (d *decoder) readField(s *scanner, i int, e *envelope) error {
	var err error
	switch i {
	case fieldEventID:
		e.eventID, err = s.readString(&d.keep, "eventId")
	case fieldEventType:
		e.eventType, err = s.readChecked(&d.check, "eventType")
	case fieldEventVersion:
		e.eventVersion, err = readSigned[int64](s, "eventVersion")
	case fieldOccurredAt:
		e.occurredAt, err = s.readTime("occurredAt", &d.tok)
	case fieldIngestedAt:
		e.ingestedAt, err = s.readTime("ingestedAt", &d.tok)
	case fieldTenantID:
		e.tenantID, err = s.readString(&d.keep, "tenantId")
	case fieldTenantColumn:
		e.tenantColumn, err = s.readString(&d.keep, "tenantColumn")
	case fieldPartitionKey:
		e.partitionKey, err = s.readChecked(&d.check, "partitionKey")
	case fieldSource:
		err = d.readSource(s, e)
	case fieldLSN:
		e.lsn, err = s.readChecked(&d.check, "lsn")
	case fieldCommitLSN:
		e.commitLSN, err = s.readChecked(&d.check, "commitLsn")
	case fieldOrdinal:
		e.ordinal, err = readUnsigned[uint32](s, "ordinal")
	case fieldVersion:
		e.version, err = readUnsigned[uint64](s, "version")
	case fieldOp:
		e.op, err = s.readChecked(&d.check, "op")
	case fieldSchemaID:
		e.schemaID, err = s.readString(&d.keep, "schemaId")
	case fieldColumns:
		e.hasColumns, err = d.readColumns(s)
	case fieldKey:
		d.key, e.hasKey, err = d.readMembers(s, d.key, "key")
	case fieldPayload:
		d.payload, _, err = d.readMembers(s, d.payload, "payload")
	case fieldUnchanged:
		err = d.readUnchanged(s)
	case fieldRows:
		e.hasRows, err = d.readRows(s)
	default: // a field added to recordFields alone
		err = fmt.Errorf("%w: this build has no reader for field %s", ErrInvalid, recordFields[i])
	}
	return err
}

// reset empties the decoder's buffers for the next record.
func (d *decoder) reset() {
	d.keep, d.check, d.names = d.keep[:0], d.check[:0], d.names[:0]
	d.payload, d.key, d.unchanged, d.columns = d.payload[:0], d.key[:0], d.unchanged[:0], d.columns[:0]
	d.labels = d.labels[:0]
	d.cells, d.rowEnds = d.cells[:0], d.rowEnds[:0]
}
