package record

import "unicode/utf8"

// A value's JSON escapes can make its record six times its size (a control
// character becomes \u00XX), and a key value is written four times (payload,
// old key, Kafka key and the partitionKey field, escaped twice). Capture
// must know that a row's record is over the bound before it writes it: a
// 64 MiB text of control characters would otherwise take about 400 MiB,
// several times over while the buffer grows. The functions below compute
// the exact size of what the encoders write, without writing the values.

// KeyValueSize returns len(key)+len(value) of what AppendKeyValue writes
// for r, without encoding r's values: only the envelope is written, into a
// buffer of its size. Use it before encoding a record that may be over a
// bound, and to size the buffer of one that is not.
func (e *Encoder) KeyValueSize(r *Record) int {
	k, v := encodedSize(r, e, e.version)
	return k + v
}

// JSONSize returns len(AppendJSONVersion(nil, r, version)), without
// encoding r's values.
func JSONSize(r *Record, version int) int {
	_, v := encodedSize(r, nil, checkVersion(version))
	return v
}

// RowSize returns the bytes Encoder.AddRow appends for vals to a row batch
// without rows: the row's array, without a separator.
func RowSize(vals []Value) int {
	n := 2 + max(len(vals)-1, 0) // [ , ]
	for _, v := range vals {
		if v.Null {
			n += len("null")
			continue
		}
		esc, _ := jsonStringSize(v.Text)
		n += 2 + esc
	}
	return n
}

// encodedSize returns the sizes of r's partition key and of its wire
// encoding in the given version (with e when given, as appendRecord). It
// encodes r with every value and the tenant emptied, then adds what each
// value writes where appendRecord and appendPartitionKey put it.
func encodedSize(r *Record, e *Encoder, version int) (key, value int) {
	skel := *r
	skel.TenantID = ""
	skel.Values = emptied(r.Values)
	if r.OldKey != nil {
		skel.OldKey = emptied(r.OldKey)
	}
	if e != nil && !e.fits(&skel) {
		e = nil
	}
	var stack [2048]byte
	key = len(skel.AppendPartitionKey(stack[:0]))
	value = len(appendRecord(stack[:0], &skel, e, version))

	// The tenant: the tenantId field, the Kafka key and the partitionKey
	// field (a JSON string inside a JSON string).
	tEsc, tSpecials := jsonStringSize(r.TenantID)
	key += tEsc
	value += tEsc + tEsc + tSpecials
	for i, c := range r.Columns {
		if i < len(r.Values) {
			v := r.Values[i]
			esc, specials := jsonStringSize(v.Text)
			if c.Key { // the partition key, whatever the value's kind
				key += esc
				value += esc + specials
			}
			if !v.Null && !v.Unchanged {
				value += esc // the payload
			}
		}
		if c.Key && i < len(r.OldKey) && !r.OldKey[i].Null && !r.OldKey[i].Unchanged {
			old, _ := jsonStringSize(r.OldKey[i].Text)
			value += old
		}
	}
	return key, value
}

// emptied returns vals with every text empty, kinds kept.
func emptied(vals []Value) []Value {
	out := make([]Value, len(vals))
	for i, v := range vals {
		out[i] = Value{Null: v.Null, Unchanged: v.Unchanged}
	}
	return out
}

// jsonStringSize returns the length of appendJSONStringBody(nil, s), and
// how many of those bytes are '"' or '\\', each of which takes one byte
// more when the escaped text is escaped again (the partitionKey field).
func jsonStringSize(s string) (n, specials int) {
	i := plainPrefix(s)
	n = i
	for i < len(s) {
		if i+8 <= len(s) && wordIsPlain(load64(s, i)) {
			i += 8
			n += 8
			continue
		}
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c >= 0x20 && c != '"' && c != '\\':
				n++
			case c == '"' || c == '\\':
				n, specials = n+2, specials+2
			case c == '\n' || c == '\r' || c == '\t':
				n, specials = n+2, specials+1
			default:
				n, specials = n+6, specials+1
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1, r == '\u2028', r == '\u2029':
			n, specials = n+6, specials+1
		default:
			n += size
		}
		i += size
	}
	return n, specials
}
