package sink

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walhouse/walhouse/record"
)

// Batch is the records of one source table, in Kafka order, to be loaded
// all or nothing.
type Batch struct {
	Source  record.Source
	Records []*record.Record
	// Token identifies the batch by the Kafka positions it was built from.
	// The same positions always give the same token, so a batch retried
	// after a crash can be recognised (ClickHouse insert_deduplication_token).
	Token string
}

// Loader writes one batch of rows for one table, all or nothing.
type Loader interface {
	Load(ctx context.Context, b Batch) error
}

// ErrPermanent marks a load error that retrying cannot fix (for example a
// value ClickHouse cannot store). Loaders wrap it; the sink stops instead of
// retrying forever.
var ErrPermanent = errors.New("permanent load error")

// Consumer is the part of *kgo.Client the sink uses.
type Consumer interface {
	PollRecords(ctx context.Context, maxPollRecords int) kgo.Fetches
	CommitRecords(ctx context.Context, rs ...*kgo.Record) error
	AllowRebalance()
}

// Config tunes a Sink. The zero value is usable.
type Config struct {
	// MaxBatchRecords bounds the records taken in one poll (default 50,000).
	MaxBatchRecords int
	// RetryBackoff is the first wait after a failed load; it doubles up to
	// MaxRetryBackoff (defaults 200ms and 30s). Transient errors are retried
	// until the context ends.
	RetryBackoff, MaxRetryBackoff time.Duration
}

// Sink moves records from a consumer group into a Loader.
type Sink struct {
	consumer Consumer
	loader   Loader
	cfg      Config
	log      *slog.Logger

	loaded  atomic.Int64
	batches atomic.Int64
}

// New returns a Sink. The consumer must be configured with manual commits
// (kgo.DisableAutoCommit) and kgo.BlockRebalanceOnPoll, so that a partition
// is never revoked between loading a batch and committing it.
func New(c Consumer, l Loader, cfg Config) (*Sink, error) {
	if c == nil || l == nil {
		return nil, errors.New("sink: a consumer and a loader are required")
	}
	if cfg.MaxBatchRecords == 0 {
		cfg.MaxBatchRecords = 50_000
	}
	if cfg.RetryBackoff == 0 {
		cfg.RetryBackoff = 200 * time.Millisecond
	}
	if cfg.MaxRetryBackoff == 0 {
		cfg.MaxRetryBackoff = 30 * time.Second
	}
	if cfg.MaxBatchRecords < 1 || cfg.RetryBackoff < 0 || cfg.MaxRetryBackoff < cfg.RetryBackoff {
		return nil, fmt.Errorf("sink configuration: max batch %d must be positive and retry backoff %v at most %v", cfg.MaxBatchRecords, cfg.RetryBackoff, cfg.MaxRetryBackoff)
	}
	return &Sink{consumer: c, loader: l, cfg: cfg, log: slog.Default().With("component", "sink")}, nil
}

// Loaded returns the number of records loaded since start.
func (s *Sink) Loaded() int64 { return s.loaded.Load() }

// Run consumes until ctx is done or a record can never be loaded.
func (s *Sink) Run(ctx context.Context) error {
	for {
		fetches := s.consumer.PollRecords(ctx, s.cfg.MaxBatchRecords)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if fetches.IsClientClosed() {
			return errors.New("kafka client closed")
		}
		var fetchErr error
		fetches.EachError(func(topic string, partition int32, err error) {
			if !errors.Is(err, context.Canceled) {
				s.log.Warn("fetch error; the client retries", "topic", topic, "partition", partition, "err", err)
				fetchErr = err
			}
		})
		_ = fetchErr // the client keeps retrying transient fetch errors by itself
		recs := fetches.Records()
		if len(recs) == 0 {
			s.consumer.AllowRebalance()
			continue
		}
		if err := s.process(ctx, recs); err != nil {
			return err
		}
		s.consumer.AllowRebalance()
	}
}

// process loads one poll's records, table by table, then commits them.
func (s *Sink) process(ctx context.Context, recs []*kgo.Record) error {
	batches, err := buildBatches(recs)
	if err != nil {
		return err
	}
	for _, b := range batches {
		if err := s.loadWithRetry(ctx, b); err != nil {
			return err
		}
		s.loaded.Add(int64(len(b.Records)))
		s.batches.Add(1)
	}
	// Committing is retried like loading: the rows are in ClickHouse, and a
	// failed commit only means they are read and deduplicated again.
	backoff := s.cfg.RetryBackoff
	for {
		err := s.consumer.CommitRecords(ctx, recs...)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		s.log.Warn("commit offsets failed; retrying", "err", err, "backoff", backoff)
		if err := sleep(ctx, backoff); err != nil {
			return err
		}
		backoff = min(2*backoff, s.cfg.MaxRetryBackoff)
	}
}

func (s *Sink) loadWithRetry(ctx context.Context, b Batch) error {
	backoff := s.cfg.RetryBackoff
	for attempt := 1; ; attempt++ {
		start := time.Now()
		err := s.loader.Load(ctx, b)
		if err == nil {
			s.log.Debug("loaded", "table", b.Source.Schema+"."+b.Source.Table, "rows", len(b.Records), "took", time.Since(start))
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if errors.Is(err, ErrPermanent) || errors.Is(err, record.ErrInvalid) {
			return fmt.Errorf("load %s.%s (token %s): %w", b.Source.Schema, b.Source.Table, b.Token, err)
		}
		s.log.Warn("load failed; retrying", "table", b.Source.Schema+"."+b.Source.Table, "rows", len(b.Records), "attempt", attempt, "backoff", backoff, "err", err)
		// Jitter keeps a fleet of sinks from retrying in lockstep.
		if err := sleep(ctx, backoff/2+rand.N(backoff/2+1)); err != nil {
			return err
		}
		backoff = min(2*backoff, s.cfg.MaxRetryBackoff)
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// buildBatches decodes records and groups them by source table, keeping
// Kafka order within each table. Tables are loaded in name order so the
// batches of one poll are deterministic.
func buildBatches(recs []*kgo.Record) ([]Batch, error) {
	type group struct {
		batch  Batch
		ranges map[int32][2]int64 // partition → first and last offset
		topic  string
	}
	groups := map[string]*group{}
	for _, kr := range recs {
		r, err := record.Decode(kr.Value)
		if err != nil {
			return nil, fmt.Errorf("record at %s/%d offset %d cannot be loaded: %w", kr.Topic, kr.Partition, kr.Offset, err)
		}
		g := groups[kr.Topic]
		if g == nil {
			g = &group{batch: Batch{Source: r.Source}, ranges: map[int32][2]int64{}, topic: kr.Topic}
			groups[kr.Topic] = g
		}
		if r.Source.Schema != g.batch.Source.Schema || r.Source.Table != g.batch.Source.Table {
			return nil, fmt.Errorf("%w: topic %s carries records of both %s.%s and %s.%s; give each table its own topic", record.ErrInvalid, kr.Topic, g.batch.Source.Schema, g.batch.Source.Table, r.Source.Schema, r.Source.Table)
		}
		g.batch.Records = append(g.batch.Records, r)
		rg, ok := g.ranges[kr.Partition]
		if !ok {
			rg[0] = kr.Offset
		}
		rg[1] = kr.Offset
		g.ranges[kr.Partition] = rg
	}
	names := make([]string, 0, len(groups))
	for n := range groups {
		names = append(names, n)
	}
	sort.Strings(names)
	out := make([]Batch, 0, len(groups))
	for _, n := range names {
		g := groups[n]
		g.batch.Token = token(g.topic, g.ranges)
		out = append(out, g.batch)
	}
	return out, nil
}

// token names a batch by topic and per-partition offset ranges.
func token(topic string, ranges map[int32][2]int64) string {
	parts := make([]int32, 0, len(ranges))
	for p := range ranges {
		parts = append(parts, p)
	}
	sort.Slice(parts, func(i, j int) bool { return parts[i] < parts[j] })
	var b strings.Builder
	b.WriteString(topic)
	for _, p := range parts {
		rg := ranges[p]
		b.WriteString(":")
		b.WriteString(strconv.Itoa(int(p)))
		b.WriteString("@")
		b.WriteString(strconv.FormatInt(rg[0], 10))
		b.WriteString("-")
		b.WriteString(strconv.FormatInt(rg[1], 10))
	}
	return b.String()
}
