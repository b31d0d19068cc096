package verify

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/errgroup"

	"github.com/walhouse/walhouse/record"
	"github.com/walhouse/walhouse/schema"
)

// ErrNotLoaded is returned when a table's load watermark does not reach a
// snapshot's WAL position within the load wait (WithLoadWait): the sink is
// behind or stopped, or the table is being copied. Nothing is reported for
// the table; verify it again later.
var ErrNotLoaded = errors.New("table not loaded up to the snapshot")

// snapshot is an open REPEATABLE READ transaction and the WAL position
// every change it sees precedes.
type snapshot struct {
	conn    *pgx.Conn
	tx      pgx.Tx
	lsn     record.LSN
	standby bool
}

func (s *snapshot) close(ctx context.Context) {
	_ = s.tx.Rollback(ctx)
	_ = s.conn.Close(ctx)
}

// open connects with capture's session settings (so values' text output
// is the text pgoutput sends), starts a read-only REPEATABLE READ
// transaction and reads its WAL position. The position is read inside the
// transaction, after its snapshot is taken, so every transaction the
// snapshot sees committed before it: on a primary the insert position, on
// a standby the replay position.
func (v *Verifier) open(ctx context.Context) (*snapshot, error) {
	conn, err := v.connect(ctx)
	if err != nil {
		return nil, err
	}
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		conn.Close(ctx)
		return nil, fmt.Errorf("begin a REPEATABLE READ transaction: %w", err)
	}
	s := &snapshot{conn: conn, tx: tx}
	var lsn string
	err = tx.QueryRow(ctx, `SELECT pg_is_in_recovery(),
		(CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_insert_lsn() END)::text`).Scan(&s.standby, &lsn)
	if err == nil {
		s.lsn, err = record.ParseLSN(lsn)
	}
	if err != nil {
		s.close(ctx)
		return nil, fmt.Errorf("read the snapshot's WAL position: %w", err)
	}
	return s, nil
}

// connect opens a PostgreSQL connection with capture's session settings
// (capture/source.go: the lossless text forms record/doc.go describes),
// so values read are the text pgoutput sends, and verify's statement
// timeout.
func (v *Verifier) connect(ctx context.Context) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(v.pgURL)
	if err != nil {
		return nil, fmt.Errorf("parse PostgreSQL connection string: %w", err)
	}
	for k, val := range map[string]string{
		"DateStyle": "ISO, YMD", "TimeZone": "UTC", "IntervalStyle": "postgres",
		"extra_float_digits": "3", "bytea_output": "hex", "application_name": "walhouse verify",
		"statement_timeout": strconv.FormatInt(v.cfg.pgTimeout.Milliseconds(), 10),
	} {
		cfg.RuntimeParams[k] = val
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	return conn, nil
}

// loadedLSN returns the table's load watermark: the least lsn over its
// topic's partitions in _walhouse_sync, known only once every partition
// reported (ok false before).
func (v *Verifier) loadedLSN(ctx context.Context, chTable string) (lsn record.LSN, ok bool, err error) {
	qctx := ch.Context(ctx, ch.WithParameters(ch.Parameters{"t": schema.EscapeParam(chTable)}))
	var (
		least    uint64
		reported uint64
		parts    int32
	)
	q := fmt.Sprintf(`SELECT min(lsn), countIf(loaded_through > toDateTime64(0, 6, 'UTC')), max(partitions)
		FROM %s.%s FINAL WHERE source_table = {t:String}`, schema.QuoteIdent(v.cfg.database), schema.QuoteIdent("_walhouse_sync"))
	if err := v.ch.QueryRow(qctx, q).Scan(&least, &reported, &parts); err != nil {
		return 0, false, fmt.Errorf("read the load watermark of %s: %w", chTable, err)
	}
	if parts <= 0 || reported < uint64(parts) {
		return 0, false, nil
	}
	return record.LSN(least), true, nil
}

// waitLoaded waits until the table is loaded through at least lsn.
func (v *Verifier) waitLoaded(ctx context.Context, chTable string, lsn record.LSN) error {
	ctx, cancel := context.WithTimeout(ctx, v.cfg.loadWait)
	defer cancel()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	var have record.LSN
	for {
		l, ok, err := v.loadedLSN(ctx, chTable)
		if err != nil && ctx.Err() == nil {
			return err
		}
		if ok && l >= lsn {
			return nil
		}
		have = l
		select {
		case <-ctx.Done():
			return fmt.Errorf("ClickHouse table %s is loaded through %s, short of the snapshot at %s after %s; is the sink running, or the table being copied? %w",
				chTable, have, lsn, v.cfg.loadWait, ErrNotLoaded)
		case <-tick.C:
		}
	}
}

// suspect is a key that differed in the first check.
type suspect struct {
	keys   []string
	pg, ch *row // nil: no row on that side
}

// Verify compares one table: a REPEATABLE READ snapshot of PostgreSQL
// with ClickHouse FINAL once the table is loaded past the snapshot, bucket
// by bucket; the keys that differ are read again in a later snapshot, and
// only those that differ the same way both times are reported.
func (v *Verifier) Verify(ctx context.Context, src record.Source) (TableResult, error) {
	start := time.Now()
	res := TableResult{Table: src.Schema + "." + src.Table, Lossy: map[string]int64{}}
	snap, err := v.open(ctx)
	if err != nil {
		return res, err
	}
	defer func() { snap.close(context.Background()) }()
	t, err := v.describe(ctx, snap.conn, src)
	if err != nil {
		return res, err
	}
	res.ClickHouse, res.Snapshot, res.Standby = t.chName, snap.lsn, snap.standby
	if err := v.waitLoaded(ctx, t.chName, snap.lsn); err != nil {
		return res, err
	}
	suspects, err := v.scan(ctx, t, snap, &res)
	if err != nil {
		return res, err
	}
	snap.close(ctx)
	if len(suspects) > 0 {
		if err := v.recheck(ctx, t, suspects, &res); err != nil {
			return res, err
		}
	}
	res.VerifiedAt = time.Now().UTC()
	res.Duration = time.Since(start).Round(time.Millisecond).String()
	v.cfg.log.Info("table verified", "table", res.Table, "snapshot", res.Snapshot, "rows", res.RowsChecked, "buckets", res.Buckets,
		"split", res.SplitBuckets, "mismatches", len(res.Mismatches), "notExamined", res.NotExamined, "changedSince", res.ChangedSince, "took", res.Duration)
	return res, nil
}

// pgBucket is a bucket's PostgreSQL rows, read ahead of its comparison.
type pgBucket struct {
	b    bounds
	rows []row
}

// scan compares every bucket of the table and returns the suspects.
// PostgreSQL's side of the buckets is read in order, on the snapshot's
// connection, by one goroutine; ClickHouse's side and the comparison by
// another, a bucket behind: both databases work at once, and at most three
// buckets are held (one being read, one waiting, one compared).
func (v *Verifier) scan(ctx context.Context, t *table, snap *snapshot, res *TableResult) ([]suspect, error) {
	tenants, err := v.tenants(ctx, t, snap)
	if err != nil {
		return nil, err
	}
	g, gctx := errgroup.WithContext(ctx)
	ahead := make(chan pgBucket, 1)
	lossy := map[string]int64{} // the reader's own: res is the comparison's
	g.Go(func() error {
		defer close(ahead)
		return v.readPG(gctx, t, snap, tenants, lossy, ahead)
	})
	var suspects []suspect
	g.Go(func() error {
		for pb := range ahead {
			found, err := v.bucket(gctx, t, pb, snap.lsn, res)
			if err != nil {
				return err
			}
			for _, s := range found {
				if len(suspects) < v.cfg.maxMismatches {
					suspects = append(suspects, s)
				} else {
					res.NotExamined++
				}
			}
		}
		return nil
	})
	err = g.Wait()
	for c, n := range lossy {
		res.Lossy[c] += n
	}
	if err != nil {
		return nil, err
	}
	return suspects, nil
}

// readPG reads the PostgreSQL side of every bucket, tenant by tenant and,
// for a ranged table, key range by key range (each bucket's upper bound is
// its last row's key), paced by --rows-per-second, and sends them to out.
func (v *Verifier) readPG(ctx context.Context, t *table, snap *snapshot, tenants []*string, lossy map[string]int64, out chan<- pgBucket) error {
	conn := snap.tx.Conn().PgConn()
	pace := newPacer(v.cfg.rowsPerSecond)
	var read int64
	for _, tenant := range tenants {
		var lo *string
		for {
			b := bounds{tenant: tenant, lo: lo}
			var (
				rows []row
				err  error
			)
			if t.ranged {
				rows, b.hi, err = t.pgRange(ctx, conn, b, v.cfg.bucketRows, lossy)
			} else {
				where, args := t.pgWhere(b)
				rows, err = t.pgRows(ctx, conn, where, args, v.cfg.maxBucketRows+1, false, lossy)
			}
			if err != nil {
				return err
			}
			if len(rows) > v.cfg.maxBucketRows {
				return fmt.Errorf("%s: a bucket holds more than %d rows in PostgreSQL; its key is not an integer: raise --max-bucket-rows", t.pgRelation(), v.cfg.maxBucketRows)
			}
			select {
			case out <- pgBucket{b: b, rows: rows}:
			case <-ctx.Done():
				return ctx.Err()
			}
			read += int64(len(rows))
			if err := pace.wait(ctx, read); err != nil {
				return err
			}
			if b.hi == nil {
				break
			}
			lo = b.hi
		}
	}
	return nil
}

// tenants lists the tenants of both sides (one nil tenant for a synthetic
// one), in canonical form.
func (v *Verifier) tenants(ctx context.Context, t *table, snap *snapshot) ([]*string, error) {
	if t.synthetic {
		return []*string{nil}, nil
	}
	col, rel := pgx.Identifier{t.tenant.pg}.Sanitize(), t.pgFrom()
	q := fmt.Sprintf("SELECT DISTINCT %s FROM %s", col, rel)
	if t.tenantLeads {
		// A walk of the key's index, one probe per tenant.
		q = fmt.Sprintf(`WITH RECURSIVE ts(v) AS (
			SELECT min(%[1]s) FROM %[2]s
			UNION ALL SELECT (SELECT min(%[1]s) FROM %[2]s WHERE %[1]s > ts.v) FROM ts WHERE ts.v IS NOT NULL)
			SELECT v FROM ts WHERE v IS NOT NULL`, col, rel)
	}
	set := map[string]bool{}
	err := pgQuery(ctx, snap.tx.Conn().PgConn(), q, nil, func(vals [][]byte) error {
		s := string(vals[0])
		c, err := t.tenant.typ.CanonicalText(&s)
		if err != nil {
			return err
		}
		set[c] = true
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list the tenants of %s: %w", rel, err)
	}
	q = fmt.Sprintf("SELECT DISTINCT %s FROM %s.%s", schema.QuoteIdent(t.tenant.ch), schema.QuoteIdent(v.cfg.database), schema.QuoteIdent(t.chName))
	rows, err := v.ch.Query(ch.Context(ctx, ch.WithSettings(ch.Settings{"max_execution_time": v.cfg.chMaxSeconds, "max_memory_usage": v.cfg.chMaxMemory})), q)
	if err != nil {
		return nil, fmt.Errorf("list the tenants of ClickHouse table %s: %w", t.chName, err)
	}
	defer rows.Close()
	for rows.Next() {
		dest := newScan(rows.ColumnTypes()[0])
		if err := rows.Scan(dest); err != nil {
			return nil, fmt.Errorf("list the tenants of ClickHouse table %s: %w", t.chName, err)
		}
		c, err := t.tenant.typ.Canonical(dest)
		if err != nil {
			return nil, err
		}
		set[c] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list the tenants of ClickHouse table %s: %w", t.chName, err)
	}
	out := make([]*string, 0, len(set))
	for k := range set {
		out = append(out, &k)
	}
	slices.SortFunc(out, func(a, b *string) int {
		switch {
		case *a < *b:
			return -1
		case *a > *b:
			return 1
		}
		return 0
	})
	return out, nil
}

// bucket compares one bucket, its PostgreSQL rows read: equal digests
// end it; otherwise its rows are matched by key, which is the split down to
// single rows.
func (v *Verifier) bucket(ctx context.Context, t *table, pb pgBucket, snap record.LSN, res *TableResult) ([]suspect, error) {
	cw, params := t.chWhere(pb.b)
	// ClickHouse holds about PostgreSQL's rows; a few more are room for
	// rows only it has.
	chRows, err := v.chRows(ctx, t, cw, params, v.cfg.maxBucketRows+1, false, false, len(pb.rows)+len(pb.rows)/16+16)
	if err != nil {
		return nil, err
	}
	if len(chRows) > v.cfg.maxBucketRows {
		return nil, fmt.Errorf("%s: a bucket holds more than %d rows in ClickHouse (%d in PostgreSQL); ClickHouse holds many rows PostgreSQL has not, or its key is not an integer: raise --max-bucket-rows",
			t.pgRelation(), v.cfg.maxBucketRows, len(pb.rows))
	}
	res.RowsChecked += int64(len(pb.rows))
	res.Buckets++
	found, changed, split := compareBucket(pb.rows, chRows, snap)
	res.ChangedSince += changed
	if split {
		res.SplitBuckets++
	}
	return found, nil
}

// compareBucket matches a bucket's rows by key. split reports that the
// digests differed. A key whose ClickHouse version is newer than the
// snapshot is changed since, not a suspect.
func compareBucket(pgRows, chRows []row, snap record.LSN) (found []suspect, changed int64, split bool) {
	var pd, cd uint64
	live := 0
	for _, r := range pgRows {
		pd += r.hash
	}
	for _, r := range chRows {
		if !r.deleted {
			cd += r.hash
			live++
		}
	}
	if pd == cd && live == len(pgRows) {
		return nil, 0, false
	}
	byKey := make(map[string]int, len(pgRows))
	for i, r := range pgRows {
		byKey[keyOf(r.keys)] = i
	}
	seen := make([]bool, len(pgRows))
	for i := range chRows {
		c := &chRows[i]
		k := keyOf(c.keys)
		j, inPG := byKey[k]
		var p *row
		if inPG {
			seen[j] = true
			p = &pgRows[j]
		}
		if same(p, c) {
			continue
		}
		if c.version > uint64(snap) {
			changed++
			continue
		}
		found = append(found, suspect{keys: c.keys, pg: p, ch: c})
	}
	for j := range pgRows {
		if !seen[j] {
			found = append(found, suspect{keys: pgRows[j].keys, pg: &pgRows[j]})
		}
	}
	return found, changed, true
}

// same reports whether a key's PostgreSQL row (nil: none) and ClickHouse
// row (nil: none; deleted: a tombstone) agree.
func same(p, c *row) bool {
	switch {
	case p == nil:
		return c == nil || c.deleted
	case c == nil || c.deleted:
		return false
	}
	return p.hash == c.hash && slices.Equal(p.cells, c.cells) && slices.Equal(p.keys, c.keys)
}
