package record

import (
	"fmt"
	"time"

	"github.com/valyala/fastjson"
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

// Decoder decodes records as Decode does, keeping the parser's value tree
// and its scratch buffers between records, so that decoding allocates only
// what the Record keeps. The zero value is ready to use. A Decoder is not
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
// fastjson finds the structure of the record. Strings and the names of
// payload and key are read from the text it has found, not through its own
// unescaping (which is best-effort), so that they come out exactly as
// encoding/json, which Decode used before, made them: see appendUnquoted.
type decoder struct {
	parser fastjson.Parser

	fields [numRecordFields]*fastjson.Value
	nested [numColumnFields]*fastjson.Value // fields of source or of a column

	tok   []byte // one value as found on the wire (fastjson's MarshalTo)
	keep  []byte // unescaped strings the Record keeps; copied into one string
	check []byte // unescaped strings that are only checked (eventType, op, …)
	names []byte // unescaped names of payload and key members and of unchanged
	tmp   []byte // the partition key rebuilt from the decoded record

	payload   []member
	key       []member
	unchanged []span // in names
	columns   []columnSpec

	assigned []bool // per column: given by the object values reads

	// A row batch's values are members (names unused) in payload; these
	// are the end of each row there, and the key columns and values.
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

// envelope is what decode reads from a record before it checks it:
// strings as spans of the decoder's buffers, everything else decoded.
type envelope struct {
	eventID, tenantID, tenantColumn, schemaID span // in keep
	source                                    [numSourceFields]span
	eventType, partitionKey, lsn, commitLSN   span // in check
	op                                        span // in check
	eventVersion                              int64
	occurredAt, ingestedAt                    time.Time
	ordinal                                   uint32
	version                                   uint64
	// hasColumns is true when columns is given and not null (a version 1
	// record); hasKey likewise for key.
	hasColumns, hasKey bool
}

// decode is Decode with the decoder's buffers.
func (d *decoder) decode(data []byte, schemas Schemas) (*Record, error) {
	var e envelope
	if err := d.read(data, &e); err != nil {
		return nil, err
	}
	if d.fields[fieldRows] != nil {
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
	// quote it), so they may read the scratch buffer in place.
	if r.Op, err = ParseOp(transient(e.op.in(d.check))); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if r.LSN, err = ParseLSN(transient(e.lsn.in(d.check))); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if r.CommitLSN, err = ParseLSN(transient(e.commitLSN.in(d.check))); err != nil {
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
	if eventType := e.eventType.in(d.check); !isEventType(eventType, r.Source, r.Op) {
		return nil, fmt.Errorf("%w: eventType %q does not match source and op (want %q)", ErrInvalid, eventType, r.EventType())
	}
	d.tmp = r.AppendPartitionKey(d.tmp[:0])
	if key := e.partitionKey.in(d.check); string(key) != string(d.tmp) {
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

// read parses data and reads every field of the record into e and the
// decoder's buffers, checking what JSON alone decides: syntax, names,
// types and ranges. What it accepts, encoding/json accepted into the
// record's old wire struct (except a field given twice, and data after the
// object), and what it rejects, encoding/json rejected; so ErrUnknownSchema
// is reported exactly when it was before.
func (d *decoder) read(data []byte, e *envelope) error {
	d.reset()
	root, err := d.parser.ParseBytes(data)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if root.Type() != fastjson.TypeObject {
		return fmt.Errorf("%w: a record is a JSON object, not %s", ErrInvalid, root.Type())
	}
	obj, _ := root.Object()
	f := d.fields[:]
	if err := visitFields(obj, recordFields[:], f, "record"); err != nil {
		return err
	}
	if e.eventID, err = d.readString(f[fieldEventID], &d.keep, "eventId"); err != nil {
		return err
	}
	if e.eventType, err = d.readString(f[fieldEventType], &d.check, "eventType"); err != nil {
		return err
	}
	if e.eventVersion, err = d.readInt(f[fieldEventVersion], 64, "eventVersion"); err != nil {
		return err
	}
	if e.occurredAt, err = d.readTime(f[fieldOccurredAt], "occurredAt"); err != nil {
		return err
	}
	if e.ingestedAt, err = d.readTime(f[fieldIngestedAt], "ingestedAt"); err != nil {
		return err
	}
	if e.tenantID, err = d.readString(f[fieldTenantID], &d.keep, "tenantId"); err != nil {
		return err
	}
	if e.tenantColumn, err = d.readString(f[fieldTenantColumn], &d.keep, "tenantColumn"); err != nil {
		return err
	}
	if e.partitionKey, err = d.readString(f[fieldPartitionKey], &d.check, "partitionKey"); err != nil {
		return err
	}
	if err := d.readSource(f[fieldSource], e); err != nil {
		return err
	}
	if e.lsn, err = d.readString(f[fieldLSN], &d.check, "lsn"); err != nil {
		return err
	}
	if e.commitLSN, err = d.readString(f[fieldCommitLSN], &d.check, "commitLsn"); err != nil {
		return err
	}
	ordinal, err := d.readUint(f[fieldOrdinal], 32, "ordinal")
	if err != nil {
		return err
	}
	e.ordinal = uint32(ordinal)
	if e.version, err = d.readUint(f[fieldVersion], 64, "version"); err != nil {
		return err
	}
	if e.op, err = d.readString(f[fieldOp], &d.check, "op"); err != nil {
		return err
	}
	if e.schemaID, err = d.readString(f[fieldSchemaID], &d.keep, "schemaId"); err != nil {
		return err
	}
	if e.hasColumns, err = d.readColumns(f[fieldColumns]); err != nil {
		return err
	}
	if d.key, e.hasKey, err = d.readMembers(f[fieldKey], d.key, "key"); err != nil {
		return err
	}
	if d.payload, _, err = d.readMembers(f[fieldPayload], d.payload, "payload"); err != nil {
		return err
	}
	return d.readUnchanged(f[fieldUnchanged])
}

// reset empties the decoder's buffers for the next record.
func (d *decoder) reset() {
	d.keep, d.check, d.names = d.keep[:0], d.check[:0], d.names[:0]
	d.payload, d.key, d.unchanged, d.columns = d.payload[:0], d.key[:0], d.unchanged[:0], d.columns[:0]
}

// visitFields files the members of o under their place in names (into
// vals, which it clears first), rejecting a name that is not there and one
// given twice. A name matches as encoding/json matched a struct field:
// exactly, else by Unicode case folding (see fieldIndex).
//
// encoding/json took the last of two equal names (and merged objects and
// arrays given twice); Decode rejects the record instead: capture never
// writes a name twice, and a record that does may be read differently by
// different readers.
func visitFields(o *fastjson.Object, names []string, vals []*fastjson.Value, where string) error {
	clear(vals)
	var err error
	hint := 0
	o.Visit(func(key []byte, v *fastjson.Value) {
		if err != nil {
			return
		}
		i := fieldIndex(names, key, hint)
		switch {
		case i < 0:
			err = fmt.Errorf("%w: %s has an unknown field %q", ErrInvalid, where, key)
		case vals[i] != nil:
			err = fmt.Errorf("%w: %s has field %q twice", ErrInvalid, where, names[i])
		default:
			vals[i] = v
			hint = i + 1
		}
	})
	return err
}
