package record

import "unsafe"

// Encoder writes the wire form of records of one relation. It encodes the
// parts of the envelope that depend only on the relation (source, columns,
// schemaId, tenantColumn, the escaped column names) once, when it is made,
// and copies them into every record: for a typical table they are more than
// half of a record's bytes. The output is byte for byte what AppendJSON
// writes.
//
// Make one per relation shape, when the relation is read or changes; an
// Encoder is immutable and safe for concurrent use.
type Encoder struct {
	// What the pre-encoded parts were made from. A record whose relation
	// is not this one is encoded by AppendJSON instead.
	source       Source
	tenantColumn string
	schemaID     string
	columns      []Column

	eventType     []byte   // `,"eventType":"<schema>.<table>.`
	tenantJSON    []byte   // `,"tenantColumn":"…"`, empty without a tenant column
	sourceJSON    []byte   // `,"source":{…}`
	schemaColumns []byte   // version 1: `,"schemaId":"…","columns":[…]`
	schemaRef     []byte   // version 2: `,"schemaId":"…"`
	names         []string // each column name as a JSON string
	version       int      // the envelope version written
}

// NewEncoder returns an Encoder that writes records whose Source,
// TenantColumn, SchemaID and Columns are the given ones in the given
// envelope version (1 or 2; any other value means the current version). It
// keeps cols: they must not be modified while the Encoder is in use (a
// relation that changes gets new columns and a new Encoder).
func NewEncoder(source Source, tenantColumn string, cols []Column, schemaID string, version int) *Encoder {
	e := &Encoder{source: source, tenantColumn: tenantColumn, schemaID: schemaID, columns: cols, version: checkVersion(version)}
	e.eventType = appendEventTypeHead(nil, source)
	e.tenantJSON = appendTenantColumn(nil, tenantColumn)
	e.sourceJSON = appendSource(nil, source)
	e.schemaColumns = appendSchemaColumns(nil, schemaID, cols)
	e.schemaRef = appendSchemaRef(nil, schemaID)
	e.names = make([]string, len(cols))
	for i, c := range cols {
		e.names[i] = string(appendJSONString(nil, c.Name))
	}
	return e
}

// fits reports that r belongs to e's relation: the same columns (the same
// slice, which a relation never modifies) and the same source, tenant
// column and schema id. Comparing strings that share memory is cheap.
func (e *Encoder) fits(r *Record) bool {
	return len(r.Columns) == len(e.columns) &&
		(len(e.columns) == 0 || unsafe.SliceData(r.Columns) == unsafe.SliceData(e.columns)) &&
		r.Source == e.source && r.TenantColumn == e.tenantColumn && r.SchemaID == e.schemaID
}

// Version returns the envelope version e writes.
func (e *Encoder) Version() int { return e.version }

// Schema returns the schema of e's records, which a version 2 record refers
// to and which must be in the registry before the record is produced.
func (e *Encoder) Schema() Schema { return Schema{TenantColumn: e.tenantColumn, Columns: e.columns} }

// AppendJSON appends the wire encoding of r to dst, as AppendJSONVersion
// does with e's version, and returns the extended buffer. A record of
// another relation is encoded correctly, only without the speed-up.
func (e *Encoder) AppendJSON(dst []byte, r *Record) []byte {
	if !e.fits(r) {
		return appendRecord(dst, r, nil, e.version)
	}
	return appendRecord(dst, r, e, e.version)
}

// AppendKeyValue appends r's partition key and then its wire encoding to
// dst, and returns the extended buffer and the two parts, which share its
// memory: the Kafka key and value of r, in one buffer.
func (e *Encoder) AppendKeyValue(dst []byte, r *Record) (buf, key, value []byte) {
	k0 := len(dst)
	dst = r.AppendPartitionKey(dst)
	k1 := len(dst)
	dst = e.AppendJSON(dst, r)
	return dst, dst[k0:k1], dst[k1:]
}
