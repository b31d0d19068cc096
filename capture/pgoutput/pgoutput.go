package pgoutput

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// ErrShort reports a pgoutput message that ends before its fields do.
var ErrShort = errors.New("pgoutput message is truncated")

// The kinds of pgoutput messages (protocol version 1), their first byte, as
// pglogrepl names them (MessageTypeBegin, ...).
const (
	MessageTypeBegin    byte = 'B'
	MessageTypeCommit   byte = 'C'
	MessageTypeOrigin   byte = 'O'
	MessageTypeRelation byte = 'R'
	MessageTypeType     byte = 'Y'
	MessageTypeInsert   byte = 'I'
	MessageTypeUpdate   byte = 'U'
	MessageTypeDelete   byte = 'D'
	MessageTypeTruncate byte = 'T'
	MessageTypeMessage  byte = 'M'
)

// The kinds of a TupleData column.
const (
	TupleNull      byte = 'n' // NULL
	TupleUnchanged byte = 'u' // an unchanged TOAST value, not sent
	TupleText      byte = 't' // the value in text format
	TupleBinary    byte = 'b' // the value in binary format
)

// The tuples of a row change: the new row, and the old one as its replica
// identity (key columns only) or, with REPLICA IDENTITY FULL, whole.
const (
	TupleNew    byte = 'N'
	TupleOldKey byte = 'K'
	TupleOldRow byte = 'O'
)

// ReplicaIdentityFull is a Relation message's replica identity setting for
// REPLICA IDENTITY FULL (NOTHING: none); ColumnInIdentity the flag of a
// column that is part of the replica identity.
const (
	ReplicaIdentityFull    = 'f'
	ReplicaIdentityNothing = 'n'
	ColumnInIdentity       = 1
)

// TupleColumn is one column of a pgoutput TupleData. Data aliases the
// message buffer: it is valid only until the next message is received.
type TupleColumn struct {
	Kind byte // TupleNull, TupleUnchanged, TupleText or TupleBinary
	Data []byte
}

// RowChange is a decoded Insert, Update or Delete message. Its slices are
// reused from message to message so the hot path does not allocate.
type RowChange struct {
	Kind       byte // MessageTypeInsert, MessageTypeUpdate or MessageTypeDelete
	RelationID uint32
	// OldKind is TupleOldKey or TupleOldRow when Old is present, else 0.
	OldKind byte
	Old     []TupleColumn
	New     []TupleColumn
}

// DecodeRowChange decodes an Insert ('I'), Update ('U') or Delete ('D')
// message of protocol version 1 into c, reusing c's slices. It never panics on
// malformed input.
func DecodeRowChange(msg []byte, c *RowChange) error {
	if len(msg) < 5 {
		return ErrShort
	}
	c.Kind = msg[0]
	c.RelationID = binary.BigEndian.Uint32(msg[1:5])
	c.OldKind = 0
	c.Old = c.Old[:0]
	c.New = c.New[:0]
	rest := msg[5:]
	var err error
	switch c.Kind {
	case MessageTypeInsert:
		if len(rest) < 1 || rest[0] != TupleNew {
			return fmt.Errorf("insert message: want 'N' tuple")
		}
		c.New, rest, err = DecodeTuple(rest[1:], c.New)
	case MessageTypeUpdate:
		if len(rest) < 1 {
			return ErrShort
		}
		if rest[0] == TupleOldKey || rest[0] == TupleOldRow {
			c.OldKind = rest[0]
			if c.Old, rest, err = DecodeTuple(rest[1:], c.Old); err != nil {
				return fmt.Errorf("update message, old tuple: %w", err)
			}
		}
		if len(rest) < 1 || rest[0] != TupleNew {
			return fmt.Errorf("update message: want 'N' tuple")
		}
		c.New, rest, err = DecodeTuple(rest[1:], c.New)
	case MessageTypeDelete:
		if len(rest) < 1 || (rest[0] != TupleOldKey && rest[0] != TupleOldRow) {
			return fmt.Errorf("delete message: want 'K' or 'O' tuple")
		}
		c.OldKind = rest[0]
		c.Old, rest, err = DecodeTuple(rest[1:], c.Old)
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

// DecodeTuple decodes a TupleData into cols (reused) and returns the rest of
// the buffer.
func DecodeTuple(b []byte, cols []TupleColumn) ([]TupleColumn, []byte, error) {
	if len(b) < 2 {
		return cols, nil, ErrShort
	}
	n := int(binary.BigEndian.Uint16(b))
	b = b[2:]
	for i := 0; i < n; i++ {
		if len(b) < 1 {
			return cols, nil, ErrShort
		}
		col := TupleColumn{Kind: b[0]}
		b = b[1:]
		switch col.Kind {
		case TupleNull, TupleUnchanged:
		case TupleText, TupleBinary:
			if len(b) < 4 {
				return cols, nil, ErrShort
			}
			l := binary.BigEndian.Uint32(b)
			b = b[4:]
			if uint64(l) > uint64(len(b)) {
				return cols, nil, ErrShort
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

// LogicalMessage is a decoded pgoutput Message ('M'), the form
// pg_logical_emit_message takes in the stream.
type LogicalMessage struct {
	Transactional bool
	LSN           uint64
	Prefix        string
	Content       []byte // aliases the message buffer
}

// DecodeLogicalMessage decodes an 'M' message of protocol version 1.
func DecodeLogicalMessage(msg []byte) (LogicalMessage, error) {
	var m LogicalMessage
	if len(msg) < 1+1+8 || msg[0] != MessageTypeMessage {
		return m, ErrShort
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
		return m, ErrShort
	}
	n := binary.BigEndian.Uint32(rest)
	rest = rest[4:]
	if uint64(n) != uint64(len(rest)) {
		return m, fmt.Errorf("message content length %d, %d bytes left", n, len(rest))
	}
	m.Content = rest
	return m, nil
}
