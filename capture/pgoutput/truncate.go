package pgoutput

import (
	"encoding/binary"
	"fmt"
)

// TruncateMessage is a decoded pgoutput Truncate ('T') message.
type TruncateMessage struct {
	Cascade         bool
	RestartIdentity bool
	Relations       []uint32
}

// The option bits of a Truncate message.
const (
	TruncateCascade         = 1
	TruncateRestartIdentity = 2
)

// DecodeTruncate decodes a Truncate message of protocol version 1: the
// number of relations (Int32), the options (Int8) and the relation ids
// (Int32 each). It never panics on malformed input.
func DecodeTruncate(msg []byte) (TruncateMessage, error) {
	var m TruncateMessage
	if len(msg) < 1+4+1 || msg[0] != MessageTypeTruncate {
		return m, ErrShort
	}
	n := binary.BigEndian.Uint32(msg[1:5])
	opts := msg[5]
	rest := msg[6:]
	if uint64(len(rest)) != 4*uint64(n) {
		return m, fmt.Errorf("truncate message names %d relations in %d bytes", n, len(rest))
	}
	if opts&^(TruncateCascade|TruncateRestartIdentity) != 0 {
		return m, fmt.Errorf("truncate message has unknown options %#x", opts)
	}
	m.Cascade = opts&TruncateCascade != 0
	m.RestartIdentity = opts&TruncateRestartIdentity != 0
	m.Relations = make([]uint32, n)
	for i := range m.Relations {
		m.Relations[i] = binary.BigEndian.Uint32(rest[4*i:])
	}
	return m, nil
}
