package capture

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// errShort reports a pgoutput message that ends before its fields do.
var errShort = errors.New("pgoutput message is truncated")

// The kinds of pgoutput messages (protocol version 1), their first byte, as
// pglogrepl names them (MessageTypeBegin, ...).
const (
	msgBegin    byte = 'B'
	msgCommit   byte = 'C'
	msgOrigin   byte = 'O'
	msgRelation byte = 'R'
	msgType     byte = 'Y'
	msgInsert   byte = 'I'
	msgUpdate   byte = 'U'
	msgDelete   byte = 'D'
	msgTruncate byte = 'T'
	msgLogical  byte = 'M'
)

// The kinds of a TupleData column.
const (
	tupleNull      byte = 'n' // NULL
	tupleUnchanged byte = 'u' // an unchanged TOAST value, not sent
	tupleText      byte = 't' // the value in text format
	tupleBinary    byte = 'b' // the value in binary format
)

// The tuples of a row change: the new row, and the old one as its replica
// identity (key columns only) or, with REPLICA IDENTITY FULL, whole.
const (
	tupleNew    byte = 'N'
	tupleOldKey byte = 'K'
	tupleOldRow byte = 'O'
)

// replicaIdentityFull is a Relation message's replica identity setting for
// REPLICA IDENTITY FULL (NOTHING: none); columnInIdentity the flag of a
// column that is part of the replica identity.
const (
	replicaIdentityFull    = 'f'
	replicaIdentityNothing = 'n'
	columnInIdentity       = 1
)

// tupleColumn is one column of a pgoutput TupleData. Data aliases the
// message buffer: it is valid only until the next message is received.
type tupleColumn struct {
	Kind byte // tupleNull, tupleUnchanged, tupleText or tupleBinary
	Data []byte
}

// rowChange is a decoded Insert, Update or Delete message. Its slices are
// reused from message to message so the hot path does not allocate.
type rowChange struct {
	Kind       byte // msgInsert, msgUpdate or msgDelete
	RelationID uint32
	// OldKind is tupleOldKey or tupleOldRow when Old is present, else 0.
	OldKind byte
	Old     []tupleColumn
	New     []tupleColumn
}

// decodeRowChange decodes an Insert ('I'), Update ('U') or Delete ('D')
// message of protocol version 1 into c, reusing c's slices. It never panics on
// malformed input.
func decodeRowChange(msg []byte, c *rowChange) error {
	if len(msg) < 5 {
		return errShort
	}
	c.Kind = msg[0]
	c.RelationID = binary.BigEndian.Uint32(msg[1:5])
	c.OldKind = 0
	c.Old = c.Old[:0]
	c.New = c.New[:0]
	rest := msg[5:]
	var err error
	switch c.Kind {
	case msgInsert:
		if len(rest) < 1 || rest[0] != tupleNew {
			return fmt.Errorf("insert message: want 'N' tuple")
		}
		c.New, rest, err = decodeTuple(rest[1:], c.New)
	case msgUpdate:
		if len(rest) < 1 {
			return errShort
		}
		if rest[0] == tupleOldKey || rest[0] == tupleOldRow {
			c.OldKind = rest[0]
			if c.Old, rest, err = decodeTuple(rest[1:], c.Old); err != nil {
				return fmt.Errorf("update message, old tuple: %w", err)
			}
		}
		if len(rest) < 1 || rest[0] != tupleNew {
			return fmt.Errorf("update message: want 'N' tuple")
		}
		c.New, rest, err = decodeTuple(rest[1:], c.New)
	case msgDelete:
		if len(rest) < 1 || (rest[0] != tupleOldKey && rest[0] != tupleOldRow) {
			return fmt.Errorf("delete message: want 'K' or 'O' tuple")
		}
		c.OldKind = rest[0]
		c.Old, rest, err = decodeTuple(rest[1:], c.Old)
	default:
		return fmt.Errorf("message type %q is not a row change", c.Kind)
	}
	if err != nil {
		return err
	}
	if len(rest) != 0 {
		return fmt.Errorf("%c message has %d trailing bytes", c.Kind, len(rest))
	}
	return nil
}

// decodeTuple decodes a TupleData into cols (reused) and returns the rest of
// the buffer.
func decodeTuple(b []byte, cols []tupleColumn) ([]tupleColumn, []byte, error) {
	if len(b) < 2 {
		return cols, nil, errShort
	}
	n := int(binary.BigEndian.Uint16(b))
	b = b[2:]
	for i := 0; i < n; i++ {
		if len(b) < 1 {
			return cols, nil, errShort
		}
		col := tupleColumn{Kind: b[0]}
		b = b[1:]
		switch col.Kind {
		case tupleNull, tupleUnchanged:
		case tupleText, tupleBinary:
			if len(b) < 4 {
				return cols, nil, errShort
			}
			l := binary.BigEndian.Uint32(b)
			b = b[4:]
			if uint64(l) > uint64(len(b)) {
				return cols, nil, errShort
			}
			col.Data = b[:l:l]
			b = b[l:]
		default:
			return cols, nil, fmt.Errorf("tuple column %d has unknown kind %q", i, col.Kind)
		}
		cols = append(cols, col)
	}
	return cols, b, nil
}

// logicalMessage is a decoded pgoutput Message ('M'), the form
// pg_logical_emit_message takes in the stream.
type logicalMessage struct {
	Transactional bool
	LSN           uint64
	Prefix        string
	Content       []byte // aliases the message buffer
}

// decodeLogicalMessage decodes an 'M' message of protocol version 1.
func decodeLogicalMessage(msg []byte) (logicalMessage, error) {
	var m logicalMessage
	if len(msg) < 1+1+8 || msg[0] != msgLogical {
		return m, errShort
	}
	m.Transactional = msg[1] == 1
	m.LSN = binary.BigEndian.Uint64(msg[2:10])
	rest := msg[10:]
	end := -1
	for i, c := range rest {
		if c == 0 {
			end = i
			break
		}
	}
	if end < 0 {
		return m, fmt.Errorf("message prefix is not terminated")
	}
	m.Prefix = string(rest[:end])
	rest = rest[end+1:]
	if len(rest) < 4 {
		return m, errShort
	}
	n := binary.BigEndian.Uint32(rest)
	rest = rest[4:]
	if uint64(n) != uint64(len(rest)) {
		return m, fmt.Errorf("message content length %d, %d bytes left", n, len(rest))
	}
	m.Content = rest
	return m, nil
}
