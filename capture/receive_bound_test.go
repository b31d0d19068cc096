package capture

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/walhouse/walhouse/capture/pgoutput"
)

// xLogData returns a CopyData message of XLogData at walStart holding the
// pgoutput message msg.
func xLogData(walStart uint64, msg []byte) []byte {
	body := []byte{'w'}
	body = binary.BigEndian.AppendUint64(body, walStart)
	body = binary.BigEndian.AppendUint64(body, walStart+100)
	body = binary.BigEndian.AppendUint64(body, 7)
	body = append(body, msg...)
	return wireMessage('d', body)
}

func wireMessage(kind byte, body []byte) []byte {
	out := binary.BigEndian.AppendUint32([]byte{kind}, uint32(4+len(body)))
	return append(out, body...)
}

// logicalMsg returns a pgoutput 'M' message.
func logicalMsg(prefix string, content []byte) []byte {
	m := []byte{pgoutput.MessageTypeMessage, 0}
	m = binary.BigEndian.AppendUint64(m, 0x1234)
	m = append(append(m, prefix...), 0)
	m = binary.BigEndian.AppendUint32(m, uint32(len(content)))
	return append(m, content...)
}

// insertMsg returns a pgoutput 'I' message of relation rel with one text
// column.
func insertMsg(rel uint32, text []byte) []byte {
	m := binary.BigEndian.AppendUint32([]byte{pgoutput.MessageTypeInsert}, rel)
	m = append(m, pgoutput.TupleNew, 0, 1, pgoutput.TupleText)
	m = binary.BigEndian.AppendUint32(m, uint32(len(text)))
	return append(m, text...)
}

// stingyReader returns at most one byte per read and a timeout before
// every other read, as a connection with read deadlines can: the reader
// above must keep its place across errors.
type stingyReader struct {
	r     io.Reader
	reads int
}

func (s *stingyReader) Read(p []byte) (int, error) {
	s.reads++
	if s.reads%2 == 0 {
		return 0, os.ErrDeadlineExceeded
	}
	return s.r.Read(p[:min(len(p), 1)])
}

// TestBoundedReader passes a stream of protocol messages through the bound:
// messages up to it arrive whole, a larger CopyData arrives as a stand-in
// with its XLogData header, its size and its first bytes, other kinds of
// messages are not touched, also when the underlying reads return a byte
// at a time and time out in between.
func TestBoundedReader(t *testing.T) {
	const limit = 1000
	big := bytes.Repeat([]byte{1}, 5000)
	small := xLogData(0x10, insertMsg(7, []byte("small")))
	overMessage := xLogData(0x20, logicalMsg("x", big))
	overChange := xLogData(0x30, insertMsg(7, big))
	errResp := wireMessage('E', append([]byte("SERROR\x00M"), append(bytes.Repeat([]byte("e"), 2000), 0, 0)...))
	atLimit := xLogData(0x40, logicalMsg("y", make([]byte, limit-xLogDataHeader-16)))
	stream := bytes.Join([][]byte{small, overMessage, overChange, errResp, atLimit, small}, nil)

	for _, tc := range []struct {
		name string
		r    func() io.Reader
	}{
		{"whole reads", func() io.Reader { return bytes.NewReader(stream) }},
		{"a byte at a time, with timeouts", func() io.Reader { return &stingyReader{r: bytes.NewReader(stream)} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fe := pgproto3.NewFrontend(newBoundedReader(tc.r(), limit), io.Discard)
			var got [][]byte
			for {
				msg, err := fe.Receive()
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					continue
				}
				if err != nil {
					if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
						t.Fatal(err)
					}
					break
				}
				switch m := msg.(type) {
				case *pgproto3.CopyData:
					got = append(got, append([]byte(nil), m.Data...))
				case *pgproto3.ErrorResponse:
					if len(m.Message) != 2000 {
						t.Errorf("error response of %d bytes passed as %d", 2000, len(m.Message))
					}
					got = append(got, []byte("E"))
				default:
					t.Fatalf("unexpected %T", msg)
				}
			}
			standIn := func(wal []byte, pgoutput []byte) []byte {
				out := append([]byte(nil), wal[5:5+xLogDataHeader]...)
				out = append(out, msgOversized)
				out = binary.BigEndian.AppendUint32(out, uint32(len(pgoutput)))
				return append(out, pgoutput[:oversizedKeep]...)
			}
			want := [][]byte{
				small[5:],
				standIn(overMessage, logicalMsg("x", big)),
				standIn(overChange, insertMsg(7, big)),
				[]byte("E"),
				atLimit[5:],
				small[5:],
			}
			if len(got) != len(want) {
				t.Fatalf("got %d messages, want %d", len(got), len(want))
			}
			for i := range want {
				if !bytes.Equal(got[i], want[i]) {
					t.Errorf("message %d:\n got %q\nwant %q", i, got[i], want[i])
				}
			}
		})
	}
}

// countingReader counts the reads of the reader it wraps.
type countingReader struct {
	r     io.Reader
	reads int
}

func (c *countingReader) Read(p []byte) (int, error) {
	c.reads++
	return c.r.Read(p)
}

// TestBoundedReaderBuffers: the bound reads a message's header and body
// apart, so it reads its connection through a buffer: a stream of small
// messages costs a read per buffer, not two per message (a system call
// each on a connection).
func TestBoundedReaderBuffers(t *testing.T) {
	const messages = 10_000
	one := xLogData(0x10, insertMsg(7, []byte("a small row")))
	conn := &countingReader{r: bytes.NewReader(bytes.Repeat(one, messages))}
	fe := pgproto3.NewFrontend(newBoundedReader(conn, 1<<20), io.Discard)
	for n := 0; n < messages; n++ {
		if _, err := fe.Receive(); err != nil {
			t.Fatalf("message %d: %v", n, err)
		}
	}
	if want := messages * len(one) / receiveBuffer * 2; conn.reads > max(want, 10) {
		t.Errorf("%d messages of %d bytes took %d reads of the connection, want at most %d", messages, len(one), conn.reads, max(want, 10))
	}
}

// TestBoundedReaderMemory: dropping a message of 64 MiB costs a piece of
// 64 KiB, not the message.
func TestBoundedReaderMemory(t *testing.T) {
	huge := xLogData(0x20, logicalMsg("x", make([]byte, 64<<20)))
	stream := append(huge, xLogData(0x30, insertMsg(7, []byte("after")))...)
	var last []byte
	n := allocated(func() {
		fe := pgproto3.NewFrontend(newBoundedReader(bytes.NewReader(stream), 1<<20), io.Discard)
		for {
			msg, err := fe.Receive()
			if err != nil {
				break
			}
			last = msg.(*pgproto3.CopyData).Data
		}
	})
	if n > 1<<20 {
		t.Errorf("receiving a 64 MiB message over a 1 MiB bound allocated %d KiB", n>>10)
	}
	if !bytes.Contains(last, []byte("after")) {
		t.Errorf("the message after the dropped one arrived as %q", last)
	}
}

// dataRow returns a DataRow message of the given text values.
func dataRow(vals ...[]byte) []byte {
	body := binary.BigEndian.AppendUint16(nil, uint16(len(vals)))
	for _, v := range vals {
		body = binary.BigEndian.AppendUint32(body, uint32(len(v)))
		body = append(body, v...)
	}
	return wireMessage('D', body)
}

// TestBoundedReaderRows: on a copy's connection a DataRow over the bound
// arrives as a row of as many NULLs, and takeCut says so right after that
// row, not before nor after; a CopyData over it is still a stand-in.
func TestBoundedReaderRows(t *testing.T) {
	const limit = 1000
	stream := bytes.Join([][]byte{
		dataRow([]byte("t0"), []byte("1"), []byte("small")),
		dataRow([]byte("t0"), []byte("2"), bytes.Repeat([]byte{1}, 5000)),
		dataRow([]byte("t0"), []byte("3"), []byte("after")),
	}, nil)
	for _, tc := range []struct {
		name string
		r    func() io.Reader
	}{
		{"whole reads", func() io.Reader { return bytes.NewReader(stream) }},
		{"a byte at a time, with timeouts", func() io.Reader { return &stingyReader{r: bytes.NewReader(stream)} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			br := newRowBoundedReader(tc.r(), limit)
			fe := pgproto3.NewFrontend(br, io.Discard)
			var got []string
			for {
				msg, err := fe.Receive()
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					continue
				}
				if err != nil {
					break
				}
				row := msg.(*pgproto3.DataRow)
				line := fmt.Sprintf("%q cut %v", row.Values, br.takeCut())
				got = append(got, line)
			}
			want := []string{
				`["t0" "1" "small"] cut false`,
				`["" "" ""] cut true`,
				`["t0" "3" "after"] cut false`,
			}
			if !slices.Equal(got, want) {
				t.Errorf("got\n\t%s\nwant\n\t%s", strings.Join(got, "\n\t"), strings.Join(want, "\n\t"))
			}
		})
	}
}
