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
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walhouse/walhouse/record"
)

// Batch is the records of one Kafka partition (so of one source table), in
// offset order, to be loaded all or nothing.
type Batch struct {
	Source  record.Source
	Records []*record.Record
	// Token names the batch by its Kafka positions
	// ("<topic>/<partition>/<first>-<last>"). The sink cuts batches so that
	// a batch retried after a crash has exactly the same records and token;
	// a loader passes it as ClickHouse's insert_deduplication_token so the
	// retry is a no-op even before merges.
	Token string
}

// Loader writes one batch of rows for one table, all or nothing.
type Loader interface {
	Load(ctx context.Context, b Batch) error
}

// ErrPermanent marks a load error that retrying cannot fix, such as a value
// ClickHouse cannot store. Loaders wrap it, with a *RecordError when they
// know which record is at fault.
var ErrPermanent = errors.New("permanent load error")

// RecordError names the record of a batch that a Loader could not load.
type RecordError struct {
	Index int // position in Batch.Records
	Err   error
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
	Send(ctx context.Context, l DeadLetter) error
}

// DeadLetter is a record that could not be loaded, with why.
type DeadLetter struct {
	Topic     string
	Partition int32
	Offset    int64
	Key       []byte
	Value     []byte
	Err       error
	FirstSeen time.Time
	Attempts  int
	// Rows is the row count of a whole row batch set aside (its
	// record.HeaderRows), 0 for a single record: a replay must send the
	// header with the value.
	Rows int
	// Reason is a short reason code (record.Reason* or the sink's own),
	// empty when none was recorded.
	Reason string
	// The fields below are read from the dead-letter topic
	// (ParseDeadLetter), not written by the sink.

	// Origin is "capture" or "sink": who set the record aside.
	Origin string
	// Table, PrimaryKey and CommitLSN describe a change capture set aside
	// (record.HeaderDLTable, HeaderDLPrimaryKey, HeaderDLCommitLSN).
	Table, PrimaryKey string
	CommitLSN         record.LSN
	// ValueDropped is the size of a value the dead-letter topic could not
	// hold, which the dead letter lacks (see HeaderValueDropped); 0 when
	// it has its value.
	ValueDropped int
}

// Config tunes a Sink.
type Config struct {
	// Group is the consumer group the Consumer joined (required: the sink
	// reads its batch intents from the group's committed offsets).
	Group string
	// MaxBatchRecords bounds the records taken in one poll, so of one batch
	// (default 50,000). How long a batch waits to fill is the client's
	// FetchMaxWait.
	MaxBatchRecords int
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
	// Schemas resolves the schemaId of version 2 records (see package
	// registry). Without it only version 1 records, which carry their
	// columns, can be loaded; version 2 records stop the sink.
	Schemas Schemas
	// TopicPrefix is the pipeline's topic prefix (capture's
	// --topic-prefix). With it, the sink dead-letters every record,
	// heartbeat and truncate marker whose table is not the one its topic
	// belongs to (record.TopicName); without it nothing is checked.
	TopicPrefix string
	// Fault, when set, is called at named points of a flush ("loaded":
	// after the inserts, before the offset commit). Fault tests use it to
	// kill the process exactly there.
	Fault func(point string)
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
	dec     record.Decoder // only Run's goroutine decodes

	mu      sync.Mutex
	intents map[tp][]int64 // partition → chunk ends of the flush in flight when it was last committed
	checked map[tp]bool    // partitions whose intent was read since assignment
	marks   map[tp]Watermark
	topicOf map[record.Source]string
	stopped map[tp]error // partition → why its table stopped there
	revoked map[tp]bool  // partitions revoked since the last poll
}

type tp struct {
	topic     string
	partition int32
}

// New returns a Sink. The consumer's client must use manual commits
// (kgo.DisableAutoCommit) and kgo.BlockRebalanceOnPoll, and call the sink's
// OnRevoked from kgo.OnPartitionsRevoked and kgo.OnPartitionsLost.
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
		log:     slog.Default().With("component", "sink"),
		intents: map[tp][]int64{},
		checked: map[tp]bool{},
		marks:   map[tp]Watermark{},
		topicOf: map[record.Source]string{},
		stopped: map[tp]error{},
	}
	if cfg.Dedup != nil {
		s.l2 = &layer2{store: cfg.Dedup, mode: cfg.Mismatch, m: m}
	}
	return s, nil
}

// Loaded returns the number of records loaded since start.
func (s *Sink) Loaded() int64 { return s.loaded.Load() }

// DeadLettered returns the number of records sent to the dead letters.
func (s *Sink) DeadLettered() int64 { return s.dead.Load() }

// OnRevoked forgets what the sink knew about partitions it no longer owns;
// wire it to kgo.OnPartitionsRevoked and kgo.OnPartitionsLost.
func (s *Sink) OnRevoked(_ context.Context, _ *kgo.Client, revoked map[string][]int32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for t, ps := range revoked {
		for _, p := range ps {
			delete(s.checked, tp{t, p})
			delete(s.intents, tp{t, p})
			if s.revoked == nil {
				s.revoked = map[tp]bool{}
			}
			s.revoked[tp{t, p}] = true
		}
	}
}

// intentPrefix marks commit metadata written by the sink: the last offset
// of every chunk of the flush in flight, comma-separated, so a restart cuts
// exactly the same chunks (and insert tokens) however often it crashes.
const intentPrefix = "walhouse:batch-end="

// pending is what the sink holds between polls.
type pending struct {
	recs  map[tp][]*kgo.Record
	count int
	polls int // polls since the oldest record arrived
}

func (p *pending) add(r *kgo.Record) {
	if p.recs == nil {
		p.recs = map[tp][]*kgo.Record{}
	}
	if p.count == 0 {
		p.polls = 0
	}
	k := tp{r.Topic, r.Partition}
	p.recs[k] = append(p.recs[k], r)
	p.count += rowsIn(r)
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
func (s *Sink) Run(ctx context.Context) error {
	// Leave with rebalances allowed, or closing the client would wait for
	// them forever.
	defer s.consumer.AllowRebalance()
	var p pending
	for {
		fetches := s.consumer.PollRecords(ctx, max(s.cfg.MaxBatchRecords-p.count, 1))
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
				s.m.lag.WithLabelValues(fp.Topic, strconv.Itoa(int(fp.Partition))).Set(float64(fp.HighWatermark - fp.Records[n-1].Offset - 1))
				s.m.consumed.Add(float64(n))
			}
		})
		p = s.dropRevoked(p)
		fetches.EachRecord(func(r *kgo.Record) {
			if s.stopped[tp{r.Topic, r.Partition}] == nil { // a stopped table's records are read again after a restart
				p.add(r)
			}
		})
		p.polls++
		if p.count > 0 {
			if err := s.readIntents(ctx, p.recs); err != nil {
				return err
			}
			held := s.holdBack(p.recs, p.polls)
			ready := map[tp][]*kgo.Record{}
			var rest pending
			for k, rs := range p.recs {
				if held[k] {
					for _, r := range rs {
						rest.add(r)
					}
				} else {
					ready[k] = rs
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
		out.polls = p.polls
	}
	return out
}

// flush loads everything pending, partition by partition, and commits.
func (s *Sink) flush(ctx context.Context, recs map[tp][]*kgo.Record) error {
	if len(recs) == 0 {
		return nil
	}
	keys := make([]tp, 0, len(recs))
	for k := range recs {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].topic != keys[j].topic {
			return keys[i].topic < keys[j].topic
		}
		return keys[i].partition < keys[j].partition
	})
	var chunks [][]*kgo.Record
	for _, k := range keys {
		chunks = append(chunks, s.cut(k, recs[k])...)
	}
	// Record the intent (the last offset of each partition's first chunk)
	// before loading: a sink that crashes after loading but before
	// committing restarts with exactly this chunk, so its insert token
	// matches and ClickHouse drops the repeat.
	if err := s.commit(ctx, chunks, true); err != nil {
		return err
	}
	loaded := chunks[:0:0]
	for _, c := range chunks {
		k := tp{c[0].Topic, c[0].Partition}
		if s.stopped[k] != nil {
			continue
		}
		err := s.loadChunk(ctx, c)
		var te *TableError
		if errors.As(err, &te) {
			// Commit what was loaded before the record the table stopped
			// at: once an operator rebuilt the table, loading resumes
			// exactly at the change.
			var at *stopAt
			if errors.As(err, &at) {
				if i := sort.Search(len(c), func(i int) bool { return c[i].Offset >= at.next }); i > 0 {
					loaded = append(loaded, c[:i])
				}
			}
			s.stopTable(k, te)
			continue
		}
		if err != nil {
			return err
		}
		loaded = append(loaded, c)
	}
	if s.cfg.Fault != nil {
		s.cfg.Fault("loaded")
	}
	if len(loaded) == 0 {
		return nil
	}
	if err := s.commit(ctx, loaded, false); err != nil {
		return err
	}
	s.writeMarks(ctx)
	return nil
}

// stopTable stops loading one table in one partition: the partition is
// paused, its records from the failing one on are not committed, and the
// reason is logged for the operator. The table's other partitions load up
// to the same change and stop there too.
func (s *Sink) stopTable(k tp, te *TableError) {
	first := true
	for o := range s.stopped {
		if o.topic == k.topic {
			first = false
		}
	}
	s.stopped[k] = te
	s.consumer.PauseFetchPartitions(map[string][]int32{k.topic: {k.partition}})
	if first {
		s.m.stopped.Inc()
	}
	s.log.Error("stopped loading a table; the others go on. Its records stay in Kafka and load once resolved", "topic", k.topic, "partition", k.partition, "table", te.Table, "err", te.Err, "resolve", te.Fix)
}

// stopAt is a TableError of a chunk whose records before offset next are
// loaded.
type stopAt struct {
	te   *TableError
	next int64
}

func (e *stopAt) Error() string { return e.te.Error() }
func (e *stopAt) Unwrap() error { return e.te }

// readIntents learns, for partitions seen for the first time since their
// assignment, where the batch in flight at the last crash ended.
func (s *Sink) readIntents(ctx context.Context, recs map[tp][]*kgo.Record) error {
	s.mu.Lock()
	need := false
	for k := range recs {
		if !s.checked[k] {
			need = true
		}
	}
	s.mu.Unlock()
	if !need {
		return nil
	}
	var resp kadm.OffsetResponses
	err := s.retry(ctx, "read committed offsets", func() error {
		var err error
		resp, err = s.offsets.FetchOffsets(ctx, s.cfg.Group)
		return err
	})
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for k := range recs {
		if s.checked[k] {
			continue
		}
		s.checked[k] = true
		o, ok := resp.Lookup(k.topic, k.partition)
		if !ok || !strings.HasPrefix(o.Metadata, intentPrefix) {
			continue
		}
		var ends []int64
		for _, f := range strings.Split(strings.TrimPrefix(o.Metadata, intentPrefix), ",") {
			end, err := strconv.ParseInt(f, 10, 64)
			if err != nil || end < o.At || (len(ends) > 0 && end <= ends[len(ends)-1]) {
				ends = nil
				break
			}
			ends = append(ends, end)
		}
		if len(ends) == 0 {
			continue
		}
		s.intents[k] = ends
		s.log.Info("resuming an interrupted batch exactly", "topic", k.topic, "partition", k.partition, "first", o.At, "chunk_ends", ends)
	}
	return nil
}

// cut splits one partition's records into chunks: first exactly at the
// chunk ends of an interrupted flush, then every MaxBatchRecords.
func (s *Sink) cut(k tp, recs []*kgo.Record) [][]*kgo.Record {
	var out [][]*kgo.Record
	s.mu.Lock()
	ends := s.intents[k]
	delete(s.intents, k)
	s.mu.Unlock()
	for _, end := range ends {
		i := sort.Search(len(recs), func(i int) bool { return recs[i].Offset > end })
		if i > 0 {
			out = append(out, recs[:i])
			recs = recs[i:]
		}
	}
	for len(recs) > 0 {
		// At least one record, then as many as keep the rows (a row batch
		// weighs its rows) within MaxBatchRecords.
		n, rows := 1, rowsIn(recs[0])
		for n < len(recs) && rows+rowsIn(recs[n]) <= s.cfg.MaxBatchRecords {
			rows += rowsIn(recs[n])
			n++
		}
		out = append(out, recs[:n])
		recs = recs[n:]
	}
	return out
}

// holdBack returns the partitions whose interrupted batch is not fully
// polled yet: they wait for more records, so the batch is rebuilt exactly.
// After maxHoldPolls polls without completing (the records are gone, for
// example by retention) the intent is dropped with a warning.
func (s *Sink) holdBack(recs map[tp][]*kgo.Record, polls int) map[tp]bool {
	const maxHoldPolls = 50
	s.mu.Lock()
	defer s.mu.Unlock()
	var held map[tp]bool
	for k, rs := range recs {
		ends, ok := s.intents[k]
		if !ok || rs[len(rs)-1].Offset >= ends[len(ends)-1] {
			continue
		}
		end := ends[len(ends)-1]
		if polls >= maxHoldPolls {
			s.log.Warn("interrupted batch cannot be rebuilt exactly; loading what is there (ReplacingMergeTree still removes duplicates at FINAL)", "topic", k.topic, "partition", k.partition, "intent_end", end)
			delete(s.intents, k)
			continue
		}
		if held == nil {
			held = map[tp]bool{}
		}
		held[k] = true
	}
	return held
}

// commit commits, per partition, either the intent of the flush (its
// first offset, with every chunk's last offset as metadata) or, after
// loading, the offset after its last chunk.
func (s *Sink) commit(ctx context.Context, chunks [][]*kgo.Record, intent bool) error {
	var offsets []Offset
	index := map[tp]int{}
	for _, c := range chunks {
		first, last := c[0], c[len(c)-1]
		k := tp{first.Topic, first.Partition}
		i, seen := index[k]
		switch {
		case intent && seen:
			offsets[i].Metadata += "," + strconv.FormatInt(last.Offset, 10)
		case intent:
			index[k] = len(offsets)
			offsets = append(offsets, Offset{Topic: k.topic, Partition: k.partition, Epoch: first.LeaderEpoch, At: first.Offset,
				Metadata: intentPrefix + strconv.FormatInt(last.Offset, 10)})
		case seen:
			offsets[i].Epoch, offsets[i].At = last.LeaderEpoch, last.Offset+1
		default:
			index[k] = len(offsets)
			offsets = append(offsets, Offset{Topic: k.topic, Partition: k.partition, Epoch: last.LeaderEpoch, At: last.Offset + 1})
		}
	}
	what := "commit offsets"
	if intent {
		what = "record batch intent"
	}
	return s.retry(ctx, what, func() error { return s.consumer.Commit(ctx, offsets) })
}

// loadChunk loads one partition chunk. Truncate markers cut it into
// segments: each segment is loaded as one batch (named by its own first and
// last offsets, so a chunk rebuilt after a crash gives the same batches and
// tokens), and each marker is applied after the segment before it and
// before the one after it. The partition's watermark advances once the
// whole chunk is safe.
func (s *Sink) loadChunk(ctx context.Context, chunk []*kgo.Record) error {
	var prog progress
	start := 0
	for i, kr := range chunk {
		tr, isTruncate, err := truncateOf(kr)
		if !isTruncate {
			continue
		}
		if err == nil {
			err = s.checkTruncate(kr.Topic, &tr)
		}
		if err := s.loadSegment(ctx, chunk[start:i], &prog); err != nil {
			return err
		}
		start = i + 1
		if err != nil {
			if err := s.deadLetter(ctx, kr, nil, err, 1); err != nil {
				return err
			}
			continue
		}
		if err := s.applyTruncate(ctx, kr, tr); err != nil {
			return err
		}
	}
	if err := s.loadSegment(ctx, chunk[start:], &prog); err != nil {
		return err
	}
	if prog.src.Table == "" || prog.through.IsZero() {
		return nil
	}
	// A commit time ahead of the sink's clock (a source clock running
	// ahead) never makes lastSyncAt claim the future.
	if now := time.Now().UTC(); prog.through.After(now) {
		prog.through = now
	}
	key := record.Source{Schema: prog.src.Schema, Table: prog.src.Table}
	s.mu.Lock()
	s.topicOf[key] = chunk[0].Topic
	s.mu.Unlock()
	s.advance(tp{chunk[0].Topic, chunk[0].Partition}, key, prog)
	return nil
}

// progress is what the segments of a chunk prove loaded, for the
// partition's watermark: the table, the commit time (less commitMargin) or
// heartbeat time through which the partition is complete, and the newest
// commit or heartbeat LSN.
type progress struct {
	src        record.Source
	through    time.Time
	lsn        record.LSN
	partitions int32 // the topic's partition count, from heartbeats; 0: not said
}

func (p *progress) saw(src record.Source, through time.Time, lsn record.LSN) {
	if p.src.Table == "" {
		p.src = src
	}
	if through.After(p.through) {
		p.through = through
	}
	p.lsn = max(p.lsn, lsn)
}

// loadSegment decodes records of one partition that no truncate marker
// separates and loads them as one batch; records that can never be loaded
// go to the dead letters. Heartbeats among them only add to prog.
func (s *Sink) loadSegment(ctx context.Context, seg []*kgo.Record, prog *progress) error {
	if len(seg) == 0 {
		return nil
	}
	first, last := seg[0], seg[len(seg)-1]
	b := Batch{Token: fmt.Sprintf("%s/%d/%d-%d", first.Topic, first.Partition, first.Offset, last.Offset)}
	origin := make([]*kgo.Record, 0, len(seg))
	var seen progress
	var beats []record.Heartbeat
	var single [1]*record.Record // a single record's rows, without allocating
	for _, kr := range seg {
		h, isHB, err := heartbeatOf(kr)
		if isHB {
			if err == nil {
				err = s.checkHeartbeat(kr.Topic, &h)
			}
			if err != nil {
				if err := s.deadLetter(ctx, kr, nil, err, 1); err != nil {
					return err
				}
				continue
			}
			beats = append(beats, h)
			continue
		}
		var rows []*record.Record
		batch := isBatch(kr)
		if batch {
			rows, err = decodeWith(ctx, s, kr, s.dec.DecodeBatch)
		} else {
			single[0], err = decodeWith(ctx, s, kr, s.dec.Decode)
			rows = single[:]
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if errors.Is(err, record.ErrUnknownSchema) && !errors.Is(err, record.ErrInvalid) {
			return err // no registry to look in: a configuration error, not a poison record
		}
		if err == nil {
			err = s.checkTopic(kr.Topic, rows[0].Source)
		}
		if err == nil && len(b.Records) > 0 && (rows[0].Source.Schema != b.Source.Schema || rows[0].Source.Table != b.Source.Table) {
			err = fmt.Errorf("%w: topic %s carries both %s.%s and %s.%s; each table needs its own topic", record.ErrInvalid, kr.Topic, b.Source.Schema, b.Source.Table, rows[0].Source.Schema, rows[0].Source.Table)
		}
		if err != nil {
			if err := s.deadLetter(ctx, kr, nil, err, 1); err != nil {
				return err
			}
			continue
		}
		if len(b.Records) == 0 {
			b.Source = rows[0].Source
		}
		b.Records = append(b.Records, rows...)
		if batch {
			origin = appendRowOrigins(origin, kr, len(rows))
		} else {
			origin = append(origin, kr)
		}
		if r := rows[len(rows)-1]; provesLoaded(kr, r) { // a batch's rows share the times and positions
			seen.saw(r.Source, r.OccurredAt.Add(-commitMargin), r.CommitLSN)
		}
	}
	// The table is the records' if there are any, else the heartbeats'.
	for _, h := range beats {
		seen.saw(h.Source, h.At, h.LSN)
		seen.partitions = max(seen.partitions, h.Partitions)
	}
	var hashes []string
	if s.l2 != nil && len(b.Records) > 0 {
		var err error
		if b.Records, origin, hashes, err = s.filter(ctx, b.Records, origin); err != nil {
			return err
		}
	}
	if len(b.Records) > 0 {
		aside := map[*kgo.Record]bool{}
		if err := s.loadIsolating(ctx, b, origin, 1, aside); err != nil {
			var te *TableError
			if errors.As(err, &te) && te.Index >= 0 && te.Index < len(origin) {
				return &stopAt{te: te, next: origin[te.Index].Offset}
			}
			return err
		}
		if s.l2 != nil {
			// Claim only what was loaded: a dead-lettered record must not
			// look processed when it is replayed.
			var ids []*record.Record
			var hs []string
			for i, r := range b.Records {
				if !aside[origin[i]] {
					ids = append(ids, r)
					hs = append(hs, hashes[i])
				}
			}
			s.remember(ctx, ids, hs)
		}
	}
	prog.saw(seen.src, seen.through, seen.lsn)
	prog.partitions = max(prog.partitions, seen.partitions)
	return nil
}

// loadIsolating loads b, retrying transient errors; on a permanent error it
// retries a bounded number of times and then sets the faulty record aside
// (found by the loader or by halving the batch) and loads the rest.
// Records set aside are added to aside.
func (s *Sink) loadIsolating(ctx context.Context, b Batch, origin []*kgo.Record, attempt int, aside map[*kgo.Record]bool) error {
	start := time.Now()
	err := s.loadWithRetry(ctx, b)
	if err == nil {
		s.loaded.Add(int64(len(b.Records)))
		s.batches.Add(1)
		s.m.loaded.WithLabelValues(b.Source.Schema + "." + b.Source.Table).Add(float64(len(b.Records)))
		s.m.batchSize.Observe(float64(len(b.Records)))
		s.m.insertTime.Observe(time.Since(start).Seconds())
		return nil
	}
	if !errors.Is(err, ErrPermanent) {
		return err
	}
	if attempt < s.cfg.PermanentAttempts {
		s.log.Warn("load failed permanently; trying again before setting records aside", "token", b.Token, "attempt", attempt, "err", err)
		if err := sleep(ctx, s.backoff(attempt)); err != nil {
			return err
		}
		return s.loadIsolating(ctx, b, origin, attempt+1, aside)
	}
	var re *RecordError
	if errors.As(err, &re) && re.Index >= 0 && re.Index < len(b.Records) {
		aside[origin[re.Index]] = true
		if err := s.deadLetter(ctx, origin[re.Index], b.Records[re.Index], re.Err, attempt); err != nil {
			return err
		}
		return s.loadParts(ctx, b, origin, [][2]int{{0, re.Index}, {re.Index + 1, len(b.Records)}}, aside)
	}
	if len(b.Records) == 1 {
		aside[origin[0]] = true
		return s.deadLetter(ctx, origin[0], b.Records[0], err, attempt)
	}
	mid := len(b.Records) / 2
	return s.loadParts(ctx, b, origin, [][2]int{{0, mid}, {mid, len(b.Records)}}, aside)
}

// loadParts loads sub-ranges of b, each with its own derived token.
func (s *Sink) loadParts(ctx context.Context, b Batch, origin []*kgo.Record, parts [][2]int, aside map[*kgo.Record]bool) error {
	for _, p := range parts {
		if p[0] >= p[1] {
			continue
		}
		sub := Batch{Source: b.Source, Records: b.Records[p[0]:p[1]], Token: fmt.Sprintf("%s[%d:%d]", b.Token, p[0], p[1])}
		if err := s.loadIsolating(ctx, sub, origin[p[0]:p[1]], s.cfg.PermanentAttempts, aside); err != nil {
			var te *TableError
			if errors.As(err, &te) {
				te.Index += p[0] // the parts before it were loaded
			}
			return err
		}
	}
	return nil
}

// decodeWith decodes a record's value with decode (a Decoder's Decode or
// DecodeBatch). A version 2 record whose schema is not known yet makes the
// sink read the registry up to now, retrying while it cannot be read:
// capture registers a schema before producing a record that refers to it,
// so after a successful read a schema that is still missing never will be
// there, and the record is poison.
func decodeWith[T any](ctx context.Context, s *Sink, kr *kgo.Record, decode func([]byte, record.Schemas) (T, error)) (T, error) {
	var schemas record.Schemas
	if s.cfg.Schemas != nil {
		schemas = s.cfg.Schemas
	}
	r, err := decode(kr.Value, schemas)
	if !errors.Is(err, record.ErrUnknownSchema) {
		return r, err
	}
	if s.cfg.Schemas == nil {
		return r, fmt.Errorf("record at %s/%d offset %d: %w, and the sink was started without a schema registry (sink.Config.Schemas)", kr.Topic, kr.Partition, kr.Offset, err)
	}
	if rerr := s.retry(ctx, "read the schema registry", func() error { return s.cfg.Schemas.Refresh(ctx) }); rerr != nil {
		return r, rerr
	}
	r, err = decode(kr.Value, schemas)
	if errors.Is(err, record.ErrUnknownSchema) {
		err = fmt.Errorf("%w: %w (capture registers every schema before its records, so this record was not written by capture)", record.ErrInvalid, err)
	}
	return r, err
}

// deadLetter sends kr to the dead letters with the cause. r is the decoded
// row when there is one: a row of a row batch goes there as a record of its
// own (key and value of the single record capture would have sent), not as
// the whole batch, whose other rows were loaded.
func (s *Sink) deadLetter(ctx context.Context, kr *kgo.Record, r *record.Record, cause error, attempts int) error {
	if s.cfg.DeadLetters == nil {
		return fmt.Errorf("record at %s/%d offset %d can never be loaded and no dead-letter topic is configured: %w", kr.Topic, kr.Partition, kr.Offset, cause)
	}
	dl := DeadLetter{Topic: kr.Topic, Partition: kr.Partition, Offset: kr.Offset, Key: kr.Key, Value: kr.Value, Err: cause, FirstSeen: time.Now().UTC(), Attempts: attempts}
	switch {
	case isRowOrigin(kr) && r != nil:
		dl.Key, dl.Value = r.AppendPartitionKey(nil), record.AppendJSON(nil, r)
	case isBatch(kr):
		dl.Rows = rowsIn(kr)
	}
	if err := s.retry(ctx, "send to the dead-letter topic", func() error { return s.cfg.DeadLetters.Send(ctx, dl) }); err != nil {
		return err
	}
	s.dead.Add(1)
	s.m.dead.Inc()
	s.log.Error("record set aside in the dead-letter topic", "topic", kr.Topic, "partition", kr.Partition, "offset", kr.Offset, "err", cause)
	return nil
}

func (s *Sink) loadWithRetry(ctx context.Context, b Batch) error {
	return s.retry(ctx, "load "+b.Source.Schema+"."+b.Source.Table, func() error {
		start := time.Now()
		err := s.loader.Load(ctx, b)
		if err == nil {
			s.log.Debug("loaded", "table", b.Source.Schema+"."+b.Source.Table, "rows", len(b.Records), "token", b.Token, "took", time.Since(start))
		}
		return err
	})
}

// retry runs op until it succeeds, fails permanently or ctx ends, backing
// off exponentially with jitter between attempts.
func (s *Sink) retry(ctx context.Context, what string, op func() error) error {
	for attempt := 1; ; attempt++ {
		err := op()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var te *TableError
		if errors.Is(err, ErrPermanent) || errors.Is(err, record.ErrInvalid) || errors.As(err, &te) {
			return err
		}
		d := s.backoff(attempt)
		s.log.Warn(what+" failed; retrying", "attempt", attempt, "backoff", d, "err", err)
		if err := sleep(ctx, d); err != nil {
			return err
		}
	}
}

// backoff returns the wait before attempt+1: exponential, capped, with
// jitter so a fleet of sinks does not retry in lockstep.
func (s *Sink) backoff(attempt int) time.Duration {
	d := s.cfg.RetryBackoff
	for i := 1; i < attempt && d < s.cfg.MaxRetryBackoff; i++ {
		d *= 2
	}
	d = min(d, s.cfg.MaxRetryBackoff)
	return d/2 + rand.N(d/2+1)
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
