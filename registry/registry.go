package registry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walhouse/walhouse/internal/kafkatopic"
	"github.com/walhouse/walhouse/record"
)

// Topic returns the registry topic of the pipeline with the given topic
// prefix: "<prefix>-schemas". Capture and sink derive it from the same
// --topic-prefix, so they meet on one topic without another setting.
func Topic(prefix string) string { return prefix + "-schemas" }

// ErrNoRegistry is wrapped by Reader.Refresh's error when the registry topic
// does not exist. Callers branch on it to wait for capture rather than fail:
// the topic appears with capture's first registration.
var ErrNoRegistry = errors.New("schema registry topic does not exist: capture has not registered any schema yet, " +
	"or sink and capture use different --topic-prefix values; start capture (or give both the same --topic-prefix) and retry")

// Backoff bounds for the retries below: short, because they wait for a
// broker to finish creating a topic or electing a leader, which takes
// milliseconds to seconds.
const (
	minBackoff = 50 * time.Millisecond
	maxBackoff = time.Second
)

// sleep waits for d or until ctx ends, and returns ctx's error in that case.
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

// Writer registers schemas: capture calls Register before producing the first
// record of a schema. It is safe for concurrent use.
type Writer struct {
	cl          *kgo.Client
	adm         *kadm.Client
	topic       string
	replication int16

	mu         sync.Mutex
	registered map[string]struct{}      // ids acknowledged by Kafka
	inflight   map[string]*registration // ids being registered now
}

// registration is one attempt to register an id, shared by the calls that
// arrive while it runs.
type registration struct {
	done chan struct{} // closed when err is set
	err  error
	// abandoned is true when the attempt failed because its caller's
	// context ended: the waiters' own contexts may still be live, so they
	// try again instead of taking on an error that is not theirs.
	abandoned bool
}

// NewWriter returns a Writer producing to topic through cl. cl is the
// caller's producer client, which the caller owns and closes; it may have a
// custom partitioner and other records in flight (with one partition, any
// partitioner puts registry entries on partition 0, and Register checks that
// it did).
// replication is the replication factor the topic is created with (-1: the
// broker's default.replication.factor); the registry is as critical as the
// records, which cannot be decoded without it.
func NewWriter(cl *kgo.Client, topic string, replication int16) *Writer {
	return &Writer{
		cl:          cl,
		adm:         kadm.NewClient(cl),
		topic:       topic,
		replication: replication,
		registered:  make(map[string]struct{}),
		inflight:    make(map[string]*registration),
	}
}

// Register makes sure s is in the registry before returning, so a record
// produced afterwards never refers to a schema a reader cannot find.
//
// The first call for an id on this Writer creates the topic if it is missing
// (1 partition, cleanup.policy=compact, the broker's default replication
// factor), then produces the entry (key: the id, value: s.AppendJSON) and
// waits for Kafka's acknowledgement. Later calls for that id return nil at
// once, without touching Kafka. Calls for an id that is being registered
// wait for that registration and share its result; a failure is not
// remembered, so a later call tries again. Registering an entry twice (for
// example after a restart) is harmless: the entry is the same and
// compaction keeps one.
//
// Register retries while the broker does not yet know a topic it has just
// created, until ctx ends. It is safe for concurrent use.
func (w *Writer) Register(ctx context.Context, s record.Schema) error {
	id := s.ID()
	for {
		w.mu.Lock()
		if _, ok := w.registered[id]; ok {
			w.mu.Unlock()
			return nil
		}
		if r, ok := w.inflight[id]; ok {
			w.mu.Unlock()
			select {
			case <-r.done:
			case <-ctx.Done():
				return fmt.Errorf("register schema %s in %s: %w", id, w.topic, ctx.Err())
			}
			if r.abandoned && ctx.Err() == nil {
				continue
			}
			return r.err
		}
		r := &registration{done: make(chan struct{})}
		w.inflight[id] = r
		w.mu.Unlock()

		r.err = w.register(ctx, id, s)
		r.abandoned = r.err != nil && ctx.Err() != nil

		w.mu.Lock()
		delete(w.inflight, id)
		if r.err == nil {
			w.registered[id] = struct{}{}
		}
		w.mu.Unlock()
		close(r.done)
		return r.err
	}
}

// register creates the topic if needed and produces the entry of s.
func (w *Writer) register(ctx context.Context, id string, s record.Schema) error {
	if err := w.createTopic(ctx); err != nil {
		return err
	}
	value := s.AppendJSON(nil)
	for delay := minBackoff; ; delay = min(2*delay, maxBackoff) {
		rec := &kgo.Record{Topic: w.topic, Key: []byte(id), Value: value}
		err := w.cl.ProduceSync(ctx, rec).FirstErr()
		if err == nil {
			if rec.Partition != 0 {
				// Readers read partition 0 only: an entry elsewhere would
				// be acknowledged but never found.
				return fmt.Errorf("register schema %s: topic %s has more than one partition and the entry went to partition %d, which readers do not read; "+
					"delete the topic and let capture recreate it with one partition", id, w.topic, rec.Partition)
			}
			return nil
		}
		// A topic created a moment ago may be unknown to the broker for a
		// while. A context error while ctx is live comes from another
		// registration in the same batch whose caller gave up.
		retry := errors.Is(err, kerr.UnknownTopicOrPartition) ||
			(ctx.Err() == nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)))
		if !retry {
			return fmt.Errorf("register schema %s in %s: %w", id, w.topic, err)
		}
		if serr := sleep(ctx, delay); serr != nil {
			return fmt.Errorf("register schema %s in %s: %w (last error: %v)", id, w.topic, serr, err)
		}
	}
}

// createTopic creates the registry topic unless it exists.
func (w *Writer) createTopic(ctx context.Context) error {
	compact := "compact"
	if err := kafkatopic.Ensure(ctx, w.adm, w.topic, 1, w.replication, map[string]*string{"cleanup.policy": &compact}); err != nil {
		return fmt.Errorf("schema registry topic: %w", err)
	}
	return nil
}

// Reader reads the registry into memory and answers Schema lookups from
// there: the sink calls Refresh when a record refers to a schema it does not
// know yet, and at start. Schema and Len are safe for concurrent use with
// each other and with Refresh.
type Reader struct {
	cl    *kgo.Client
	adm   *kadm.Client
	topic string
	log   *slog.Logger

	schemas record.SchemaSet

	// refresh holds one token: the Refresh that has it owns the fields
	// below (a channel rather than a mutex, so a waiting Refresh can give
	// up when its context ends).
	refresh   chan struct{}
	consuming bool  // partition 0 was added to cl
	next      int64 // offset after the last entry read
}

var _ record.Schemas = (*Reader)(nil)

// NewReader returns a Reader of topic's partition 0, from the start, through
// cl. cl must be created without consumer options (no group, no
// ConsumeTopics or ConsumePartitions): the Reader adds the partition itself
// (cl.AddConsumePartitions) once the topic exists, and from then on owns
// cl's consumption. The caller closes cl after it stops using the Reader. log
// receives warnings about skipped entries; nil means slog.Default().
func NewReader(cl *kgo.Client, topic string, log *slog.Logger) *Reader {
	if log == nil {
		log = slog.Default()
	}
	return &Reader{
		cl:      cl,
		adm:     kadm.NewClient(cl),
		topic:   topic,
		log:     log.With("component", "registry", "topic", topic),
		refresh: make(chan struct{}, 1),
	}
}

// Schema implements record.Schemas from what has been read so far. It never
// waits for Kafka: a schema it does not know calls for a Refresh.
func (r *Reader) Schema(id string) (record.Schema, bool) { return r.schemas.Schema(id) }

// Len returns the number of schemas known.
func (r *Reader) Len() int { return r.schemas.Len() }

// Refresh reads the registry up to its end as of the call, so every schema
// whose Register returned before the call is known afterwards. When the
// topic does not exist the error wraps ErrNoRegistry. Concurrent calls run
// one after another.
//
// An entry that is not a valid registry entry (record.DecodeSchema fails) or
// whose key is not its schemaId is skipped with a warning, never fatal: the
// records that refer to it then fail to decode, which names the problem where
// it matters, while the rest of the registry stays usable.
func (r *Reader) Refresh(ctx context.Context) error {
	select {
	case r.refresh <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("read schema registry %s: %w", r.topic, ctx.Err())
	}
	defer func() { <-r.refresh }()

	end, err := r.endOffset(ctx)
	if err != nil {
		return err
	}
	if end < r.next {
		// Compaction never lowers the end: the topic was deleted and
		// recreated. Read the new one from its start.
		r.log.Warn("schema registry topic ends before what this reader has read: it was recreated; reading it again from the start",
			"end_offset", end, "read_up_to", r.next)
		r.restart()
	}
	if r.next >= end {
		return nil
	}
	if !r.consuming {
		r.cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{r.topic: {0: kgo.NewOffset().AtStart()}})
		r.consuming = true
	}
	// Offsets before end are contiguous up to end-1 except where
	// compaction removed duplicates; the newest entry is never removed
	// (nothing newer shares its key), so reading it means reaching end.
	// That holds because entries are produced outside transactions (as
	// Writer does): a transaction marker at the end would never be
	// returned, and Refresh would wait for ctx.
	for r.next < end {
		fs := r.cl.PollFetches(ctx)
		fs.EachRecord(r.add)
		if fs.IsClientClosed() {
			return fmt.Errorf("read schema registry %s: %w", r.topic, kgo.ErrClientClosed)
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("read schema registry %s up to offset %d (read up to %d): %w", r.topic, end, r.next, err)
		}
		var fatal error
		fs.EachError(func(topic string, partition int32, err error) {
			var lost *kgo.ErrDataLoss
			if errors.As(err, &lost) {
				// kgo goes on from where the broker now is; what was lost
				// is reported here and, for the records that need it, by
				// their failure to decode.
				r.log.Warn("schema registry partition lost data", "error", err)
				return
			}
			if fatal == nil && !kerr.IsRetriable(err) {
				fatal = fmt.Errorf("read schema registry %s partition %d: %w", topic, partition, err)
			}
		})
		if fatal != nil {
			return fatal
		}
	}
	return nil
}

// add stores the entry of rec, or skips it with a warning.
func (r *Reader) add(rec *kgo.Record) {
	if rec.Offset >= r.next {
		r.next = rec.Offset + 1
	}
	s, err := record.DecodeSchema(rec.Value)
	if err != nil {
		r.log.Warn("skipping invalid schema registry entry; records that refer to it will fail to decode",
			"offset", rec.Offset, "key", string(rec.Key), "error", err)
		return
	}
	if id := s.ID(); id != string(rec.Key) {
		r.log.Warn("skipping schema registry entry stored under another key than its schemaId; records that refer to the key will fail to decode",
			"offset", rec.Offset, "key", string(rec.Key), "schema_id", id)
		return
	}
	r.schemas.Add(s)
}

// restart forgets the client's state of the topic (cached metadata,
// consumption), as kgo documents for a topic that was deleted or recreated,
// so the next read starts afresh from offset 0. The schemas read so far stay:
// an entry's content never changes under its id.
func (r *Reader) restart() {
	r.cl.PurgeTopicsFromClient(r.topic)
	r.consuming = false
	r.next = 0
}

// endOffset returns the end offset of the registry's partition 0.
func (r *Reader) endOffset(ctx context.Context) (int64, error) {
	purged := false
	for delay := minBackoff; ; delay = min(2*delay, maxBackoff) {
		ends, err := r.adm.ListEndOffsets(ctx, r.topic)
		if err != nil {
			return 0, fmt.Errorf("read the end of schema registry %s: %w", r.topic, err)
		}
		end, ok := ends.Lookup(r.topic, 0)
		switch {
		case ok && end.Err == nil:
			return end.Offset, nil
		case ok && !errors.Is(end.Err, kerr.UnknownTopicOrPartition) && !errors.Is(end.Err, kerr.NotLeaderForPartition) && !errors.Is(end.Err, kerr.LeaderNotAvailable):
			return 0, fmt.Errorf("read the end of schema registry %s: %w", r.topic, end.Err)
		case !ok:
			missing, _ := ends.Lookup(r.topic, -1)
			if !errors.Is(missing.Err, kerr.UnknownTopicOrPartition) {
				return 0, fmt.Errorf("read the end of schema registry %s: the broker lists no partition 0 (%v)", r.topic, missing.Err)
			}
			if purged {
				return 0, fmt.Errorf("read schema registry %s: %w", r.topic, ErrNoRegistry)
			}
			// kadm answers from metadata cached for a few seconds,
			// which may predate the topic's creation: ask the broker
			// again before calling the topic missing.
			r.restart()
			purged = true
			continue
		}
		// Partition 0 exists but has no leader yet (a topic created a
		// moment ago): wait for one.
		if serr := sleep(ctx, delay); serr != nil {
			return 0, fmt.Errorf("read the end of schema registry %s: %w (last error: %v)", r.topic, serr, end.Err)
		}
	}
}
