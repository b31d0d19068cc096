package verify

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/jackc/pgx/v5"
)

// config holds a Verifier's settings; Option functions set them.
type config struct {
	database      string
	bucketRows    int
	maxBucketRows int
	maxMismatches int
	loadWait      time.Duration
	rowsPerSecond int
	pgTimeout     time.Duration
	chMaxSeconds  int
	chMaxMemory   int64
	publication   string
	log           *slog.Logger
}

// Option sets a Verifier setting.
type Option func(*config)

// WithDatabase names the ClickHouse database of the replicated tables
// (required).
func WithDatabase(db string) Option { return func(c *config) { c.database = db } }

// WithBucketRows sets how many PostgreSQL rows a bucket of a table with an
// integer key holds (default 50,000): the rows compared, and held in
// memory, at a time. Each bucket costs a query on each side whose fixed
// part (planning, ClickHouse's FINAL set-up) outweighs reading 10,000
// rows, so smaller buckets cost CPU, not only round trips.
func WithBucketRows(n int) Option { return func(c *config) { c.bucketRows = n } }

// WithMaxBucketRows bounds the rows of one tenant of a table whose key is
// not an integer, which is one bucket (default 1,000,000): a larger one is
// an error rather than unbounded memory.
func WithMaxBucketRows(n int) Option { return func(c *config) { c.maxBucketRows = n } }

// WithMaxMismatches bounds the differing rows examined and reported per
// table and round (default 10,000); more are counted as not examined.
func WithMaxMismatches(n int) Option { return func(c *config) { c.maxMismatches = n } }

// WithLoadWait sets how long to wait for a table's load watermark to pass
// a snapshot's WAL position (default 5 minutes); the table is then
// skipped with ErrNotLoaded.
func WithLoadWait(d time.Duration) Option { return func(c *config) { c.loadWait = d } }

// WithRowsPerSecond limits the PostgreSQL rows read per second (default 0:
// no limit), so a verify of a busy primary costs what the operator allows.
func WithRowsPerSecond(n int) Option { return func(c *config) { c.rowsPerSecond = n } }

// WithStatementTimeout sets PostgreSQL's statement_timeout for verify's
// queries (default 60s).
func WithStatementTimeout(d time.Duration) Option { return func(c *config) { c.pgTimeout = d } }

// WithClickHouseLimits sets the per-query limits of ClickHouse reads:
// max_execution_time in seconds (default 60) and max_memory_usage in bytes
// (default 1 GiB).
func WithClickHouseLimits(seconds int, memory int64) Option {
	return func(c *config) { c.chMaxSeconds, c.chMaxMemory = seconds, memory }
}

// WithPublication names the publication capture streams the tables from
// (default: none). A table it publishes with a row filter (PostgreSQL 15+)
// is compared, and repaired, through the filter: capture copies and
// streams only the rows the filter matches. Without it, or when it does
// not publish the table, a table another publication publishes with a
// row filter is an error rather than compared whole (which would report,
// and repair, rows capture never sends).
func WithPublication(name string) Option { return func(c *config) { c.publication = name } }

// WithLogger sets the logger (default slog.Default()). Logs never hold
// values, only tables, counts and positions.
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.log = l } }

// Verifier compares PostgreSQL tables with their ClickHouse tables. It is
// not safe for concurrent use: it runs one table at a time on its
// PostgreSQL connection.
type Verifier struct {
	pgURL string
	ch    driver.Conn
	cfg   config
}

// New returns a Verifier reading PostgreSQL at pgURL (a primary or a
// standby; connections are opened per table) and ClickHouse through conn.
func New(pgURL string, conn driver.Conn, opts ...Option) (*Verifier, error) {
	cfg := config{
		bucketRows: 50_000, maxBucketRows: 1_000_000, maxMismatches: 10_000,
		loadWait: 5 * time.Minute, pgTimeout: 60 * time.Second,
		chMaxSeconds: 60, chMaxMemory: 1 << 30, log: slog.Default(),
	}
	for _, o := range opts {
		o(&cfg)
	}
	var errs []error
	if cfg.database == "" {
		errs = append(errs, errors.New("verify: the ClickHouse database is not set (WithDatabase)"))
	}
	if _, err := pgx.ParseConfig(pgURL); err != nil {
		errs = append(errs, fmt.Errorf("verify: PostgreSQL connection string: %w", err))
	}
	for _, c := range []struct {
		name string
		v    int64
	}{{"bucket rows", int64(cfg.bucketRows)}, {"max bucket rows", int64(cfg.maxBucketRows)}, {"max mismatches", int64(cfg.maxMismatches)},
		{"ClickHouse max_execution_time", int64(cfg.chMaxSeconds)}, {"ClickHouse max_memory_usage", cfg.chMaxMemory}} {
		if c.v < 1 {
			errs = append(errs, fmt.Errorf("verify: %s is %d; it must be at least 1", c.name, c.v))
		}
	}
	if cfg.rowsPerSecond < 0 || cfg.loadWait <= 0 || cfg.pgTimeout <= 0 {
		errs = append(errs, fmt.Errorf("verify: rows per second %d must not be negative, load wait %s and statement timeout %s must be positive", cfg.rowsPerSecond, cfg.loadWait, cfg.pgTimeout))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return &Verifier{pgURL: pgURL, ch: conn, cfg: cfg}, nil
}
