package record

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"time"
	"unsafe"
)

// AppendJSON appends the wire encoding of r, in the current envelope
// version, to dst and returns the extended buffer. It is written by hand
// because it runs once per captured row: it allocates nothing beyond growing
// dst. An Encoder writes the same bytes faster when many records share one
// relation.
func AppendJSON(dst []byte, r *Record) []byte {
	return appendRecord(dst, r, nil, EnvelopeVersion)
}

// AppendJSONVersion is AppendJSON for the given envelope version (1 or 2;
// anything else is written as the current version).
func AppendJSONVersion(dst []byte, r *Record, version int) []byte {
	return appendRecord(dst, r, nil, checkVersion(version))
}

// checkVersion returns v when this package writes it, and the current
// version otherwise.
func checkVersion(v int) int {
	if v == 1 || v == 2 {
		return v
	}
	return EnvelopeVersion
}

// appendRecord writes the envelope of r in the given version. With an
// Encoder for r's relation, the parts that depend only on the relation are
// copied from it instead of being encoded again. Both paths write the same
// bytes (see TestEncoderMatchesAppendJSON).
func appendRecord(dst []byte, r *Record, e *Encoder, version int) []byte {
	dst = append(dst, `{"eventId":`...)
	dst = appendJSONString(dst, r.EventID)
	if e != nil {
		dst = append(dst, e.eventType...)
	} else {
		dst = appendEventTypeHead(dst, r.Source)
	}
	dst = append(dst, r.Op.verb()...)
	dst = append(dst, `","eventVersion":`...)
	dst = strconv.AppendInt(dst, int64(version), 10)
	dst = append(dst, `,"occurredAt":"`...)
	dst = appendRFC3339Nano(dst, r.OccurredAt)
	dst = append(dst, `","ingestedAt":"`...)
	dst = appendRFC3339Nano(dst, r.IngestedAt)
	dst = append(dst, `","tenantId":`...)
	dst = appendJSONString(dst, r.TenantID)
	if e != nil {
		dst = append(dst, e.tenantJSON...)
	} else {
		dst = appendTenantColumn(dst, r.TenantColumn)
	}
	dst = append(dst, `,"partitionKey":"`...)
	dst = r.appendPartitionKeyInString(dst)
	dst = append(dst, '"')
	if e != nil {
		dst = append(dst, e.sourceJSON...)
	} else {
		dst = appendSource(dst, r.Source)
	}
	dst = append(dst, `,"lsn":"`...)
	dst = appendLSN(dst, r.LSN)
	dst = append(dst, `","commitLsn":"`...)
	dst = appendLSN(dst, r.CommitLSN)
	dst = append(dst, `","ordinal":`...)
	dst = strconv.AppendUint(dst, uint64(r.Ordinal), 10)
	dst = append(dst, `,"version":`...)
	dst = strconv.AppendUint(dst, r.Version, 10)
	dst = append(dst, `,"op":"`...)
	dst = append(dst, r.Op.String()...)
	dst = append(dst, '"')
	var names []string
	switch {
	case e != nil && version == 1:
		dst = append(dst, e.schemaColumns...)
		names = e.names
	case e != nil:
		dst = append(dst, e.schemaRef...)
		names = e.names
	case version == 1:
		dst = appendSchemaColumns(dst, r.SchemaID, r.Columns)
	default:
		dst = appendSchemaRef(dst, r.SchemaID)
	}
	if r.OldKey != nil {
		dst = append(dst, `,"key":`...)
		dst = appendValues(dst, r.Columns, names, r.OldKey, true)
	}
	dst = append(dst, `,"payload":`...)
	dst = appendValues(dst, r.Columns, names, r.Values, false)
	unchanged := false
	for i, v := range r.Values {
		if !v.Unchanged {
			continue
		}
		if !unchanged {
			dst = append(dst, `,"unchanged":[`...)
			unchanged = true
		} else {
			dst = append(dst, ',')
		}
		dst = appendName(dst, r.Columns, names, i)
	}
	if unchanged {
		dst = append(dst, ']')
	}
	return append(dst, '}')
}

// appendEventTypeHead writes the eventType field up to the verb:
// `,"eventType":"<schema>.<table>.`.
func appendEventTypeHead(dst []byte, src Source) []byte {
	dst = append(dst, `,"eventType":"`...)
	dst = appendJSONStringBody(dst, src.Schema)
	dst = append(dst, '.')
	dst = appendJSONStringBody(dst, src.Table)
	return append(dst, '.')
}

// appendTenantColumn writes the tenantColumn field, absent when empty.
func appendTenantColumn(dst []byte, tenantColumn string) []byte {
	if tenantColumn == "" {
		return dst
	}
	dst = append(dst, `,"tenantColumn":`...)
	return appendJSONString(dst, tenantColumn)
}

// appendSource writes the source field.
func appendSource(dst []byte, src Source) []byte {
	dst = append(dst, `,"source":{"id":`...)
	dst = appendJSONString(dst, src.ID)
	dst = append(dst, `,"schema":`...)
	dst = appendJSONString(dst, src.Schema)
	dst = append(dst, `,"table":`...)
	dst = appendJSONString(dst, src.Table)
	return append(dst, '}')
}

// appendSchemaRef writes the schemaId field, by which a version 2 record
// refers to its schema in the registry.
func appendSchemaRef(dst []byte, schemaID string) []byte {
	dst = append(dst, `,"schemaId":`...)
	return appendJSONString(dst, schemaID)
}

// appendSchemaColumns writes the schemaId and columns fields of a version 1
// record: the bulk of its bytes that depends only on its relation.
func appendSchemaColumns(dst []byte, schemaID string, cols []Column) []byte {
	dst = append(dst, `,"schemaId":`...)
	dst = appendJSONString(dst, schemaID)
	dst = append(dst, `,"columns":[`...)
	for i, c := range cols {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"name":`...)
		dst = appendJSONString(dst, c.Name)
		dst = append(dst, `,"type":`...)
		dst = appendJSONString(dst, c.Type)
		if c.Enum {
			dst = append(dst, `,"enum":true`...)
		}
		if c.Array {
			dst = append(dst, `,"array":true`...)
		}
		dst = append(dst, `,"typmod":`...)
		dst = strconv.AppendInt(dst, int64(c.TypMod), 10)
		if c.Key {
			dst = append(dst, `,"key":true`...)
		}
		if c.Attnum != 0 {
			dst = append(dst, `,"attnum":`...)
			dst = strconv.AppendInt(dst, int64(c.Attnum), 10)
		}
		if c.Missing != nil {
			dst = append(dst, `,"missing":`...)
			dst = appendJSONString(dst, *c.Missing)
		}
		if len(c.Labels) > 0 {
			dst = append(dst, `,"labels":[`...)
			for j, l := range c.Labels {
				if j > 0 {
					dst = append(dst, ',')
				}
				dst = appendJSONString(dst, l)
			}
			dst = append(dst, ']')
		}
		dst = append(dst, '}')
	}
	return append(dst, ']')
}

// appendPartitionKeyInString writes r's partition key escaped as the body of
// a JSON string, without building the key first: a key value that needs no
// escaping (most do not) is copied between escaped quotes.
func (r *Record) appendPartitionKeyInString(dst []byte) []byte {
	return r.appendPartitionKey(dst, appendKeyValueInString)
}

// appendKeyValueInString writes v as a JSON string, escaped again as part
// of a JSON string.
func appendKeyValueInString(dst []byte, v string) []byte {
	if plainPrefix(v) == len(v) {
		dst = append(dst, `\"`...)
		dst = append(dst, v...)
		return append(dst, `\"`...)
	}
	var b [128]byte
	quoted := appendJSONString(b[:0], v)
	return appendJSONStringBody(dst, unsafe.String(unsafe.SliceData(quoted), len(quoted)))
}

// appendName writes the name of column i as a JSON string, copied from
// names (an Encoder's pre-encoded names) when given.
func appendName(dst []byte, cols []Column, names []string, i int) []byte {
	if names != nil {
		return append(dst, names[i]...)
	}
	return appendJSONString(dst, cols[i].Name)
}

// appendValues writes vals as a JSON object in column order, so the encoding
// of a record is deterministic. Unchanged values are left out (they are
// listed under "unchanged"); with keysOnly, so are non-key columns.
func appendValues(dst []byte, cols []Column, names []string, vals []Value, keysOnly bool) []byte {
	dst = append(dst, '{')
	first := true
	for i, c := range cols {
		if i >= len(vals) || vals[i].Unchanged || (keysOnly && !c.Key) {
			continue
		}
		if !first {
			dst = append(dst, ',')
		}
		first = false
		dst = appendName(dst, cols, names, i)
		dst = append(dst, ':')
		if vals[i].Null {
			dst = append(dst, "null"...)
		} else {
			dst = appendJSONString(dst, vals[i].Text)
		}
	}
	return append(dst, '}')
}

// PartitionKey returns the Kafka key of r: its tenant and key values.
func (r *Record) PartitionKey() string { return string(r.AppendPartitionKey(nil)) }

// AppendPartitionKey appends r's partition key (see PartitionKey) to dst.
func (r *Record) AppendPartitionKey(dst []byte) []byte {
	return r.appendPartitionKey(dst, appendJSONString)
}

// appendPartitionKey writes the partition key, a JSON array of the tenant
// and the key values, each written by appendValue.
func (r *Record) appendPartitionKey(dst []byte, appendValue func([]byte, string) []byte) []byte {
	dst = append(dst, '[')
	dst = appendValue(dst, r.TenantID)
	for i, c := range r.Columns {
		if c.Key && i < len(r.Values) {
			dst = append(dst, ',')
			dst = appendValue(dst, r.Values[i].Text)
		}
	}
	return append(dst, ']')
}

// PayloadHash returns a hex SHA-256 of everything that identifies what r
// says happened: source, position, op, columns and values. It leaves out
// ingestedAt, which differs when the same change is captured again, so equal
// eventIds with different hashes mean the eventId contract was broken.
func PayloadHash(r *Record) string {
	// The parts are written into one buffer (on the stack for rows of
	// usual size) and hashed in one call: a hasher and a write per column
	// cost the sink more than the hashing itself.
	var stack [1024]byte
	buf := appendJSONString(stack[:0], r.Source.ID)
	buf = appendJSONString(buf, r.EventType())
	buf = appendJSONString(buf, r.TenantID)
	buf = appendLSN(buf, r.LSN)
	buf = appendLSN(buf, r.CommitLSN)
	buf = strconv.AppendUint(buf, uint64(r.Ordinal), 10)
	buf = strconv.AppendUint(buf, r.Version, 10)
	buf = r.OccurredAt.UTC().AppendFormat(buf, time.RFC3339Nano)
	buf = appendJSONString(buf, r.SchemaID)
	for i, v := range r.Values {
		buf = appendJSONString(buf, r.Columns[i].Name)
		switch {
		case v.Null:
			buf = append(buf, 'n')
		case v.Unchanged:
			buf = append(buf, 'u')
		default:
			buf = appendJSONString(buf, v.Text)
		}
	}
	sum := sha256.Sum256(buf)
	return hex.EncodeToString(sum[:])
}
