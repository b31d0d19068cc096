package capture

import (
	"bytes"
	"io"
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"
)

// BenchmarkReceive measures what the bound costs per message of a typical
// size on the replication connection's read path.
func BenchmarkReceive(b *testing.B) {
	msg := xLogData(0x10, insertMsg(7, bytes.Repeat([]byte("v"), 150)))
	stream := bytes.Repeat(msg, 10_000)
	for _, bounded := range []bool{false, true} {
		name := "plain"
		if bounded {
			name = "bounded"
		}
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(msg)))
			var r io.Reader
			var fe *pgproto3.Frontend
			n := 0
			for b.Loop() {
				if n%10_000 == 0 {
					r = bytes.NewReader(stream)
					if bounded {
						r = newBoundedReader(r, 1<<20)
					}
					fe = pgproto3.NewFrontend(r, io.Discard)
				}
				if _, err := fe.Receive(); err != nil {
					b.Fatal(err)
				}
				n++
			}
		})
	}
}
