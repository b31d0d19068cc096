// Package dedup is Layer 2 of walhouse's deduplication: a shared memory, in
// Valkey or Redis, of the eventIds the sink has loaded, each stored with its
// payload hash and a TTL. It catches the duplicates that Kafka redelivery and
// capture restarts produce before they reach ClickHouse.
//
// Every call has a short timeout and no retries: the sink treats a failed
// call as "unknown" and loads the records anyway (fail open), because
// ClickHouse's insert tokens and ReplacingMergeTree (Layer 3) still hold.
package dedup

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Config configures a Store.
type Config struct {
	// Addr is host:port of Valkey or Redis.
	Addr string
	// Password and DB select the database; both optional.
	Password string
	DB       int
	// Prefix starts every key (default "walhouse:dedup:").
	Prefix string
	// TTL is how long an eventId is remembered (default 24h; the
	// EVENT_DEDUP_TTL_HOURS setting of the command line).
	TTL time.Duration
	// Timeout bounds each round trip (default 1s): a slow store must not
	// stall the pipeline.
	Timeout time.Duration
}

// Store remembers loaded eventIds in Valkey/Redis. It is safe for
// concurrent use.
type Store struct {
	rdb        *redis.Client
	prefix     string
	ttl        time.Duration
	timeout    time.Duration
	roundTrips atomic.Int64
}

// New returns a Store; it does not connect until first used, so a store
// that is down at start only means the sink starts in fail-open mode.
func New(cfg Config) (*Store, error) {
	if cfg.Addr == "" {
		return nil, errors.New("dedup: store address is empty (set --dedup-addr or WALHOUSE_REDIS_ADDR, or disable Layer 2 with --dedup-addr=off)")
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
	rdb := redis.NewClient(&redis.Options{
		Addr:         cfg.Addr,
		Password:     cfg.Password,
		DB:           cfg.DB,
		DialTimeout:  cfg.Timeout,
		ReadTimeout:  cfg.Timeout,
		WriteTimeout: cfg.Timeout,
		MaxRetries:   -1, // fail fast: the caller fails open
		PoolSize:     4,
	})
	return &Store{rdb: rdb, prefix: cfg.Prefix, ttl: cfg.TTL, timeout: cfg.Timeout}, nil
}

// Close closes the connections.
func (s *Store) Close() error { return s.rdb.Close() }

// RoundTrips returns how many round trips the store has made, for
// benchmarks.
func (s *Store) RoundTrips() int64 { return s.roundTrips.Load() }

// Lookup returns, for each id, the payload hash stored with it, or "" when
// the id is unknown, in one round trip (MGET).
func (s *Store) Lookup(ctx context.Context, ids []string) ([]string, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	keys := make([]string, len(ids))
	for i, id := range ids {
		keys[i] = s.prefix + id
	}
	s.roundTrips.Add(1)
	vals, err := s.rdb.MGet(ctx, keys...).Result()
	if err != nil {
		return nil, fmt.Errorf("look up %d eventIds in the dedup store: %w", len(ids), err)
	}
	out := make([]string, len(ids))
	for i, v := range vals {
		if str, ok := v.(string); ok {
			out[i] = str
		}
	}
	return out, nil
}

// Remember stores each id with its hash, SET NX EX ttl, pipelined into one
// round trip. An id that is already stored keeps its first hash.
func (s *Store) Remember(ctx context.Context, ids, hashes []string) error {
	if len(ids) != len(hashes) {
		return fmt.Errorf("dedup: %d ids but %d hashes", len(ids), len(hashes))
	}
	if len(ids) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	s.roundTrips.Add(1)
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			p.SetNX(ctx, s.prefix+id, hashes[i], s.ttl)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("remember %d eventIds in the dedup store: %w", len(ids), err)
	}
	return nil
}
