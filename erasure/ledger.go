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
	"sync"
	"sync/atomic"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

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

// Ledger is the erasure ledger as a sink reads it: an in-memory copy of
// the ledger table, read at start (Load) and then every refresh interval
// (Run). Erased is safe for concurrent use and takes no lock.
type Ledger struct {
	conn     Conn
	database string
	keys     *Keys // nil: no key given; fine while the ledger is empty
	refresh  time.Duration
	log      *slog.Logger

	snap   atomic.Pointer[snapshot]
	hashes sync.Pool // of hash.Hash, keyed HMACs ready to Reset
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
	// removes anything (Request.Settle), so keep them in step.
	Refresh time.Duration
	Logger  *slog.Logger
}

// NewLedger returns a Ledger; call Load before the sink starts.
func NewLedger(cfg LedgerConfig) (*Ledger, error) {
	if cfg.Conn == nil || cfg.Database == "" {
		return nil, errors.New("erasure ledger: a ClickHouse connection and a database are required")
	}
	l := &Ledger{conn: cfg.Conn, database: cfg.Database, keys: cfg.Keys, refresh: cmp.Or(cfg.Refresh, DefaultRefresh),
		log: cmp.Or(cfg.Logger, slog.Default()).With("component", "erasure-ledger")}
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

// Entries returns the number of subjects and tables in the ledger as last
// read.
func (l *Ledger) Entries() int {
	if s := l.snap.Load(); s != nil {
		return s.entries
	}
	return 0
}

// Load reads the ledger (creating its tables if missing). It fails when
// the ledger has entries and the Ledger no key, or entries made under
// another key: the sink could not recognise those subjects and would load
// them again.
func (l *Ledger) Load(ctx context.Context) error {
	if err := ensureTables(ctx, l.conn, l.database); err != nil {
		return err
	}
	return l.read(ctx)
}

// Run reads the ledger every refresh interval until ctx ends. A read that
// fails is logged and the previous copy kept (ClickHouse being down stops
// the loads anyway); a ledger the sink cannot use (no key, another key)
// ends Run with an error.
func (l *Ledger) Run(ctx context.Context) error {
	t := time.NewTicker(l.refresh)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		if err := l.read(ctx); err != nil {
			if errors.Is(err, errUnusable) {
				return err
			}
			if ctx.Err() == nil {
				l.log.Warn("could not read the erasure ledger; keeping the last copy", "err", err)
			}
		}
	}
}

var errUnusable = errors.New("the erasure ledger cannot be used")

func (l *Ledger) read(ctx context.Context) error {
	rows, err := l.conn.Query(ctx, fmt.Sprintf(
		"SELECT source_schema, source_table, column, subject_hash, max(as_of_lsn), groupUniqArray(key_id) FROM %s.%s GROUP BY source_schema, source_table, column, subject_hash",
		schema.QuoteIdent(l.database), schema.QuoteIdent(LedgerTable)))
	if err != nil {
		return fmt.Errorf("read the erasure ledger: %w", err)
	}
	defer rows.Close()
	s := &snapshot{tables: map[sourceKey][]columnEntries{}}
	for rows.Next() {
		var (
			sch, tbl, col, hx string
			asOf              uint64
			keyIDs            []string
		)
		if err := rows.Scan(&sch, &tbl, &col, &hx, &asOf, &keyIDs); err != nil {
			return fmt.Errorf("read the erasure ledger: %w", err)
		}
		if l.keys == nil {
			return fmt.Errorf("%w: it has entries, and this process was given no erasure key; give it the key the erasures were made with (--erasure-key-file or WALHOUSE_ERASURE_KEY)", errUnusable)
		}
		for _, id := range keyIDs {
			if id != l.keys.KeyID() {
				return fmt.Errorf("%w: it has entries made under erasure key %s, and this process holds key %s; give every sink and eraser the same key", errUnusable, id, l.keys.KeyID())
			}
		}
		h, err := ParseHash(hx)
		if err != nil {
			return fmt.Errorf("read the erasure ledger: %w", err)
		}
		k := sourceKey{sch, tbl}
		cols := s.tables[k]
		i := 0
		for i < len(cols) && cols[i].column != col {
			i++
		}
		if i == len(cols) {
			cols = append(cols, columnEntries{column: col, subjects: map[Hash]record.LSN{}})
			s.tables[k] = cols
		}
		cols[i].subjects[h] = record.LSN(asOf)
		s.entries++
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read the erasure ledger: %w", err)
	}
	if old := l.snap.Swap(s); old == nil || old.entries != s.entries {
		l.log.Info("erasure ledger read", "entries", s.entries, "tables", len(s.tables))
	}
	return nil
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
