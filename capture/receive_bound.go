package capture

import (
	"bufio"
	"encoding/binary"
	"io"
	"sync/atomic"
)

// The replication connection reads each protocol message whole: pgproto3
// allocates a buffer of the message's size before capture sees a byte of
// it, and pgoutput sends a change or a logical message as one CopyData.
// Any role may call pg_logical_emit_message('x', 900 MB), so without a
// bound one call costs capture about a gigabyte, and an out-of-memory kill
// on the same WAL at every restart. Capture therefore reads the
// replication connection through a boundedReader: CopyData messages up to
// the record bound plus receiveSlack pass whole; a larger one is replaced
// by a stand-in of a few dozen bytes that keeps its XLogData header (so its
// WAL position) and the first bytes of its pgoutput message (its kind, and
// the relation of a change or the prefix of a logical message), and the
// rest is read in small pieces and dropped. The translator skips such a
// logical message and dead-letters such a change as too large (see
// translator.oversized): a change whose message is over the bound has a
// record over it too, its values being in both, at least once.
//
// The connections that copy tables read rows with a query, each row a
// DataRow message: there a DataRow over the bound is replaced by one of as
// many NULL values, and the reader counts it (takeCut), so that the copy
// dead-letters that row as too large instead of reading its stand-in.

const (
	// receiveSlack is what a change's message may take beyond its values:
	// a few bytes per column and the headers.
	receiveSlack = 1 << 20
	// oversizedKeep is how many bytes of an oversized pgoutput message the
	// stand-in keeps: a change's relation id, a logical message's flags,
	// LSN and (the start of) its prefix.
	oversizedKeep = 64
	// msgOversized is the kind of the stand-in's pgoutput message, one
	// pgoutput never sends. It is followed by the size of the pgoutput
	// message it replaces (4 bytes) and that message's first bytes.
	msgOversized byte = 0
	// xLogDataHeader is the length of an XLogData header: 'w', the WAL
	// start and end, the send time.
	xLogDataHeader = 1 + 8 + 8 + 8
	// dropPiece is the size of the reads that drop an oversized message.
	dropPiece = 64 << 10
)

// boundedReader passes the protocol messages read from r, replacing each
// CopyData message (and, made by newRowBoundedReader, each DataRow) whose
// body is larger than limit by a stand-in (see above). It keeps its place
// across errors, so a read that times out can be repeated, as pgconn does.
// Only the goroutine that reads its connection calls Read; takeCut may be
// called from any.
type boundedReader struct {
	r     io.Reader
	limit int
	rows  bool // also bound DataRow messages

	cut atomic.Int64 // DataRows replaced, not yet taken

	hdr  [5]byte // the header of the next message, nhdr bytes read
	nhdr int
	body int    // bytes of the current message still to pass
	out  []byte // a header or stand-in still to pass

	// an oversized message being read: its size, its first bytes (want of
	// them) and how much of the rest is still to drop
	kind             byte
	size, want, drop int
	head             []byte
	piece            []byte
}

// receiveBuffer is the buffer between a connection and its boundedReader,
// which reads each message's header and body apart: straight from the
// connection, that is two system calls a message (a row of a copy, a
// change), which cost capture more CPU than everything else it did with
// the rows (bench-e2e's profile of a load).
const receiveBuffer = 64 << 10

func newBoundedReader(r io.Reader, limit int) *boundedReader {
	return &boundedReader{r: bufio.NewReaderSize(r, receiveBuffer), limit: limit}
}

// newRowBoundedReader returns a boundedReader that also replaces DataRow
// messages over limit.
func newRowBoundedReader(r io.Reader, limit int) *boundedReader {
	return &boundedReader{r: bufio.NewReaderSize(r, receiveBuffer), limit: limit, rows: true}
}

// takeCut reports whether a DataRow was replaced since the last call. The
// reader reads no further than the message the driver asks for, so after
// a row was received, true means that row is a stand-in.
func (b *boundedReader) takeCut() bool { return b.cut.Swap(0) > 0 }

// Read implements io.Reader.
func (b *boundedReader) Read(p []byte) (int, error) {
	for {
		switch {
		case len(b.out) > 0:
			n := copy(p, b.out)
			b.out = b.out[n:]
			return n, nil
		case b.body > 0:
			n, err := b.r.Read(p[:min(len(p), b.body)])
			b.body -= n
			return n, err
		case b.want > 0:
			if err := b.readOversized(); err != nil {
				return 0, err
			}
		case b.nhdr < len(b.hdr):
			n, err := b.r.Read(b.hdr[b.nhdr:])
			b.nhdr += n
			if err != nil && b.nhdr < len(b.hdr) {
				return 0, err
			}
		default:
			b.nhdr = 0
			bodyLen := int(binary.BigEndian.Uint32(b.hdr[1:])) - 4
			if (b.hdr[0] == 'd' || b.rows && b.hdr[0] == 'D') && bodyLen > b.limit {
				b.kind, b.size, b.want = b.hdr[0], bodyLen, min(bodyLen, xLogDataHeader+oversizedKeep)
				if b.kind == 'D' {
					b.want = min(bodyLen, 2) // the field count
				}
				b.drop = bodyLen - b.want
				b.head = b.head[:0]
				continue
			}
			b.out, b.body = b.hdr[:], max(bodyLen, 0)
		}
	}
}

// readOversized reads the first bytes of an oversized message, then drops
// the rest, then makes the stand-in; it returns at the first error, with
// its progress kept.
func (b *boundedReader) readOversized() error {
	for len(b.head) < b.want {
		if cap(b.head) < b.want {
			b.head = make([]byte, 0, xLogDataHeader+oversizedKeep)
		}
		n, err := b.r.Read(b.head[len(b.head):b.want])
		b.head = b.head[:len(b.head)+n]
		if err != nil {
			return err
		}
	}
	for b.drop > 0 {
		if b.piece == nil {
			b.piece = make([]byte, dropPiece)
		}
		n, err := b.r.Read(b.piece[:min(len(b.piece), b.drop)])
		b.drop -= n
		if err != nil {
			return err
		}
	}
	if b.kind == 'D' {
		b.out = nullRow(b.head)
		b.cut.Add(1)
	} else {
		b.out = standIn(b.head, b.size)
	}
	b.want = 0
	return nil
}

// nullRow returns a DataRow of as many NULL values as the one whose first
// bytes (its field count) are head.
func nullRow(head []byte) []byte {
	var n uint16
	if len(head) == 2 {
		n = binary.BigEndian.Uint16(head)
	}
	msg := make([]byte, 0, 5+2+4*int(n))
	msg = append(msg, 'D')
	msg = binary.BigEndian.AppendUint32(msg, uint32(4+2+4*int(n)))
	msg = binary.BigEndian.AppendUint16(msg, n)
	for range n {
		msg = binary.BigEndian.AppendUint32(msg, 0xFFFFFFFF) // -1: NULL
	}
	return msg
}

// standIn returns the CopyData message that replaces an oversized one of
// size bytes that began with head: head's XLogData header, then a pgoutput
// message of kind msgOversized with the size and the rest of head. A
// message that is not XLogData (or too short to be) is passed as its first
// bytes, which capture refuses as malformed.
func standIn(head []byte, size int) []byte {
	body := head
	if len(head) > xLogDataHeader && head[0] == 'w' {
		body = make([]byte, 0, len(head)+5)
		body = append(body, head[:xLogDataHeader]...)
		body = append(body, msgOversized)
		body = binary.BigEndian.AppendUint32(body, uint32(size-xLogDataHeader))
		body = append(body, head[xLogDataHeader:]...)
	}
	msg := make([]byte, 0, 5+len(body))
	msg = append(msg, 'd')
	msg = binary.BigEndian.AppendUint32(msg, uint32(4+len(body)))
	return append(msg, body...)
}
