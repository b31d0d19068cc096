package erasure

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// readerConn answers the ledger's read with an empty ledger and records
// the readers' inserts (their read_at), failing those while fail is set.
type readerConn struct {
	mu       sync.Mutex
	fail     bool
	recorded int
}

func (c *readerConn) Query(context.Context, string, ...any) (driver.Rows, error) {
	return emptyRows{}, nil
}

func (c *readerConn) Exec(ctx context.Context, query string, _ ...any) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !strings.Contains(query, ReadersTable) {
		return fmt.Errorf("unexpected statement %s", query)
	}
	if c.fail {
		return errors.New("ClickHouse refuses the insert")
	}
	c.recorded++
	return nil
}

// A Ledger records its sink in ReadersTable at its first read, then at
// most once a minute; a failed record is tried again at the next read,
// and without a name nothing is recorded.
func TestLedgerRecordsItsReader(t *testing.T) {
	const s = time.Second
	for _, tc := range []struct {
		name   string
		reader string
		reads  []time.Duration // when each read begins
		fail   []bool          // whether recording fails at that read
		want   []bool          // whether each read was recorded
	}{
		{"the first read, then once a minute", "g@host/1",
			[]time.Duration{0, 5 * s, 59 * s, 60 * s, 70 * s, 125 * s},
			nil,
			[]bool{true, false, false, true, false, true}},
		{"a failed record is tried at the next read", "g@host/1",
			[]time.Duration{0, 5 * s, 10 * s},
			[]bool{true, false, false},
			[]bool{false, true, false}},
		{"no name, no record", "",
			[]time.Duration{0, 60 * s},
			nil,
			[]bool{false, false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn := &readerConn{}
			l, err := NewLedger(LedgerConfig{Conn: conn, Database: "db", Reader: tc.reader})
			if err != nil {
				t.Fatal(err)
			}
			start := time.Unix(1000, 0)
			for i, at := range tc.reads {
				l.now = func() time.Time { return start.Add(at) }
				conn.fail = i < len(tc.fail) && tc.fail[i]
				before := conn.recorded
				if err := l.read(context.Background()); err != nil {
					t.Fatal(err)
				}
				l.recordReader(context.Background()) // as Load and Run do after a read
				if got := conn.recorded > before; got != tc.want[i] {
					t.Errorf("read at %v: recorded %v, want %v", at, got, tc.want[i])
				}
			}
		})
	}
}
