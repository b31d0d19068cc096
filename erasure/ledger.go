package erasure

import (
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/walhouse/walhouse/internal/backoff"
	"github.com/walhouse/walhouse/record"
	"github.com/walhouse/walhouse/schema"
)

// Conn is the part of a ClickHouse connection the package uses; a
// clickhouse-go driver.Conn (clickhouse.Open) satisfies it.
type Conn interface {
	Exec(ctx context.Context, query string, args ...any) error
	Query(ctx context.Context, query string, args ...any) (driver.Rows, error)
}

var _ Conn = driver.Conn(nil)

// DefaultRefresh is how often a Ledger reads the ledger table again.
const DefaultRefresh = 5 * time.Second

// DefaultMaxAge is how old, by default, the copy of the ledger a sink
// loads with may be (LedgerConfig.MaxAge): two refresh intervals, so a
// read that fails once, retried within a second, does not stop the loads.
// An erasure waits DefaultSettle, more than this plus an insert, before
// it removes rows.
const DefaultMaxAge = 2 * DefaultRefresh

// DefaultSettle is how long an erasure waits, by default, between
// recording its ledger entry and removing rows (Config.Settle): the
// sinks' DefaultMaxAge plus one refresh interval for an insert started
// with an older copy to finish.
const DefaultSettle = DefaultMaxAge + DefaultRefresh

// ErrLedgerStale marks a copy of the ledger too old to load with: the
// ledger could not be read for longer than LedgerConfig.MaxAge, and an
// erasure recorded meanwhile would be missed. The sink waits, retrying,
// until the ledger is read again.
var ErrLedgerStale = errors.New("the erasure ledger could not be read for too long")

// Ledger is the erasure ledger as a sink reads it: an in-memory copy of
// the ledger table, read at start (Load) and then every refresh interval
// (Run). Erased, Generation, Fresh, WaitFresh and Age are safe for
// concurrent use; all but WaitFresh take no lock and never block.
type Ledger struct {
	conn     Conn
	database string
	keys     *Keys // nil: no key given; fine while the ledger is empty
	refresh  time.Duration
	maxAge   time.Duration
	log      *slog.Logger
	now      func() time.Time
	sleep    func(context.Context, time.Duration) error // backoff.Sleep; tests step a fake clock
	reader   string                                     // the name recorded in ReadersTable ("": none)
	recorded time.Time                                  // the read last recorded there; Load and Run alone use it

	snap atomic.Pointer[snapshot]
	// readDone is closed, and replaced, by every read that works: a
	// WaitFresh wakes on it.
	readDone atomic.Pointer[chan struct{}]
	lastErr  atomic.Pointer[error] // the last read's error; nil after a read that worked
	hashes   sync.Pool             // of hash.Hash, keyed HMACs ready to Reset
}

// LedgerConfig is what NewLedger needs; Conn and Database are required.
type LedgerConfig struct {
	Conn     Conn
	Database string
	// Keys hash the records' values; nil when the sink was given no
	// erasure key, which Load and Run accept only while the ledger is
	// empty.
	Keys *Keys
	// Refresh is how often Run reads the ledger (default DefaultRefresh).
	// An erasure waits for every sink to have read its entry before it
	// removes anything (Config.Settle), so keep them in step.
	Refresh time.Duration
	// MaxAge bounds how old the copy may be that the sink loads with
	// (default 2 × Refresh, more than Refresh): past it Fresh fails and
	// the sink waits until a read works again, so no record is loaded
	// against a ledger that may lack an erasure. An erasure's settle
	// time must exceed it (docs/erasure.md).
	MaxAge time.Duration
	// Reader names this sink in ReadersTable, where the ledger records
	// its MaxAge about once a minute so that an erasure can refuse a
	// settle time not above it; "" records nothing.
	Reader string
	Logger *slog.Logger
}

// NewLedger returns a Ledger; call Load before the sink starts.
func NewLedger(cfg LedgerConfig) (*Ledger, error) {
	if cfg.Conn == nil || cfg.Database == "" {
		return nil, errors.New("erasure ledger: a ClickHouse connection and a database are required")
	}
	refresh := cmp.Or(cfg.Refresh, DefaultRefresh)
	maxAge := cmp.Or(cfg.MaxAge, 2*refresh)
	if refresh < 0 || maxAge <= refresh {
		return nil, fmt.Errorf("erasure ledger: refresh %v and max age %v: want a positive refresh and a max age above it (a copy is at least one refresh old before the next read)", refresh, maxAge)
	}
	l := &Ledger{conn: cfg.Conn, database: cfg.Database, keys: cfg.Keys, refresh: refresh, maxAge: maxAge, now: time.Now, sleep: backoff.Sleep, reader: cfg.Reader,
		log: cmp.Or(cfg.Logger, slog.Default()).With("component", "erasure-ledger")}
	done := make(chan struct{})
	l.readDone.Store(&done)
	if l.keys != nil {
		k := l.keys.hashKey
		l.hashes.New = func() any { return hmac.New(sha256.New, k) }
	}
	return l, nil
}

// snapshot is the ledger at one read: per source table, per column, the
// subjects' hashes with the highest as-of LSN of each.
type snapshot struct {
	tables  map[sourceKey][]columnEntries
	entries int
	// unusable holds the entries left out (made under another key), by
	// table, column, hash and key id.
	unusable map[string]bool
	// fullAt is when the last whole read began; maxRecorded the newest
	// recorded_at seen, where the next incremental read starts (less
	// ledgerOverlap).
	fullAt      time.Time
	maxRecorded time.Time
	// shared: tables and unusable are the previous snapshot's (own).
	shared bool
	// gen numbers the reads (1 for the first); readAt is when the read
	// began, so the copy holds every entry recorded before it.
	gen    uint64
	readAt time.Time
}

type sourceKey struct{ schema, table string }

type columnEntries struct {
	column   string
	subjects map[Hash]record.LSN
}

// Erased reports whether r belongs to an erased subject and was committed
// at or before that erasure's as-of LSN: such a record must not be
// loaded. A record of a table without erasures costs one map lookup; one
// of a table with erasures one HMAC per erased column.
func (l *Ledger) Erased(r *record.Record) bool {
	s := l.snap.Load()
	if s == nil || len(s.tables) == 0 {
		return false
	}
	cols := s.tables[sourceKey{r.Source.Schema, r.Source.Table}]
	if cols == nil {
		return false
	}
	for _, ce := range cols {
		value, ok := "", false
		if ce.column == RowKey {
			value, ok = keyText(r)
		} else if i := columnIndex(r.Columns, ce.column); i >= 0 && i < len(r.Values) && !r.Values[i].Null && !r.Values[i].Unchanged {
			value, ok = r.Values[i].Text, true
		}
		if !ok {
			continue
		}
		m := l.hashes.Get().(hash.Hash)
		m.Reset()
		h := l.keys.hash(m, Subject{Tenant: r.TenantID, Schema: r.Source.Schema, Table: r.Source.Table, Column: ce.column, Value: value})
		l.hashes.Put(m)
		if asOf, ok := ce.subjects[h]; ok && r.CommitLSN <= asOf {
			return true
		}
	}
	return false
}

// keyText returns KeyValue of r's primary key (its key columns other than
// the tenant column, in column order, as ClickHouse's sorting key has
// them).
func keyText(r *record.Record) (string, bool) {
	var texts []string
	for i, c := range r.Columns {
		if !c.Key || c.Name == r.TenantColumn {
			continue
		}
		if i >= len(r.Values) || r.Values[i].Null || r.Values[i].Unchanged {
			return "", false
		}
		texts = append(texts, r.Values[i].Text)
	}
	return KeyValue(texts), len(texts) > 0
}

func columnIndex(cols []record.Column, name string) int {
	for i, c := range cols {
		if c.Name == name {
			return i
		}
	}
	return -1
}

// Generation numbers the copy Erased answers from: it grows with every
// read, so a record checked at one generation need not be checked again
// while the generation stays the same. 0 before the first read.
func (l *Ledger) Generation() uint64 {
	if s := l.snap.Load(); s != nil {
		return s.gen
	}
	return 0
}

// Age returns how long ago the read began that the current copy comes
// from (0 before the first read, which Load does before the sink starts).
func (l *Ledger) Age() time.Duration {
	if s := l.snap.Load(); s != nil {
		return max(l.now().Sub(s.readAt), 0)
	}
	return 0
}

// MaxAge returns the bound on Age past which Fresh fails.
func (l *Ledger) MaxAge() time.Duration { return l.maxAge }

// Fresh returns nil while the copy is recent enough to load with, and an
// error wrapping ErrLedgerStale once it is older than MaxAge (or was never
// read): a record loaded then could be of a subject erased meanwhile.
func (l *Ledger) Fresh() error {
	s := l.snap.Load()
	if s != nil {
		if age := l.now().Sub(s.readAt); age <= l.maxAge {
			return nil
		}
	}
	why := "it was never read"
	if s != nil {
		why = fmt.Sprintf("the last read that worked began %s ago, more than the bound of %s (--erasure-max-age)", l.Age().Round(time.Millisecond), l.maxAge)
	}
	if p := l.lastErr.Load(); p != nil {
		why += fmt.Sprintf("; the last read failed: %v", *p)
	}
	return fmt.Errorf("%w: %s. Loading waits, nothing is committed, until ClickHouse answers the read of %s.%s", ErrLedgerStale, why, l.database, LedgerTable)
}

// WaitFresh returns once the copy is fresh (Fresh returns nil), at once
// if it is, or with ctx's error when ctx ends first. It wakes on every
// read that works, so a caller resumes the moment the ledger is read
// again, not at its next poll.
func (l *Ledger) WaitFresh(ctx context.Context) error {
	for {
		// Taken before the check: a read that lands after it closes this
		// channel.
		done := *l.readDone.Load()
		if l.Fresh() == nil {
			return nil
		}
		select {
		case <-done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Entries returns the number of subjects and tables in the ledger as last
// read.
func (l *Ledger) Entries() int {
	if s := l.snap.Load(); s != nil {
		return s.entries
	}
	return 0
}

// Load reads the ledger (creating its tables if missing). Entries the
// Ledger cannot use (made under another key, or it has none) do not make
// it fail: they are left out, counted (Unusable) and logged, so one row
// written into the ledger cannot stop every sink.
func (l *Ledger) Load(ctx context.Context) error {
	if err := ensureTables(ctx, l.conn, l.database); err != nil {
		return err
	}
	if err := l.read(ctx); err != nil {
		return err
	}
	l.recordReader(ctx)
	return nil
}

// Run reads the ledger every refresh interval, counted from the start of
// one read to the start of the next (the copy's age counts from a read's
// start), until ctx ends. A read that works but took so long (queued
// behind other queries) that the copy it made is already older than
// MaxAge is followed by another at once. A read that fails is logged and
// retried sooner (a second, doubling up to the interval); meanwhile the
// previous copy serves until it is older than MaxAge, and then Fresh
// fails, which makes the sink wait.
func (l *Ledger) Run(ctx context.Context) error {
	failures := 0
	stalled := false // the copy was stale since the last read that left it fresh
	var next time.Time
	if s := l.snap.Load(); s != nil {
		next = s.readAt.Add(l.refresh)
	}
	for {
		if err := l.sleep(ctx, max(next.Sub(l.now()), 0)); err != nil {
			return err
		}
		prev := l.snap.Load()
		err := l.read(ctx)
		// The copy the read replaces may have turned stale while it ran.
		stalled = stalled || prev == nil || l.now().Sub(prev.readAt) > l.maxAge
		switch {
		case err == nil:
			failures = 0
			began := l.snap.Load().readAt
			took := l.now().Sub(began).Round(time.Millisecond)
			next = began.Add(l.refresh) // now or past when the read took that long
			if l.Fresh() != nil {
				stalled = true
				l.log.Warn("erasure ledger read, but the read waited so long that the copy is already too old to load with; reading again at once", "took", took, "max_age", l.maxAge)
			} else if stalled {
				stalled = false
				l.log.Info("erasure ledger read again; loading resumes", "took", took)
			}
			l.recordReader(ctx)
		case ctx.Err() != nil:
			return ctx.Err()
		default:
			failures++
			next = l.now().Add(backoff.Exponential(min(time.Second, l.refresh), l.refresh, failures))
			l.lastErr.Store(&err)
			if fresh := l.Fresh(); fresh != nil {
				stalled = true
				l.log.Error("erasure ledger too old to load with; loading waits until it can be read", "err", fresh, "failed_reads", failures)
			} else {
				l.log.Warn("could not read the erasure ledger; keeping the last copy", "err", err, "age", l.Age().Round(time.Millisecond), "max_age", l.maxAge)
			}
		}
	}
}

// fullReadEvery is how often the ledger is read whole; the reads in
// between take only the entries recorded since the newest one seen, less
// ledgerOverlap.
const fullReadEvery = 10 * time.Minute

// ledgerOverlap is how far back from the newest entry seen an incremental
// read starts: an entry stamped (recorded_at, when its insert began)
// before a newer one but visible only after it — an insert slower than
// this — waits for the next full read.
const ledgerOverlap = time.Minute

func (l *Ledger) read(ctx context.Context) error {
	began := l.now()
	old := l.snap.Load()
	full := old == nil || began.Sub(old.fullAt) >= fullReadEvery
	where := ""
	if !full && !old.maxRecorded.IsZero() {
		// No later than ClickHouse's clock less the overlap either: an
		// entry stamped in the future (a clock stepped back, a row written
		// by hand) must not hide the erasures recorded after it until the
		// next whole read, past their settle time.
		where = fmt.Sprintf(" WHERE recorded_at >= least(fromUnixTimestamp64Micro(CAST(%d AS Int64), 'UTC'), now64(6, 'UTC') - toIntervalMicrosecond(%d))",
			old.maxRecorded.Add(-ledgerOverlap).UnixMicro(), ledgerOverlap.Microseconds())
	}
	rows, err := l.conn.Query(ctx, fmt.Sprintf(
		"SELECT source_schema, source_table, column, subject_hash, max(as_of_lsn), key_id, max(recorded_at) FROM %s.%s%s GROUP BY source_schema, source_table, column, subject_hash, key_id",
		schema.QuoteIdent(l.database), schema.QuoteIdent(LedgerTable), where))
	if err != nil {
		return fmt.Errorf("read the erasure ledger: %w", err)
	}
	defer rows.Close()
	var s *snapshot
	if full {
		s = &snapshot{tables: map[sourceKey][]columnEntries{}, unusable: map[string]bool{}, fullAt: began}
	} else {
		s = old.next() // shares old's maps until an entry changes them
	}
	s.readAt = began
	foreign := map[string]bool{}
	for rows.Next() {
		var (
			sch, tbl, col, hx, keyID string
			asOf                     uint64
			recorded                 time.Time
		)
		if err := rows.Scan(&sch, &tbl, &col, &hx, &asOf, &keyID, &recorded); err != nil {
			return fmt.Errorf("read the erasure ledger: %w", err)
		}
		if recorded.After(s.maxRecorded) {
			s.maxRecorded = recorded
		}
		h, err := ParseHash(hx)
		if l.keys == nil || keyID != l.keys.KeyID() || err != nil {
			// Hashed under a key this sink does not hold (or not a hash
			// walhouse writes): it cannot recognise the subject. Counted
			// and alerted, never fatal: a row anyone wrote into the
			// ledger must not stop every sink.
			foreign[keyID] = true
			if id := strings.Join([]string{sch, tbl, col, hx, keyID}, "\x00"); !s.unusable[id] {
				s.own()
				s.unusable[id] = true
			}
			continue
		}
		s.add(sourceKey{sch, tbl}, col, h, record.LSN(asOf))
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read the erasure ledger: %w", err)
	}
	if old != nil {
		s.gen = old.gen
	}
	s.gen++
	l.snap.Store(s) // Run alone reads after Load, so nothing swaps in between
	l.lastErr.Store(nil)
	done := make(chan struct{})
	close(*l.readDone.Swap(&done))
	if old == nil || old.entries != s.entries {
		l.log.Info("erasure ledger read", "entries", s.entries, "tables", len(s.tables), "whole", full)
	}
	if n := len(s.unusable); n > 0 && (old == nil || len(old.unusable) != n) {
		held := "none"
		if l.keys != nil {
			held = l.keys.KeyID()
		}
		l.log.Error("the erasure ledger has entries this sink cannot use: their subjects' records load again if replayed; give every sink the erasure key the erasures were made with (--erasure-key-file or WALHOUSE_ERASURE_KEY), or remove rows that walhouse did not write",
			"unusable_entries", n, "their_key_ids", slices.Sorted(maps.Keys(foreign)), "key_id_held", held)
	}
	return nil
}

// next returns the snapshot an incremental read starts from: s's entries,
// shared with s until own copies them.
func (s *snapshot) next() *snapshot {
	return &snapshot{tables: s.tables, entries: s.entries, unusable: s.unusable, fullAt: s.fullAt, maxRecorded: s.maxRecorded, shared: true}
}

// own gives s maps of its own before it changes them: the previous
// snapshot is read concurrently (Erased) and never changes.
func (s *snapshot) own() {
	if !s.shared {
		return
	}
	s.shared = false
	tables := make(map[sourceKey][]columnEntries, len(s.tables))
	for k, cols := range s.tables {
		cp := make([]columnEntries, len(cols))
		for i, ce := range cols {
			cp[i] = columnEntries{column: ce.column, subjects: maps.Clone(ce.subjects)}
		}
		tables[k] = cp
	}
	s.tables = tables
	s.unusable = maps.Clone(s.unusable)
}

// add records the subject h of column col of table k with its as-of LSN,
// keeping the highest LSN of a subject erased more than once.
func (s *snapshot) add(k sourceKey, col string, h Hash, asOf record.LSN) {
	cols := s.tables[k]
	i := 0
	for i < len(cols) && cols[i].column != col {
		i++
	}
	if i < len(cols) {
		if prev, ok := cols[i].subjects[h]; ok && prev >= asOf {
			return // known already: nothing to copy
		}
	}
	s.own()
	cols = s.tables[k]
	if i == len(cols) {
		cols = append(cols, columnEntries{column: col, subjects: map[Hash]record.LSN{}})
		s.tables[k] = cols
	}
	if _, ok := cols[i].subjects[h]; !ok {
		s.entries++
	}
	cols[i].subjects[h] = asOf
}

// Unusable returns the number of ledger entries, as last read, that this
// sink cannot use: made under an erasure key it does not hold (or it holds
// none), or not a hash walhouse writes. It loads on; the subjects of those
// entries are not recognised (walhouse_sink_erasure_ledger_unusable_entries,
// alert WalhouseErasureLedgerUnusable).
func (l *Ledger) Unusable() int {
	if s := l.snap.Load(); s != nil {
		return len(s.unusable)
	}
	return 0
}

// chParams returns ctx carrying ClickHouse query parameters.
func chParams(ctx context.Context, params map[string]string) context.Context {
	return ch.Context(ctx, ch.WithParameters(toParams(params)))
}

func toParams(m map[string]string) ch.Parameters {
	p := ch.Parameters{}
	for k, v := range m {
		p[k] = schema.EscapeParam(v)
	}
	return p
}
