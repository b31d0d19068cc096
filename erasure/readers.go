package erasure

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/walhouse/walhouse/schema"
)

// ReadersTable records the sinks that read the ledger: each one's name,
// its max age (LedgerConfig.MaxAge) and when its last read that worked
// began, written at most once a minute. An erasure refuses to start when
// its settle time does not exceed the largest max age of a sink seen
// recently: it would remove rows before that sink is sure to know the
// entry.
const ReadersTable = "_walhouse_erasure_readers"

const (
	// readerEvery is how often, at most, a Ledger records itself.
	readerEvery = time.Minute
	// readerSeen is how recent a record must be for an erasure to count
	// its sink: ten heartbeats, so a sink restarting or a heartbeat that
	// failed is still counted, and a sink gone for good stops counting.
	readerSeen = 10 * readerEvery
)

// readersDDL creates the table. One row per sink process: ReplacingMergeTree
// keeps its latest heartbeat, and the rows of sinks gone for a day expire.
func readersDDL(database string) string {
	return fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s.%s
(
    reader String,
    max_age_ms UInt64,
    read_at DateTime64(3, 'UTC')
)
ENGINE = ReplacingMergeTree(read_at)
ORDER BY reader
TTL toDateTime(read_at) + INTERVAL 1 DAY`, schema.QuoteIdent(database), schema.QuoteIdent(ReadersTable))
}

// recordReader records the Ledger's name and max age with the start of
// the read of its copy, at most once every readerEvery. A failure is
// logged, not returned: it affects the erasures' check, not what the sink
// loads. It waits at most half a refresh interval (the insert may queue
// behind other queries), so the next read stays on time.
func (l *Ledger) recordReader(ctx context.Context) {
	s := l.snap.Load()
	if l.reader == "" || s == nil || (!l.recorded.IsZero() && s.readAt.Sub(l.recorded) < readerEvery) {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, l.refresh/2)
	defer cancel()
	stmt := fmt.Sprintf("INSERT INTO %s.%s (reader, max_age_ms, read_at) VALUES ({reader:String}, {max_age_ms:UInt64}, {read_at:DateTime64(3, 'UTC')})",
		schema.QuoteIdent(l.database), schema.QuoteIdent(ReadersTable))
	params := map[string]string{"reader": l.reader, "max_age_ms": strconv.FormatInt(l.maxAge.Milliseconds(), 10), "read_at": s.readAt.UTC().Format("2006-01-02 15:04:05.999")}
	if err := l.conn.Exec(chParams(ctx, params), stmt); err != nil {
		l.log.Warn("could not record this sink's erasure max age (erasures check their settle time against it); trying again at the next read", "err", err)
		return
	}
	l.recorded = s.readAt
}

// SettleTooShortError refuses an erasure whose settle time does not exceed
// the max age of a sink that reads the ledger: that sink could insert,
// after the removal, a record it checked against a copy without the entry.
type SettleTooShortError struct {
	Settle time.Duration
	// Reader is the sink with the largest max age, MaxAge that age.
	Reader string
	MaxAge time.Duration
}

func (e *SettleTooShortError) Error() string {
	return fmt.Sprintf("the settle time %v does not exceed the --erasure-max-age %v of sink %s (seen in the last %v): nothing was recorded; give walhouse erase --settle (serve --erasure-settle) above it plus an insert's duration, or lower that sink's --erasure-max-age",
		e.Settle, e.MaxAge, e.Reader, readerSeen)
}

// checkReaders returns *SettleTooShortError when a sink seen recently
// loads with copies of the ledger as old as e's settle time or older.
func (e *Eraser) checkReaders(ctx context.Context) error {
	rows, err := e.conn.Query(ctx, fmt.Sprintf(
		"SELECT reader, max(max_age_ms) AS m FROM %s.%s WHERE read_at > now64(3) - INTERVAL %d SECOND GROUP BY reader ORDER BY m DESC, reader LIMIT 1",
		schema.QuoteIdent(e.database), schema.QuoteIdent(ReadersTable), int(readerSeen.Seconds())))
	if err != nil {
		return fmt.Errorf("read the sinks' erasure max ages (nothing was recorded): %w", err)
	}
	defer rows.Close()
	if !rows.Next() {
		return rows.Err()
	}
	var (
		reader string
		ms     uint64
	)
	if err := rows.Scan(&reader, &ms); err != nil {
		return fmt.Errorf("read the sinks' erasure max ages (nothing was recorded): %w", err)
	}
	if maxAge := time.Duration(ms) * time.Millisecond; maxAge >= e.settle {
		return &SettleTooShortError{Settle: e.settle, Reader: reader, MaxAge: maxAge}
	}
	return rows.Err()
}
