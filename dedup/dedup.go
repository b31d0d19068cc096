package dedup

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/walhouse/walhouse/internal/redact"
)

// ErrAuth means the store refused the login (WRONGPASS, NOAUTH): a wrong
// user or password, which retrying never fixes.
var ErrAuth = errors.New("the dedup store refused the login")

// Config configures a Store.
type Config struct {
	// Addr is host:port of Valkey or Redis, or a redis:// (rediss:// for
	// TLS) URL, which may carry the user, password and database.
	Addr string
	// Username and Password log in (AUTH; Username for ACL users, empty for
	// the default user), DB selects the database; all optional. Each may be
	// given here or in an Addr URL, not in both.
	Username string
	Password string
	DB       int
	// TLS, when set, connects over TLS with this configuration (an rediss://
	// Addr without it uses the system's CAs).
	TLS *tls.Config
	// Prefix starts every key (default "walhouse:dedup:").
	Prefix string
	// TTL is how long an eventId is remembered (default 24h; the
	// WALHOUSE_DEDUP_TTL_HOURS setting of the command line).
	TTL time.Duration
	// Timeout bounds each round trip (default 1s): a slow store must not
	// stall the pipeline.
	Timeout time.Duration
}

// Store remembers loaded eventIds in Valkey/Redis. It is safe for
// concurrent use.
type Store struct {
	rdb        *redis.Client
	addr       string // host:port, for messages
	prefix     string
	ttl        time.Duration
	timeout    time.Duration
	roundTrips atomic.Int64
}

// New returns a Store; it does not connect until first used, so a store
// that is down at start only means the sink starts in fail-open mode.
func New(cfg Config) (*Store, error) {
	if cfg.Addr == "" {
		return nil, errors.New("dedup: store address is empty (set --dedup-addr or WALHOUSE_DEDUP_ADDR, or disable Layer 2 with --dedup-addr=off)")
	}
	if cfg.Prefix == "" {
		cfg.Prefix = "walhouse:dedup:"
	}
	if cfg.TTL == 0 {
		cfg.TTL = 24 * time.Hour
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = time.Second
	}
	if cfg.TTL < time.Second || cfg.Timeout <= 0 {
		return nil, fmt.Errorf("dedup: TTL %v must be at least 1s and timeout %v positive", cfg.TTL, cfg.Timeout)
	}
	opts, err := options(cfg)
	if err != nil {
		return nil, err
	}
	opts.DialTimeout, opts.ReadTimeout, opts.WriteTimeout = cfg.Timeout, cfg.Timeout, cfg.Timeout
	opts.MaxRetries = -1 // fail fast: the caller fails open
	opts.PoolSize = 4
	return &Store{rdb: redis.NewClient(opts), addr: opts.Addr, prefix: cfg.Prefix, ttl: cfg.TTL, timeout: cfg.Timeout}, nil
}

// options merges an Addr URL with the rest of cfg.
func options(cfg Config) (*redis.Options, error) {
	if !strings.Contains(cfg.Addr, "://") {
		return &redis.Options{Addr: cfg.Addr, Username: cfg.Username, Password: cfg.Password, DB: cfg.DB, TLSConfig: cfg.TLS}, nil
	}
	opts, err := redis.ParseURL(cfg.Addr)
	if err != nil {
		// The error may quote the URL, password included.
		return nil, fmt.Errorf("dedup: store address %s is neither host:port nor a valid redis:// or rediss:// URL", redact.String(cfg.Addr))
	}
	if (cfg.Username != "" && opts.Username != "") || (cfg.Password != "" && opts.Password != "") {
		return nil, fmt.Errorf("dedup: the store address %s holds a user or password and the settings give one too: keep one", redact.String(cfg.Addr))
	}
	if cfg.Username != "" {
		opts.Username = cfg.Username
	}
	if cfg.Password != "" {
		opts.Password = cfg.Password
	}
	if cfg.DB != 0 {
		opts.DB = cfg.DB
	}
	if cfg.TLS != nil {
		opts.TLSConfig = cfg.TLS
	}
	return opts, nil
}

// Ping checks that the store answers and accepts the login, for a check
// at start. A refused login wraps ErrAuth; a certificate that does not
// verify wraps the *tls.CertificateVerificationError.
func (s *Store) Ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*s.timeout)
	defer cancel()
	err := s.rdb.Ping(ctx).Err()
	switch {
	case err == nil:
		return nil
	case redis.HasErrorPrefix(err, "WRONGPASS"), redis.HasErrorPrefix(err, "NOAUTH"):
		return fmt.Errorf("%w at %s: %w", ErrAuth, s.addr, err)
	default:
		return fmt.Errorf("reach the dedup store at %s: %w", s.addr, err)
	}
}

// Close closes the connections.
func (s *Store) Close() error { return s.rdb.Close() }

// RoundTrips returns how many round trips the store has made, for
// benchmarks.
func (s *Store) RoundTrips() int64 { return s.roundTrips.Load() }

// Lookup returns, for each id, the payload hash stored with it, or "" when
// the id is unknown, in one round trip (an HMGET per bucket, pipelined).
func (s *Store) Lookup(ctx context.Context, ids []string) ([]string, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	groups := s.group(ids)
	cmds := make([]*redis.SliceCmd, len(groups))
	s.roundTrips.Add(1)
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, g := range groups {
			cmds[i] = p.HMGet(ctx, g.key, g.fields...)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("look up %d eventIds in the dedup store: %w", len(ids), err)
	}
	out := make([]string, len(ids))
	for i, g := range groups {
		for j, v := range cmds[i].Val() {
			if str, ok := v.(string); ok {
				out[g.at[j]] = str
			}
		}
	}
	return out, nil
}

// Remember stores each id with its hash, one HSET and one EXPIRE per
// bucket, pipelined into one round trip. An id stored again takes the new
// hash: the sink claims only ids its lookup did not find.
func (s *Store) Remember(ctx context.Context, ids, hashes []string) error {
	if len(ids) != len(hashes) {
		return fmt.Errorf("dedup: %d ids but %d hashes", len(ids), len(hashes))
	}
	if len(ids) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	groups := s.group(ids)
	s.roundTrips.Add(1)
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, g := range groups {
			args := make([]any, 0, 2+2*len(g.fields))
			args = append(args, tableMarkerField, tableMarkerValue)
			for j, f := range g.fields {
				args = append(args, f, hashes[g.at[j]])
			}
			p.HSet(ctx, g.key, args...)
			p.Expire(ctx, g.key, s.ttl)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("remember %d eventIds in the dedup store: %w", len(ids), err)
	}
	return nil
}
