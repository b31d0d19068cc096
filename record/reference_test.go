package record

// This file keeps the encoder as it was before it was optimised (envelope
// version 1, commit f5c6b43), as the reference the fast paths must match
// byte for byte; refV2 derives version 2 from it. It is test code only: it
// never runs in production.

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
	"unsafe"
)

// refV2 turns a reference version 1 record into version 2: the same bytes
// with eventVersion 2 and without the columns field.
func refV2(v1 []byte) []byte {
	s := string(v1)
	s = strings.Replace(s, `"eventVersion":1,`, `"eventVersion":2,`, 1)
	i := strings.Index(s, `,"columns":[`)
	j := strings.Index(s, `],"key":`)
	if k := strings.Index(s, `],"payload":`); j < 0 || (k >= 0 && k < j) {
		j = k
	}
	if i < 0 || j < i {
		panic("refV2: no columns field in " + s)
	}
	return []byte(s[:i] + s[j+1:])
}

func refAppendJSON(dst []byte, r *Record) []byte {
	dst = append(dst, `{"eventId":`...)
	dst = refAppendJSONString(dst, r.EventID)
	dst = append(dst, `,"eventType":`...)
	dst = append(dst, '"')
	dst = refAppendJSONStringBody(dst, r.Source.Schema)
	dst = append(dst, '.')
	dst = refAppendJSONStringBody(dst, r.Source.Table)
	dst = append(dst, '.')
	dst = append(dst, r.Op.verb()...)
	dst = append(dst, `","eventVersion":`...)
	dst = append(dst, '1')
	dst = append(dst, `,"occurredAt":"`...)
	dst = r.OccurredAt.UTC().AppendFormat(dst, time.RFC3339Nano)
	dst = append(dst, `","ingestedAt":"`...)
	dst = r.IngestedAt.UTC().AppendFormat(dst, time.RFC3339Nano)
	dst = append(dst, `","tenantId":`...)
	dst = refAppendJSONString(dst, r.TenantID)
	if r.TenantColumn != "" {
		dst = append(dst, `,"tenantColumn":`...)
		dst = refAppendJSONString(dst, r.TenantColumn)
	}
	dst = append(dst, `,"partitionKey":"`...)
	var kb [256]byte
	key := refAppendPartitionKey(r, kb[:0])
	dst = refAppendJSONStringBody(dst, unsafe.String(unsafe.SliceData(key), len(key)))
	dst = append(dst, '"')
	dst = append(dst, `,"source":{"id":`...)
	dst = refAppendJSONString(dst, r.Source.ID)
	dst = append(dst, `,"schema":`...)
	dst = refAppendJSONString(dst, r.Source.Schema)
	dst = append(dst, `,"table":`...)
	dst = refAppendJSONString(dst, r.Source.Table)
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
	dst = refAppendJSONString(dst, r.SchemaID)
	dst = append(dst, `,"columns":`...)
	dst = append(dst, refColumnsJSON(r.Columns)...)
	if r.OldKey != nil {
		dst = append(dst, `,"key":`...)
		dst = refAppendValues(dst, r.Columns, r.OldKey, true)
	}
	dst = append(dst, `,"payload":`...)
	dst = refAppendValues(dst, r.Columns, r.Values, false)
	var unchanged []string
	for i, v := range r.Values {
		if v.Unchanged {
			unchanged = append(unchanged, string(refAppendJSONString(nil, r.Columns[i].Name)))
		}
	}
	if len(unchanged) > 0 {
		dst = append(dst, `,"unchanged":[`+strings.Join(unchanged, ",")+"]"...)
	}
	return append(dst, '}')
}

// refAppendValues writes vals as a JSON object in column order, so the encoding
// of a record is deterministic. Unchanged values are left out (they are
// listed under "unchanged"); with keysOnly, so are non-key columns.
func refAppendValues(dst []byte, cols []Column, vals []Value, keysOnly bool) []byte {
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
		dst = refAppendJSONString(dst, c.Name)
		dst = append(dst, ':')
		if vals[i].Null {
			dst = append(dst, "null"...)
		} else {
			dst = refAppendJSONString(dst, vals[i].Text)
		}
	}
	return append(dst, '}')
}

// refAppendPartitionKey appends r's partition key to dst.
func refAppendPartitionKey(r *Record, dst []byte) []byte {
	dst = append(dst, '[')
	dst = refAppendJSONString(dst, r.TenantID)
	for i, c := range r.Columns {
		if c.Key && i < len(r.Values) {
			dst = append(dst, ',')
			dst = refAppendJSONString(dst, r.Values[i].Text)
		}
	}
	return append(dst, ']')
}

// refAppendJSONString writes s as a quoted JSON string.
func refAppendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	dst = refAppendJSONStringBody(dst, s)
	return append(dst, '"')
}

// refAppendJSONStringBody escapes s for a JSON string one rune at a time
// (the production code scans words). Each invalid UTF-8 byte (possible in
// SQL_ASCII databases) becomes \ufffd, as encoding/json does; U+2028 and
// U+2029 are escaped: valid JSON, but they break JavaScript consumers.
func refAppendJSONStringBody(dst []byte, s string) []byte {
	for i, r := range s {
		switch {
		case r == utf8.RuneError && !strings.HasPrefix(s[i:], "\uFFFD"):
			dst = append(dst, `\ufffd`...)
		case r == '"' || r == '\\':
			dst = append(dst, '\\', byte(r))
		case r == '\n':
			dst = append(dst, `\n`...)
		case r == '\r':
			dst = append(dst, `\r`...)
		case r == '\t':
			dst = append(dst, `\t`...)
		case r < 0x20 || r == '\u2028' || r == '\u2029':
			dst = fmt.Appendf(dst, `\u%04x`, r)
		default:
			dst = utf8.AppendRune(dst, r)
		}
	}
	return dst
}

// refColumnsJSON writes the columns field's array: each column's fields
// joined, optional ones only when set.
func refColumnsJSON(cols []Column) string {
	objs := make([]string, 0, len(cols))
	for _, c := range cols {
		f := []string{`"name":` + string(refAppendJSONString(nil, c.Name)), `"type":` + string(refAppendJSONString(nil, c.Type))}
		for _, flag := range []struct {
			on   bool
			name string
		}{{c.Enum, "enum"}, {c.Array, "array"}} {
			if flag.on {
				f = append(f, `"`+flag.name+`":true`)
			}
		}
		f = append(f, fmt.Sprintf(`"typmod":%d`, c.TypMod))
		if c.Key {
			f = append(f, `"key":true`)
		}
		if c.Attnum != 0 {
			f = append(f, fmt.Sprintf(`"attnum":%d`, c.Attnum))
		}
		if c.Missing != nil {
			f = append(f, `"missing":`+string(refAppendJSONString(nil, *c.Missing)))
		}
		objs = append(objs, "{"+strings.Join(f, ",")+"}")
	}
	return "[" + strings.Join(objs, ",") + "]"
}

// refEventID is EventID as it was: a fresh hasher and a formatted string per call.
func refEventID(source string, commitLSN LSN, ordinal uint32, commitTime time.Time) string {
	var in [8 + 4]byte
	binary.BigEndian.PutUint64(in[:8], uint64(commitLSN))
	binary.BigEndian.PutUint32(in[8:], ordinal)
	h := sha256.New()
	h.Write([]byte(source))
	h.Write([]byte{0})
	h.Write(in[:])
	var sum [sha256.Size]byte
	h.Sum(sum[:0])

	// 48 bits of milliseconds, then the hash's first 80 bits with the
	// version and variant bits overwritten.
	var u [16]byte
	binary.BigEndian.PutUint64(u[:8], uint64(commitTime.UnixMilli())<<16)
	copy(u[6:], sum[:10])
	u[6] = 0x70 | u[6]&0x0f // version 7
	u[8] = 0x80 | u[8]&0x3f // RFC 9562 variant
	return refFormatUUID(u)
}

// refSnapshotEventID returns the deterministic eventId of a row read by the
// snapshot taken at consistent point cp: the same row read again after a
// crash gets the same id. keyValues are the row's primary-key values.
func refSnapshotEventID(source string, cp LSN, table string, keyValues []string, at time.Time) string {
	var b []byte
	b = append(b, "snapshot\x00"...)
	b = append(b, table...)
	for _, v := range keyValues {
		b = append(b, 0)
		b = refAppendJSONString(b, v)
	}
	// The key takes the place of the ordinal: fold it into the commit
	// position's hash input through the source string.
	return refEventID(source+"\x00"+string(b), cp, 0, at)
}

// refFormatUUID writes u in the canonical 8-4-4-4-12 form.
func refFormatUUID(u [16]byte) string {
	var b [36]byte
	hex.Encode(b[0:8], u[0:4])
	b[8] = '-'
	hex.Encode(b[9:13], u[4:6])
	b[13] = '-'
	hex.Encode(b[14:18], u[6:8])
	b[18] = '-'
	hex.Encode(b[19:23], u[8:10])
	b[23] = '-'
	hex.Encode(b[24:], u[10:])
	return string(b[:])
}

// refUnhex decodes one hex digit.
func refUnhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// refParseEventID is ParseEventID as it was, digit by digit.
func refParseEventID(s string) (time.Time, error) {
	if len(s) != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return time.Time{}, fmt.Errorf("%q is not a canonical UUID", s)
	}
	var u [16]byte
	j := 0
	for i := 0; i < len(s); i += 2 {
		if i == 8 || i == 13 || i == 18 || i == 23 {
			i++
		}
		hi, ok1 := refUnhex(s[i])
		lo, ok2 := refUnhex(s[i+1])
		if !ok1 || !ok2 {
			return time.Time{}, fmt.Errorf("%q is not a canonical UUID: bad hex digit", s)
		}
		u[j] = hi<<4 | lo
		j++
	}
	switch {
	case u[6]>>4 != 7:
		return time.Time{}, fmt.Errorf("%q is not a version 7 UUID", s)
	case u[8]>>6 != 2:
		return time.Time{}, fmt.Errorf("%q does not have the RFC 9562 variant", s)
	}
	var ms [8]byte
	copy(ms[2:], u[:6])
	return time.UnixMilli(int64(binary.BigEndian.Uint64(ms[:]))).UTC(), nil
}

// refSchemaID is SchemaID as first written, with fmt.
func refSchemaID(tenantColumn string, cols []Column) string {
	h := sha256.New()
	fmt.Fprintf(h, "tenant %q\n", tenantColumn)
	for _, c := range cols {
		fmt.Fprintf(h, "%q %q %t %t %d %t %d", c.Name, c.Type, c.Enum, c.Array, c.TypMod, c.Key, c.Attnum)
		if c.Missing != nil {
			fmt.Fprintf(h, " %q", *c.Missing)
		}
		h.Write([]byte{'\n'})
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
}
