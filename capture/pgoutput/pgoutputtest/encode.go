// Package pgoutputtest encodes pgoutput messages for tests: the row
// changes and Truncate messages capture/pgoutput decodes, built byte by
// byte as PostgreSQL sends them. Only tests import it.
package pgoutputtest

import "encoding/binary"

// Unchanged is the value Tuple encodes as an unchanged TOASTed column.
const Unchanged = "\x00u"

// Tuple encodes a pgoutput TupleData; nil is NULL, a pointer to Unchanged
// an unchanged TOASTed value.
func Tuple(vals ...*string) []byte {
	b := binary.BigEndian.AppendUint16(nil, uint16(len(vals)))
	for _, v := range vals {
		switch {
		case v == nil:
			b = append(b, 'n')
		case *v == Unchanged:
			b = append(b, 'u')
		default:
			b = append(b, 't')
			b = binary.BigEndian.AppendUint32(b, uint32(len(*v)))
			b = append(b, *v...)
		}
	}
	return b
}

// Str returns a pointer to v, a text value for Tuple.
func Str(v string) *string { return &v }

// Msg encodes a pgoutput row change of kind for relation rel from its
// parts (tuples, and the 'K'/'O'/'N' bytes before them).
func Msg(kind byte, rel uint32, parts ...[]byte) []byte {
	b := binary.BigEndian.AppendUint32([]byte{kind}, rel)
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

// Truncate encodes a pgoutput Truncate message of protocol version 1.
func Truncate(opts byte, rels ...uint32) []byte {
	b := binary.BigEndian.AppendUint32([]byte{'T'}, uint32(len(rels)))
	b = append(b, opts)
	for _, r := range rels {
		b = binary.BigEndian.AppendUint32(b, r)
	}
	return b
}
