package record

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"
	"unsafe"
)

// AppendJSON appends the wire encoding of r to dst and returns the extended
// buffer. It is written by hand because it runs once per captured row: it
// allocates nothing beyond growing dst.
func AppendJSON(dst []byte, r *Record) []byte {
	dst = append(dst, `{"eventId":`...)
	dst = appendJSONString(dst, r.EventID)
	dst = append(dst, `,"eventType":`...)
	dst = append(dst, '"')
	dst = appendJSONStringBody(dst, r.Source.Schema)
	dst = append(dst, '.')
	dst = appendJSONStringBody(dst, r.Source.Table)
	dst = append(dst, '.')
	dst = append(dst, r.Op.verb()...)
	dst = append(dst, `","eventVersion":`...)
	dst = strconv.AppendInt(dst, EnvelopeVersion, 10)
	dst = append(dst, `,"occurredAt":"`...)
	dst = r.OccurredAt.UTC().AppendFormat(dst, time.RFC3339Nano)
	dst = append(dst, `","ingestedAt":"`...)
	dst = r.IngestedAt.UTC().AppendFormat(dst, time.RFC3339Nano)
	dst = append(dst, `","tenantId":`...)
	dst = appendJSONString(dst, r.TenantID)
	if r.TenantColumn != "" {
		dst = append(dst, `,"tenantColumn":`...)
		dst = appendJSONString(dst, r.TenantColumn)
	}
	dst = append(dst, `,"partitionKey":"`...)
	var kb [256]byte
	key := r.AppendPartitionKey(kb[:0])
	dst = appendJSONStringBody(dst, unsafe.String(unsafe.SliceData(key), len(key)))
	dst = append(dst, '"')
	dst = append(dst, `,"source":{"id":`...)
	dst = appendJSONString(dst, r.Source.ID)
	dst = append(dst, `,"schema":`...)
	dst = appendJSONString(dst, r.Source.Schema)
	dst = append(dst, `,"table":`...)
	dst = appendJSONString(dst, r.Source.Table)
	dst = append(dst, `},"lsn":"`...)
	dst = appendLSN(dst, r.LSN)
	dst = append(dst, `","commitLsn":"`...)
	dst = appendLSN(dst, r.CommitLSN)
	dst = append(dst, `","ordinal":`...)
	dst = strconv.AppendUint(dst, uint64(r.Ordinal), 10)
	dst = append(dst, `,"version":`...)
	dst = strconv.AppendUint(dst, r.Version, 10)
	dst = append(dst, `,"op":"`...)
	dst = append(dst, r.Op.String()...)
	dst = append(dst, `","schemaId":`...)
	dst = appendJSONString(dst, r.SchemaID)
	dst = append(dst, `,"columns":[`...)
	for i, c := range r.Columns {
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
		dst = append(dst, '}')
	}
	dst = append(dst, ']')
	if r.OldKey != nil {
		dst = append(dst, `,"key":`...)
		dst = appendValues(dst, r.Columns, r.OldKey, true)
	}
	dst = append(dst, `,"payload":`...)
	dst = appendValues(dst, r.Columns, r.Values, false)
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
		dst = appendJSONString(dst, r.Columns[i].Name)
	}
	if unchanged {
		dst = append(dst, ']')
	}
	return append(dst, '}')
}

// appendValues writes vals as a JSON object in column order, so the encoding
// of a record is deterministic. Unchanged values are left out (they are
// listed under "unchanged"); with keysOnly, so are non-key columns.
func appendValues(dst []byte, cols []Column, vals []Value, keysOnly bool) []byte {
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
		dst = appendJSONString(dst, c.Name)
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
	dst = append(dst, '[')
	dst = appendJSONString(dst, r.TenantID)
	for i, c := range r.Columns {
		if c.Key && i < len(r.Values) {
			dst = append(dst, ',')
			dst = appendJSONString(dst, r.Values[i].Text)
		}
	}
	return append(dst, ']')
}

// appendLSN writes l as LSN.String does, without allocating.
func appendLSN(dst []byte, l LSN) []byte {
	dst = appendUpperHex(dst, uint32(l>>32))
	dst = append(dst, '/')
	return appendUpperHex(dst, uint32(l))
}

func appendUpperHex(dst []byte, v uint32) []byte {
	const digits = "0123456789ABCDEF"
	var b [8]byte
	i := len(b)
	for {
		i--
		b[i] = digits[v&0xf]
		v >>= 4
		if v == 0 {
			break
		}
	}
	return append(dst, b[i:]...)
}

const hexDigits = "0123456789abcdef"

func appendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	dst = appendJSONStringBody(dst, s)
	return append(dst, '"')
}

// appendJSONStringBody escapes s for a JSON string. Invalid UTF-8 (possible
// in SQL_ASCII databases) is replaced by U+FFFD, as encoding/json does.
func appendJSONStringBody(dst []byte, s string) []byte {
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		// U+2028 and U+2029 are valid JSON but break JavaScript consumers.
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	return append(dst, s[start:]...)
}

// wire is the JSON shape of a record, used for decoding.
type wire struct {
	EventID      string             `json:"eventId"`
	EventType    string             `json:"eventType"`
	EventVersion int                `json:"eventVersion"`
	OccurredAt   time.Time          `json:"occurredAt"`
	IngestedAt   time.Time          `json:"ingestedAt"`
	TenantID     string             `json:"tenantId"`
	TenantColumn string             `json:"tenantColumn"`
	PartitionKey string             `json:"partitionKey"`
	Source       Source             `json:"source"`
	LSN          string             `json:"lsn"`
	CommitLSN    string             `json:"commitLsn"`
	Ordinal      uint32             `json:"ordinal"`
	Version      uint64             `json:"version"`
	Op           string             `json:"op"`
	SchemaID     string             `json:"schemaId"`
	Columns      []Column           `json:"columns"`
	Key          map[string]*string `json:"key"`
	Payload      map[string]*string `json:"payload"`
	Unchanged    []string           `json:"unchanged"`
}

// Decode parses one wire-encoded record and validates it. Every error wraps
// ErrInvalid: a record that fails here can never be loaded and belongs in
// the dead-letter topic.
func Decode(data []byte) (*Record, error) {
	var w wire
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&w); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if w.EventVersion != EnvelopeVersion {
		return nil, fmt.Errorf("%w: eventVersion %d is not supported (this build reads %d)", ErrInvalid, w.EventVersion, EnvelopeVersion)
	}
	r := &Record{
		EventID:      w.EventID,
		OccurredAt:   w.OccurredAt,
		IngestedAt:   w.IngestedAt,
		TenantID:     w.TenantID,
		TenantColumn: w.TenantColumn,
		Source:       w.Source,
		Ordinal:      w.Ordinal,
		Version:      w.Version,
		Columns:      w.Columns,
		SchemaID:     w.SchemaID,
	}
	var err error
	if r.Values, err = valuesOf(w.Columns, w.Payload, w.Unchanged, false); err != nil {
		return nil, err
	}
	if w.Key != nil {
		if r.OldKey, err = valuesOf(w.Columns, w.Key, nil, true); err != nil {
			return nil, err
		}
	}
	if r.Op, err = ParseOp(w.Op); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if r.LSN, err = ParseLSN(w.LSN); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if r.CommitLSN, err = ParseLSN(w.CommitLSN); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if err := r.Validate(); err != nil {
		return nil, err
	}
	if w.EventType != r.EventType() {
		return nil, fmt.Errorf("%w: eventType %q does not match source and op (want %q)", ErrInvalid, w.EventType, r.EventType())
	}
	if w.PartitionKey != r.PartitionKey() {
		return nil, fmt.Errorf("%w: partitionKey %q does not match tenant and key (want %q)", ErrInvalid, w.PartitionKey, r.PartitionKey())
	}
	if w.SchemaID != SchemaID(r.TenantColumn, r.Columns) {
		return nil, fmt.Errorf("%w: schemaId %q does not match the columns", ErrInvalid, w.SchemaID)
	}
	return r, nil
}

// valuesOf aligns a decoded payload object with the columns. Every column
// must be present or listed as unchanged; with keysOnly, absent non-key
// columns are null.
func valuesOf(cols []Column, vals map[string]*string, unchanged []string, keysOnly bool) ([]Value, error) {
	out := make([]Value, len(cols))
	index := make(map[string]int, len(cols))
	for i, c := range cols {
		index[c.Name] = i
	}
	for name, v := range vals {
		i, ok := index[name]
		if !ok {
			return nil, fmt.Errorf("%w: payload column %q is not among the columns", ErrInvalid, name)
		}
		if v == nil {
			out[i].Null = true
		} else {
			out[i].Text = *v
		}
	}
	for _, name := range unchanged {
		i, ok := index[name]
		if !ok {
			return nil, fmt.Errorf("%w: unchanged column %q is not among the columns", ErrInvalid, name)
		}
		if _, dup := vals[name]; dup {
			return nil, fmt.Errorf("%w: column %q is both in payload and unchanged", ErrInvalid, name)
		}
		out[i].Unchanged = true
	}
	for i, c := range cols {
		if _, ok := vals[c.Name]; ok || out[i].Unchanged {
			continue
		}
		if keysOnly && !c.Key {
			out[i].Null = true
			continue
		}
		return nil, fmt.Errorf("%w: column %q is missing from the payload", ErrInvalid, c.Name)
	}
	return out, nil
}

// PayloadHash returns a hex SHA-256 of everything that identifies what r
// says happened: source, position, op, columns and values. It leaves out
// ingestedAt, which differs when the same change is captured again, so equal
// eventIds with different hashes mean the eventId contract was broken.
func PayloadHash(r *Record) string {
	h := sha256.New()
	buf := make([]byte, 0, 256)
	buf = appendJSONString(buf, r.Source.ID)
	buf = appendJSONString(buf, r.EventType())
	buf = appendJSONString(buf, r.TenantID)
	buf = appendLSN(buf, r.LSN)
	buf = appendLSN(buf, r.CommitLSN)
	buf = strconv.AppendUint(buf, uint64(r.Ordinal), 10)
	buf = strconv.AppendUint(buf, r.Version, 10)
	buf = r.OccurredAt.UTC().AppendFormat(buf, time.RFC3339Nano)
	buf = appendJSONString(buf, r.SchemaID)
	h.Write(buf)
	for i, v := range r.Values {
		buf = appendJSONString(buf[:0], r.Columns[i].Name)
		switch {
		case v.Null:
			buf = append(buf, 'n')
		case v.Unchanged:
			buf = append(buf, 'u')
		default:
			buf = appendJSONString(buf, v.Text)
		}
		h.Write(buf)
	}
	return hex.EncodeToString(h.Sum(nil))
}
