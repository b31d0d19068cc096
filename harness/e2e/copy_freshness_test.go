package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/jackc/pgx/v5"

	"github.com/walhouse/walhouse/harness/testenv"
	"github.com/walhouse/walhouse/query"
)

// TestIntegrationLastSyncAtDuringCopies samples a table's lastSyncAt (read
// as the query API reads it) and its copied rows in ClickHouse every 200 ms
// while a copy loads, and fails if lastSyncAt ever reaches the copy's point
// (a time after the last copied row committed) while copied rows are still
// missing. It does so for the initial copy of a new slot (1,000,000 rows,
// 7 tenants, 4 partitions) and for the online copy of a table added to the
// publication while capture streams, whose rows are also changed during the
// copy (streamed changes then interleave with the copy in every partition).
// Both tables end equal to PostgreSQL in ClickHouse FINAL.
func TestIntegrationLastSyncAtDuringCopies(t *testing.T) {
	p := newPipeline(t)
	const columns = `(tenant_id text, id bigint, v int, note text, PRIMARY KEY (tenant_id, id))`
	initial, qi := p.table("copyfresh", columns)
	added, qa := p.table("addfresh", columns)
	const initialRows, addedRows = 1_000_000, 300_000
	// Rows of ~200 bytes, as in a real table: the sink takes a copy of
	// this size in several polls (a small one fits in one, whose watermarks
	// are written after all of it).
	const note = `repeat(md5(i::text), 4)`
	p.exec(fmt.Sprintf(`INSERT INTO %s SELECT 't' || (i %% 7), i, 0, %s FROM generate_series(1, %d) i`, qi, note, initialRows))
	p.exec(fmt.Sprintf(`INSERT INTO %s SELECT 't' || (i %% 5), i, 0, %s FROM generate_series(1, %d) i`, qa, note, addedRows))
	copyPoint := p.pastPoint()

	// Small row batches and polls make the sink take the copy in about
	// ten polls, each of which records watermarks, as it does with the
	// defaults for tables tens of times larger.
	capture := testenv.Start(t, "capture", walhouseBin, p.captureArgs([]string{initial}, "--partitions", "4", "--snapshot-batch-rows", "10")...)
	sink := p.startSink("--max-batch", "10000")
	p.watchCopy(initial, initialRows, copyPoint, capture, sink)
	waitLog(t, capture, "msg=streaming")

	// Online copy: the table joins while capture streams, and its rows
	// change during the copy, in every partition.
	addPoint := p.pastPoint()
	p.exec(fmt.Sprintf(`ALTER PUBLICATION %s ADD TABLE %s`, pgx.Identifier{p.pub}.Sanitize(), qa))
	stopWriter := p.keepWriting(20*time.Millisecond, func(k int) string {
		return fmt.Sprintf(`UPDATE %s SET v = v + 1 WHERE id %% 50000 = %d`, qa, k%50000)
	})
	p.watchCopy(added, addedRows, addPoint, capture, sink)
	stopWriter()

	for _, tb := range []string{initial, added} {
		pgq := fmt.Sprintf(`SELECT tenant_id, id::text, v::text, note FROM %s AS t ORDER BY 1, t.id`, pgx.Identifier{tb}.Sanitize())
		chq := fmt.Sprintf("SELECT tenant_id, toString(id), toString(v), note FROM `%s`.`%s` FINAL WHERE _is_deleted = 0 ORDER BY tenant_id, id", p.database, tb)
		p.converge(pgq, chq, capture, sink)
	}
}

// pastPoint returns PostgreSQL's clock, read after everything committed so
// far, once that clock has moved 2 s past it. A copy that starts then is
// like one in production, of rows written well before it: a lastSyncAt at
// or after the point claims every one of them, and a watermark that takes
// the copy's own time (less a margin) for its rows' commit time would claim
// them early.
func (p *pipeline) pastPoint() time.Time {
	p.t.Helper()
	var at time.Time
	ctx := context.Background()
	if err := p.pg.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&at); err != nil {
		p.t.Fatal(err)
	}
	if _, err := p.pg.Exec(ctx, "SELECT pg_sleep(2)"); err != nil {
		p.t.Fatal(err)
	}
	return at
}

// watchCopy samples, every 200 ms until the copy of table is loaded and
// its lastSyncAt reached point, the table's lastSyncAt (first) and its rows
// in ClickHouse (then, so that the rows counted are at least those there
// when lastSyncAt was read). Every row of the copy committed before point
// and none is deleted, so a lastSyncAt at or after point while fewer than
// rows keys are in ClickHouse claims rows that are not there.
func (p *pipeline) watchCopy(table string, rows int64, point time.Time, procs ...*testenv.Proc) {
	t := p.t
	t.Helper()
	ctx := context.Background()
	// count() is cheap but counts a row and its later versions until they
	// merge; a claim is checked against the rows' distinct keys.
	countQ := fmt.Sprintf("SELECT count() FROM `%s`.`%s`", p.database, table)
	keysQ := fmt.Sprintf("SELECT count() FROM `%s`.`%s` FINAL", p.database, table)
	var (
		start                 = time.Now()
		samples, loading      int
		loadedAt, claimedAt   time.Duration
		lastErr               error
		deadline              = time.Now().Add(4 * time.Minute)
		tick                  = time.NewTicker(200 * time.Millisecond)
		st                    query.SyncState
		loaded                uint64
		violations            int
		firstViolation, final string
	)
	defer tick.Stop()
	for ; ; <-tick.C {
		requireRunning(t, procs...)
		if time.Now().After(deadline) {
			t.Fatalf("copy of %s not loaded with lastSyncAt at %v after 4 minutes: %d of %d rows, lastSyncAt %v (last error %v)", table, point, loaded, rows, st.LastSyncAt, lastErr)
		}
		var err error
		if st, err = query.ReadSyncState(ctx, p.ch, p.database, table); err != nil {
			lastErr = err
			continue
		}
		claims := st.LastSyncAt != nil && !st.LastSyncAt.Before(point)
		q := countQ
		if claims {
			q = keysQ
		}
		if err := p.ch.QueryRow(ch.Context(ctx), q).Scan(&loaded); err != nil {
			lastErr = err // the table is created with the sink's first batch
			loaded = 0
		}
		samples++
		if int64(loaded) < rows {
			loading++
			if claims {
				violations++
				if firstViolation == "" {
					firstViolation = fmt.Sprintf("at %.1fs lastSyncAt %v with %d of %d rows loaded (partitions: %+v)",
						time.Since(start).Seconds(), st.LastSyncAt.UTC(), loaded, rows, st.Partitions)
				}
			}
			continue
		}
		if loadedAt == 0 {
			loadedAt = time.Since(start)
		}
		if claims {
			claimedAt = time.Since(start)
			final = fmt.Sprintf("lastSyncAt %v", st.LastSyncAt.UTC())
			break
		}
	}
	t.Logf("%s: %d samples, %d while loading; all %d rows loaded after %.1fs, lastSyncAt reached the copy's point (%v) after %.1fs (%s)",
		table, samples, loading, rows, loadedAt.Seconds(), point.UTC(), claimedAt.Seconds(), final)
	if violations > 0 {
		t.Errorf("lastSyncAt of %s claimed the copy's point %v while rows were missing in %d of %d samples; first %s",
			table, point.UTC(), violations, loading, firstViolation)
	}
	if loading < 5 {
		t.Errorf("only %d samples while %s loaded: the test saw too little of the copy to tell", loading, table)
	}
}
