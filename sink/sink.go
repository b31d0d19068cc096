package sink

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walhouse/walhouse/internal/failpoint"
	"github.com/walhouse/walhouse/record"
)

// Batch is records of one source table to be loaded all or nothing: of
// one Kafka partition in offset order, or, with Config.CombinePartitions,
// of several partitions of the table's topic, each partition's in offset
// order (a row's changes all travel in one partition).
type Batch struct {
	Source  record.Source
	Records []*record.Record
	// Skip, when not nil, has one entry per record: true for a record the
	// loader must leave out: of a data subject erased (sink/erasure.go), or
	// a repeat Layer 2 found (filterLive). Such a record keeps its place in
	// Records, whatever the ledger or Layer 2 answer on a rebuild, because
	// a loader derives
	// the names of its inserts from positions in Records (Loadable): a
	// retry, or the same batch rebuilt after a crash, then names each
	// insert as before and carries a subset of what it carried, so an
	// insert of an earlier attempt that landed after all is dropped as a
	// repeat, never loaded twice, and no other record is lost with it.
	Skip []bool
	// Token names the batch by its Kafka positions
	// ("<topic>/<partition>/<first>-<last>", or for several partitions
	// "<topic>/<partition>:<first>-<last>+…"). The sink cuts batches so that
	// a batch retried after a crash has exactly the same records and token;
	// a loader passes it as ClickHouse's insert_deduplication_token so the
	// retry is a no-op even before merges.
	Token string
	// From and To bound the records to load, positions in Records (To 0:
	// all of them). A part of a batch (a faulty record set aside) keeps
	// the batch's Records, Skip and Token and loads a window of them, so
	// each of its inserts that covers a whole insert of the batch is named
	// as that insert, and ClickHouse drops it when it landed before.
	From, To int

	// erasures is the generation of the erasure ledger the batch was last
	// checked against (Erasures.Generation).
	erasures uint64
}

// End returns the position after the last record to load (To, or
// len(Records) when To is 0).
func (b Batch) End() int {
	if b.To == 0 {
		return len(b.Records)
	}
	return b.To
}

// loadable counts the records the loader loads.
func (b Batch) loadable() int {
	n := b.End() - b.From
	if b.Skip != nil {
		for _, skip := range b.Skip[b.From:b.End()] {
			if skip {
				n--
			}
		}
	}
	return n
}

// Loader writes one batch of rows for one table, all or nothing.
type Loader interface {
	Load(ctx context.Context, b Batch) error
}

// ErrPermanent marks a load error that retrying cannot fix, such as a value
// ClickHouse cannot store. Loaders wrap it, with a *RecordError when they
// know which record is at fault.
var ErrPermanent = errors.New("permanent load error")

// RecordError names the record of a batch that a Loader could not load,
// and the further ones the same attempt found it cannot load (More).
type RecordError struct {
	Index int // position in Batch.Records
	Err   error
	// More are further records of the batch that cannot be loaded, each
	// with its cause (their own More empty), after Index in ascending
	// positions. A loader that learns of several at once (the ClickHouse
	// writer's read-back of unchanged TOAST values) names them all, so
	// that the sink sets them aside in one pass rather than finding them
	// one load of the rest at a time.
	More []RecordError
}

// Error names the record by its index in the batch.
func (e *RecordError) Error() string { return fmt.Sprintf("record %d: %v", e.Index, e.Err) }

// Unwrap returns the cause, so errors.Is sees ErrPermanent through it.
func (e *RecordError) Unwrap() error { return e.Err }

// TableError is a load error that concerns a whole table, such as a source
// schema change walhouse cannot apply. The sink stops loading that table at
// the record it could not load (each partition is paused there and its
// offset stays before it, so nothing is lost) and goes on with the others;
// Fix says what an operator does.
type TableError struct {
	Table string
	Err   error
	Fix   string
	// Index is the position in Batch.Records of the first record not
	// loaded; the loader loaded every record before it. Zero when nothing
	// was loaded or the loader cannot tell.
	Index int
}

// Error names the table, the cause and the fix.
func (e *TableError) Error() string {
	return fmt.Sprintf("table %s: %v; to resolve: %s", e.Table, e.Err, e.Fix)
}

// Unwrap returns the cause.
func (e *TableError) Unwrap() error { return e.Err }

// Consumer is what the sink needs of a Kafka consumer-group client;
// kafka.Consumer adapts a *kgo.Client.
type Consumer interface {
	PollRecords(ctx context.Context, maxPollRecords int) kgo.Fetches
	// Commit commits the offsets, each with its metadata, for the group.
	Commit(ctx context.Context, offsets []Offset) error
	AllowRebalance()
	// PauseFetchPartitions stops fetching the partitions (of stopped
	// tables).
	PauseFetchPartitions(topicPartitions map[string][]int32) map[string][]int32
}

// Offset is a committed position with its metadata.
type Offset struct {
	Topic     string
	Partition int32
	Epoch     int32
	At        int64
	Metadata  string
}

// OffsetFetcher reads a group's committed offsets with their metadata;
// *kadm.Client satisfies it.
type OffsetFetcher interface {
	FetchOffsets(ctx context.Context, group string) (kadm.OffsetResponses, error)
}

// DeadLetters receives records that can never be loaded.
type DeadLetters interface {
	Send(ctx context.Context, l record.DeadLetter) error
}

// Config tunes a Sink.
type Config struct {
	// Group is the consumer group the Consumer joined (required: the sink
	// reads its batch intents from the group's committed offsets).
	Group string
	// Logger receives the sink's log lines (default slog.Default()).
	Logger *slog.Logger
	// ProgressInterval is how often the sink logs a progress line (records
	// loaded and their rate, batches, dead letters, consumer lag, stopped
	// tables); default 30s, negative: off.
	ProgressInterval time.Duration
	// MaxBatchRecords bounds the records taken in one poll, so of one batch
	// (default 50,000). How long a batch waits to fill is the client's
	// FetchMaxWait.
	MaxBatchRecords int
	// InsertParallelism is how many partitions of a poll load at the same
	// time (default 1; walhouse sink's --insert-parallelism gives 2), each
	// its own batches in order: with more than one,
	// a partition's decoding and Layer 2 round trips overlap another's
	// insert, and a ClickHouse server runs the inserts in parallel. The
	// embedded engine answers one statement at a time, so there only the
	// sink's own work overlaps.
	InsertParallelism int
	// CombinePartitions makes one insert of the chunks of several
	// partitions of a table that a flush holds (up to MaxBatchRecords
	// rows), where each partition's chunk would otherwise be an insert of
	// its own: fewer, larger inserts, so fewer parts for ClickHouse to
	// merge. The group is part of the flush's intent, so a crash rebuilds
	// it, and its insert token, exactly (group.go). walhouse sink turns it
	// on unless --combine-partitions=false; the zero Config keeps one
	// insert per partition.
	CombinePartitions bool
	// MaxGroupBytes bounds the Kafka bytes (keys and values) of the chunks
	// one combined insert holds (default 32 MiB), as MaxBatchRecords bounds
	// its rows: the members are decoded and inserted together, so a group
	// of partitions holding large values would hold them all in memory at
	// once. A chunk larger than it loads alone.
	MaxGroupBytes int
	// RetryBackoff is the first wait after a failed load; it doubles up to
	// MaxRetryBackoff (defaults 200ms and 30s). Transient errors are retried
	// until the context ends.
	RetryBackoff, MaxRetryBackoff time.Duration
	// PermanentAttempts is how often a record that fails permanently is
	// tried before it goes to the dead letters (default 3).
	PermanentAttempts int
	// DeadLetters takes records that can never be loaded. Without it, such
	// a record stops the sink with an error naming it.
	DeadLetters DeadLetters
	// Dedup is Layer 2 (optional): eventIds already loaded are skipped.
	Dedup Deduper
	// Mismatch says what to do with an eventId reused for another payload.
	Mismatch MismatchMode
	// Metrics receives the sink's measurements (optional).
	Metrics *Metrics
	// Watermarks records load progress for freshness reporting (optional).
	Watermarks Watermarker
	// Positions, when set, gives each partition's bound on positions from
	// the future its start: the newest position loaded from it before
	// (sink/future.go). Without it a partition's first item is bounded
	// only by PostgreSQL's epoch.
	Positions Positions
	// Schemas resolves the schemaId of version 2 records (see package
	// registry). Without it only version 1 records, which carry their
	// columns, can be loaded; version 2 records stop the sink.
	Schemas Schemas
	// TopicPrefix is the pipeline's topic prefix (capture's
	// --topic-prefix). With it, the sink dead-letters every record,
	// heartbeat and truncate marker whose table is not the one its topic
	// belongs to (record.TopicName); without it nothing is checked.
	TopicPrefix string
	// Erasures, when set, is the erasure ledger: records of erased
	// subjects committed before their erasure are left out of the batch
	// when it is built and again before every insert attempt, and no
	// insert is made while the ledger's copy is too old (sink/erasure.go).
	Erasures Erasures
	// AcceptGap, when set, says which partitions may load on after a gap
	// (records Kafka deleted before the sink read them: see Gap), for an
	// operator who copied their table again; the gap is logged and counted
	// all the same. Without it, or when it answers false, loading of the
	// partition stops at the gap.
	AcceptGap func(topic string, partition int32) bool
	// Recopies, when set (walhouse sink --recopy-on-gap), makes a gap ask
	// capture to copy the table again instead of stopping its partition,
	// and holds the table's watermark until the copy is loaded (recopy.go).
	// RecopyBarrier records the partitions that loaded a copy (after a gap
	// or a DDL rewrite), so that the last one sweeps; without it the sink
	// does not sweep. It is set with or without Recopies.
	Recopies      Recopier
	RecopyBarrier RecopyBarrier
	// Admin, when set, tells a jump in a topic an administrator made
	// compacted (compaction's, not a loss) from records Kafka deleted (see
	// gap.go); without it every jump is a loss.
	Admin TopicAdmin
	// Failpoints are the named points where fault tests make the sink
	// crash or fail (package failpoint); nil, the default, turns them off.
	Failpoints *failpoint.Set
}

// Schemas is the schema registry as the sink reads it.
type Schemas interface {
	record.Schemas
	// Refresh reads everything registered until now, so that a schema
	// registered before a record that refers to it is found.
	Refresh(ctx context.Context) error
}

// Sink moves records from a consumer group into a Loader.
type Sink struct {
	consumer Consumer
	offsets  OffsetFetcher
	loader   Loader
	cfg      Config
	log      *slog.Logger

	loaded  atomic.Int64
	dead    atomic.Int64
	batches atomic.Int64
	m       *Metrics
	l2      *layer2
	// decoders holds InsertParallelism decoders, one for each partition
	// loading (a Decoder keeps its buffers between records but is not safe
	// for concurrent use).
	decoders chan *record.Decoder
	anchors  anchors // each partition's newest position (sink/future.go)

	mu      sync.Mutex
	intents map[tp][]intentEnd // partition → chunk ends (and groups) of the flush in flight when it was last committed
	checked map[tp]bool        // partitions whose intent was read since assignment
	marks   map[tp]Watermark
	topicOf map[record.Source]string
	// parts is each topic's partition count, as heartbeats said or, before
	// any did, as Kafka says (partitionCounts).
	parts   map[string]int32
	stopped map[tp]error // partition → why its table stopped there
	revoked map[tp]bool  // partitions revoked since the last poll
	// next is the offset each partition's next record must have: the
	// committed one after an assignment, then the one after the last
	// record read (see gap.go).
	next map[tp]int64
	gaps map[tp]Gap // partitions stopped at a gap
	// recopies are the pending re-copy requests, by table, whose
	// watermarks are held (recopy.go).
	recopies   map[string]record.RecopyRequest
	recopyMu   sync.Mutex // serialises reads of the re-copy topic
	recopyRead time.Time  // when it was last read; recopyMu guards it
	// assigned are partitions assigned since the last poll, whose
	// committed offsets checkAssigned compares with their log starts.
	assigned map[tp]bool
	// compacted caches whether a topic's cleanup.policy compacts (Run's
	// goroutine alone uses it).
	compacted map[string]bool
}

type tp struct {
	topic     string
	partition int32
}

// New returns a Sink. The consumer's client must use manual commits
// (kgo.DisableAutoCommit) and kgo.BlockRebalanceOnPoll, and call the sink's
// OnRevoked from kgo.OnPartitionsRevoked and kgo.OnPartitionsLost, and its
// OnAssigned from kgo.OnPartitionsAssigned.
func New(c Consumer, offsets OffsetFetcher, l Loader, cfg Config) (*Sink, error) {
	if c == nil || offsets == nil || l == nil {
		return nil, errors.New("sink: a consumer, an offset fetcher and a loader are required")
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
	if cfg.PermanentAttempts == 0 {
		cfg.PermanentAttempts = 3
	}
	if cfg.InsertParallelism == 0 {
		cfg.InsertParallelism = 1
	}
	if cfg.MaxGroupBytes == 0 {
		cfg.MaxGroupBytes = 32 << 20
	}
	if cfg.ProgressInterval == 0 {
		cfg.ProgressInterval = 30 * time.Second
	}
	var errs []error
	if cfg.Group == "" {
		errs = append(errs, errors.New("consumer group is empty"))
	}
	if cfg.MaxBatchRecords < 1 {
		errs = append(errs, fmt.Errorf("max batch records %d: must be positive", cfg.MaxBatchRecords))
	}
	if cfg.RetryBackoff < 0 || cfg.MaxRetryBackoff < cfg.RetryBackoff {
		errs = append(errs, fmt.Errorf("durations must be positive and retry backoff %v at most %v", cfg.RetryBackoff, cfg.MaxRetryBackoff))
	}
	if cfg.InsertParallelism < 1 || cfg.InsertParallelism > maxInsertParallelism {
		errs = append(errs, fmt.Errorf("insert parallelism %d: want 1 to %d", cfg.InsertParallelism, maxInsertParallelism))
	}
	if cfg.MaxGroupBytes < 1 {
		errs = append(errs, fmt.Errorf("max group bytes %d: must be positive", cfg.MaxGroupBytes))
	}
	if cfg.PermanentAttempts < 1 {
		errs = append(errs, fmt.Errorf("permanent attempts %d: must be positive", cfg.PermanentAttempts))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("sink configuration: %w", err)
	}
	m := cfg.Metrics
	if m == nil {
		m = NewMetrics(nil)
	}
	s := &Sink{
		consumer: c, offsets: offsets, loader: l, cfg: cfg, m: m,
		log:       cmp.Or(cfg.Logger, slog.Default()).With("component", "sink"),
		intents:   map[tp][]intentEnd{},
		checked:   map[tp]bool{},
		marks:     map[tp]Watermark{},
		topicOf:   map[record.Source]string{},
		parts:     map[string]int32{},
		stopped:   map[tp]error{},
		next:      map[tp]int64{},
		gaps:      map[tp]Gap{},
		recopies:  map[string]record.RecopyRequest{},
		compacted: map[string]bool{},
	}
	if cfg.Dedup != nil {
		s.l2 = &layer2{store: cfg.Dedup, mode: cfg.Mismatch, m: m}
	}
	s.decoders = make(chan *record.Decoder, cfg.InsertParallelism)
	for range cfg.InsertParallelism {
		s.decoders <- new(record.Decoder)
	}
	return s, nil
}

// Loaded returns the number of records loaded since start.
func (s *Sink) Loaded() int64 { return s.loaded.Load() }

// DeadLettered returns the number of records sent to the dead letters.
func (s *Sink) DeadLettered() int64 { return s.dead.Load() }

// OnAssigned notes partitions the group assigned, whose committed offsets
// the sink compares with their log starts before it loads them (gap.go);
// wire it to kgo.OnPartitionsAssigned.
func (s *Sink) OnAssigned(_ context.Context, _ *kgo.Client, assigned map[string][]int32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for t, ps := range assigned {
		for _, p := range ps {
			if s.assigned == nil {
				s.assigned = map[tp]bool{}
			}
			s.assigned[tp{t, p}] = true
		}
	}
}

// OnRevoked forgets what the sink knew about partitions it no longer owns;
// wire it to kgo.OnPartitionsRevoked and kgo.OnPartitionsLost.
func (s *Sink) OnRevoked(_ context.Context, _ *kgo.Client, revoked map[string][]int32) {
	s.cfg.Failpoints.At(failpoint.SinkRevoked)
	s.mu.Lock()
	defer s.mu.Unlock()
	for t, ps := range revoked {
		for _, p := range ps {
			delete(s.checked, tp{t, p})
			delete(s.intents, tp{t, p})
			delete(s.next, tp{t, p})
			delete(s.assigned, tp{t, p})
			if s.revoked == nil {
				s.revoked = map[tp]bool{}
			}
			s.revoked[tp{t, p}] = true
		}
	}
}

// pending is what the sink holds between polls.
type pending struct {
	recs  map[tp][]item
	count int
	polls int  // polls since the oldest record arrived
	pair  bool // the last records of partitions are held for their pair
	// heldAt says, for each partition holding records for their pair,
	// since when its first held record has been held.
	heldAt map[tp]heldMark
}

// heldMark is since when the record at offset has been held.
type heldMark struct {
	offset int64
	at     time.Time
}

// pairWait bounds how long a poll waits while records are held for their
// pair (sameRow), so that held records of a partition with nothing after
// them load after it, as a record waits for its batch to fill (walhouse
// sink's --max-wait defaults to the same).
const pairWait = 500 * time.Millisecond

// maxPairHold bounds how long records wait for their pair when nothing
// follows them (a capture killed between a move's two records, a row
// capture set aside; any later record of the partition, a heartbeat
// included, ends the wait sooner) or no poll brings what does (a fetch
// that keeps failing): after it they load as they are, with a warning.
const maxPairHold = 30 * time.Second

func (p *pending) add(it item) {
	if p.recs == nil {
		p.recs = map[tp][]item{}
	}
	if p.count == 0 {
		p.polls = 0
	}
	k := tp{it.Topic, it.Partition}
	p.recs[k] = append(p.recs[k], it)
	p.count += int(it.rows)
}

// Run consumes until ctx is done or a record can never be loaded (and no
// dead-letter topic is configured).
//
// Each poll's records are loaded and committed before the next poll, and
// rebalances are allowed only between polls, as franz-go's
// BlockRebalanceOnPoll requires: polling again while holding records would
// block a pending rebalance, and with it the commits. Batches grow on the
// broker instead (the client's FetchMinBytes and FetchMaxWait). Only the
// records of an interrupted batch that is not complete yet are held over.
func (s *Sink) Run(ctx context.Context) (err error) {
	// Leave with rebalances allowed, or closing the client would wait for
	// them forever.
	defer s.consumer.AllowRebalance()
	s.log.Info("started", "group", s.cfg.Group, "topic_prefix", s.cfg.TopicPrefix, "max_batch_records", s.cfg.MaxBatchRecords,
		"dedup", s.l2 != nil, "dead_letters", s.cfg.DeadLetters != nil)
	prog := progressLog{every: s.cfg.ProgressInterval, last: time.Now()}
	defer func() { s.logStop(err) }()
	// Pending re-copies hold their tables' watermarks from the first load
	// on: the committed offsets may be past their gaps already.
	if err := s.readRecopies(ctx); err != nil {
		return err
	}
	var p pending
	for {
		prog.maybe(s)
		if err := s.maybeReadRecopies(ctx); err != nil {
			return err
		}
		want := max(s.cfg.MaxBatchRecords-p.count, 1)
		pollCtx, cancelPoll := ctx, context.CancelFunc(func() {})
		if p.pair {
			// Records held for their pair are loaded after pairWait even
			// when nothing follows them.
			pollCtx, cancelPoll = context.WithTimeout(ctx, pairWait)
		}
		fetches := s.consumer.PollRecords(pollCtx, want)
		cancelPoll()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if fetches.IsClientClosed() {
			return errors.New("kafka client closed")
		}
		fetches.EachError(func(topic string, partition int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
				s.log.Warn("fetch error; the client retries", "topic", topic, "partition", partition, "err", err)
			}
		})
		fetches.EachPartition(func(fp kgo.FetchTopicPartition) {
			if n := len(fp.Records); n > 0 {
				lag := max(fp.HighWatermark-fp.Records[n-1].Offset-1, 0)
				s.m.lag.WithLabelValues(fp.Topic, strconv.Itoa(int(fp.Partition))).Set(float64(lag))
				prog.lag[tp{fp.Topic, fp.Partition}] = lag
				s.m.consumed.Add(float64(n))
			}
		})
		p = s.dropRevoked(p)
		if err := s.checkAssigned(ctx); err != nil {
			return err
		}
		fresh := map[tp][]*kgo.Record{}
		fetches.EachRecord(func(r *kgo.Record) {
			// A stopped table's records are read again after a restart, as
			// are those after a gap.
			if k := (tp{r.Topic, r.Partition}); s.stopped[k] == nil && !s.gapped(k) {
				fresh[k] = append(fresh[k], r)
			}
		})
		if len(fresh) > 0 {
			// The committed offsets of partitions new to this member come
			// with their intents; they are the offsets expected first.
			if err := s.readIntents(ctx, fresh); err != nil {
				return err
			}
			fresh, err := s.checkGaps(ctx, fresh)
			if err != nil {
				return err
			}
			for _, rs := range fresh {
				for _, r := range rs {
					p.add(classify(r))
				}
			}
		}
		p.polls++
		if p.count > 0 {
			held := s.holdBack(p.recs, p.polls)
			ready := map[tp][]item{}
			var rest pending
			// A partition's records may end between a row's delete and its
			// re-insert (sameRow): a poll cut at want stops anywhere, and
			// capture's producer may send the two in separate requests. A
			// delete capture marked as the first half of a move
			// (record.HeaderMove) waits for the row that follows it; so
			// does the last record of each partition a poll cut at want
			// brought records of (with the one before when they are such a
			// pair: records of older captures have no mark), which the
			// client has usually fetched already. A quiet partition holds
			// nothing back, and busy ones never hold a quiet one's last
			// record. Records that waited maxPairHold load as they are.
			cut := fetches.NumRecords() == want // PollRecords returns at most want
			now := time.Now()
			for k, rs := range p.recs {
				n := len(rs)
				last := rs[n-1]
				mark, wasHeld := p.heldAt[k]
				wasHeld = wasHeld && mark.offset == rs[0].Offset
				expired := wasHeld && now.Sub(mark.at) > maxPairHold
				switch {
				case held[k]:
					n = 0
				case expired:
					s.log.Warn("records waited for the rest of their row's change longer than it takes to fetch it; loading them as they are (a row whose sorting columns changed may be missing from FINAL until its next batch loads)",
						"topic", k.topic, "partition", k.partition, "offset", mark.offset, "waited", now.Sub(mark.at).Round(time.Millisecond))
				case last.rows != 1:
				case cut && len(fresh[k]) > 0 || last.move:
					n--
					if n > 0 && sameRow(rs[n-1], rs[n]) {
						n--
					}
					rest.pair = true
					if !wasHeld || n > 0 {
						mark = heldMark{offset: rs[n].Offset, at: now}
					}
					if rest.heldAt == nil {
						rest.heldAt = map[tp]heldMark{}
					}
					rest.heldAt[k] = mark
				}
				if n > 0 {
					ready[k] = rs[:n]
				}
				for _, r := range rs[n:] {
					rest.add(r)
				}
			}
			if err := s.flush(ctx, ready); err != nil {
				return err
			}
			if rest.count > 0 {
				rest.polls = p.polls
			}
			p = rest
		}
		s.consumer.AllowRebalance()
	}
}

// dropRevoked forgets held records of partitions revoked since the last
// poll: they were not committed, and their new owner reads them again.
func (s *Sink) dropRevoked(p pending) pending {
	s.mu.Lock()
	revoked := s.revoked
	s.revoked = nil
	s.mu.Unlock()
	if len(revoked) == 0 || p.count == 0 {
		return p
	}
	var out pending
	for k, rs := range p.recs {
		if revoked[k] {
			continue
		}
		for _, r := range rs {
			out.add(r)
		}
	}
	if out.count > 0 {
		out.polls, out.pair, out.heldAt = p.polls, p.pair, p.heldAt
	}
	return out
}
