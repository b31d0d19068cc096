package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walhouse/walhouse/internal/backoff"
)

// walhouse keeps its own small key-value data (capture's snapshot progress,
// the schema registry) in compacted topics of one partition, next to the
// records they describe: Compacted writes such a topic, Tail reads it.
// Readers read partition 0 only, and compaction keeps the newest value of
// every key, so reading the partition to its end gives every key's value.

// ErrNoTopic is wrapped by Tail.ReadNew's error when the topic does not
// exist.
var ErrNoTopic = errors.New("topic does not exist")

// ErrEntriesLost is wrapped by Tail.ReadNew's error when Kafka deleted
// entries of the topic: compaction never moves a topic's log start, so a
// log start past 0 means retention (a cleanup.policy with delete) or
// DeleteRecords removed entries, and the keys written only there are gone.
// The next ReadNew goes on with what remains, for a reader that can.
var ErrEntriesLost = errors.New("entries of a compacted topic lost")

// Compacted writes to a compacted topic of one partition. It is safe for
// concurrent use.
type Compacted struct {
	cl          *kgo.Client
	adm         *kadm.Client
	topic       string
	replication int16
	configs     map[string]*string
}

// NewCompacted returns a writer of topic through cl. cl is the caller's
// producer client, which the caller owns and closes; it may have a custom
// partitioner and other records in flight (with one partition, any
// partitioner puts entries on partition 0, and Put checks that it did).
// replication is the replication factor Create gives the topic (-1: the
// broker's default.replication.factor); opts add settings of a new topic
// (MinInsyncReplicas).
func NewCompacted(cl *kgo.Client, topic string, replication int16, opts ...TopicOption) *Compacted {
	return &Compacted{cl: cl, adm: kadm.NewClient(cl), topic: topic, replication: replication, configs: applyTopicOptions(compacted(), opts)}
}

// Topic returns the topic's name.
func (c *Compacted) Topic() string { return c.topic }

// Create creates the topic unless it exists: one partition,
// cleanup.policy=compact (see Ensure for a topic an administrator made).
func (c *Compacted) Create(ctx context.Context) error {
	return Ensure(ctx, c.adm, c.topic, 1, c.replication, c.configs)
}

// Put stores value under key and returns once Kafka acknowledged it.
//
// It retries while the broker does not yet know a topic it has just
// created, until ctx ends. Entries are produced outside transactions, so a
// Tail reaches the end of what it reads (see ReadNew).
func (c *Compacted) Put(ctx context.Context, key string, value []byte) error {
	for delay := backoff.ShortMin; ; delay = backoff.Next(delay, backoff.ShortMax) {
		rec := &kgo.Record{Topic: c.topic, Key: []byte(key), Value: value}
		err := c.cl.ProduceSync(ctx, rec).FirstErr()
		if err == nil {
			if rec.Partition != 0 {
				// Readers read partition 0 only: an entry elsewhere would
				// be acknowledged but never found.
				return fmt.Errorf("write %s to %s: the topic has more than one partition and the entry went to partition %d, which readers do not read; "+
					"delete the topic and let walhouse recreate it with one partition", key, c.topic, rec.Partition)
			}
			return nil
		}
		// A topic created a moment ago may be unknown to the broker for a
		// while. A context error while ctx is live comes from another
		// record of the same batch whose caller gave up.
		retry := errors.Is(err, kerr.UnknownTopicOrPartition) ||
			(ctx.Err() == nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)))
		if !retry {
			return fmt.Errorf("write %s to %s: %w", key, c.topic, err)
		}
		if serr := backoff.Sleep(ctx, delay); serr != nil {
			return fmt.Errorf("write %s to %s: %w (last error: %v)", key, c.topic, serr, err)
		}
	}
}

// Entry is one key's value as read from a compacted topic.
type Entry struct {
	Key, Value []byte
	Offset     int64
}

// Tail reads a compacted topic's partition 0 from its start, a part at a
// time: each ReadNew goes on where the last one ended. It is not safe for
// concurrent use.
type Tail struct {
	cl    *kgo.Client
	adm   *kadm.Client
	topic string
	log   *slog.Logger

	consuming bool  // partition 0 was added to cl
	next      int64 // offset after the last entry read
	// startChecked is set once the log start was checked (ErrEntriesLost).
	startChecked bool
}

// NewTail returns a Tail of topic through cl. cl must be created without
// consumer options (no group, no ConsumeTopics or ConsumePartitions): the
// Tail adds the partition itself (cl.AddConsumePartitions) once the topic
// exists, and from then on owns cl's consumption. The caller closes cl
// after it stops using the Tail. log receives warnings about the topic;
// nil means slog.Default().
func NewTail(cl *kgo.Client, topic string, log *slog.Logger) *Tail {
	if log == nil {
		log = slog.Default()
	}
	return &Tail{cl: cl, adm: kadm.NewClient(cl), topic: topic, log: log.With("topic", topic)}
}

// ReadNew calls each for every entry written since the last call, in
// offset order, up to the topic's end as of this call: every Put that
// returned before the call is read. When the topic does not exist the
// error wraps ErrNoTopic. A topic that was deleted and recreated is read
// again from its start.
func (t *Tail) ReadNew(ctx context.Context, each func(Entry)) error {
	end, err := t.endOffset(ctx)
	if err != nil {
		return err
	}
	if end < t.next {
		// Compaction never lowers the end: the topic was deleted and
		// recreated. Read the new one from its start.
		t.log.Warn("topic ends before what this reader has read: it was recreated; reading it again from the start",
			"end_offset", end, "read_up_to", t.next)
		t.restart()
	}
	if t.next >= end {
		return nil
	}
	if t.next == 0 && !t.startChecked {
		t.startChecked = true
		if start, err := t.startOffset(ctx); err != nil {
			return err
		} else if start > 0 {
			return fmt.Errorf("%w: %s starts at offset %d: Kafka deleted the entries before it (retention: its cleanup.policy is not compact alone; or DeleteRecords); set cleanup.policy=compact on it", ErrEntriesLost, t.topic, start)
		}
	}
	if !t.consuming {
		t.cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{t.topic: {0: kgo.NewOffset().AtStart()}})
		t.consuming = true
	}
	// Offsets before end are contiguous up to end-1 except where
	// compaction removed duplicates; the newest entry is never removed
	// (nothing newer shares its key), so reading it means reaching end.
	// That holds because entries are produced outside transactions (as
	// Put does): a transaction marker at the end would never be returned,
	// and ReadNew would wait for ctx.
	for t.next < end {
		fs := t.cl.PollFetches(ctx)
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset >= t.next {
				t.next = r.Offset + 1
			}
			each(Entry{Key: r.Key, Value: r.Value, Offset: r.Offset})
		})
		if fs.IsClientClosed() {
			return fmt.Errorf("read %s: %w", t.topic, kgo.ErrClientClosed)
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("read %s up to offset %d (read up to %d): %w", t.topic, end, t.next, err)
		}
		var fatal error
		fs.EachError(func(topic string, partition int32, err error) {
			var lost *kgo.ErrDataLoss
			if errors.As(err, &lost) {
				// kgo goes on from where the broker now is; what was lost
				// is reported here and, for the entries that need it, by
				// their absence.
				t.log.Error("the topic lost entries while they were read: the keys written only there are gone", "error", err)
				return
			}
			if fatal == nil && !kerr.IsRetriable(err) {
				fatal = fmt.Errorf("read %s partition %d: %w", topic, partition, err)
			}
		})
		if fatal != nil {
			return fatal
		}
	}
	return nil
}

// startOffset returns the log start of the topic's partition 0.
func (t *Tail) startOffset(ctx context.Context) (int64, error) {
	starts, err := t.adm.ListStartOffsets(ctx, t.topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return 0, fmt.Errorf("read the start of %s: %w", t.topic, err)
	}
	start, _ := starts.Lookup(t.topic, 0)
	return start.Offset, nil
}

// restart forgets the client's state of the topic (cached metadata,
// consumption), as kgo documents for a topic that was deleted or recreated,
// so the next read starts afresh from offset 0.
func (t *Tail) restart() {
	t.cl.PurgeTopicsFromClient(t.topic)
	t.consuming = false
	t.next = 0
	t.startChecked = false
}

// endOffset returns the end offset of the topic's partition 0.
func (t *Tail) endOffset(ctx context.Context) (int64, error) {
	purged := false
	for delay := backoff.ShortMin; ; delay = backoff.Next(delay, backoff.ShortMax) {
		ends, err := t.adm.ListEndOffsets(ctx, t.topic)
		if err != nil {
			return 0, fmt.Errorf("read the end of %s: %w", t.topic, err)
		}
		end, ok := ends.Lookup(t.topic, 0)
		switch {
		case ok && end.Err == nil:
			return end.Offset, nil
		case ok && !errors.Is(end.Err, kerr.UnknownTopicOrPartition) && !errors.Is(end.Err, kerr.NotLeaderForPartition) && !errors.Is(end.Err, kerr.LeaderNotAvailable):
			return 0, fmt.Errorf("read the end of %s: %w", t.topic, end.Err)
		case !ok:
			missing, _ := ends.Lookup(t.topic, -1)
			if !errors.Is(missing.Err, kerr.UnknownTopicOrPartition) {
				return 0, fmt.Errorf("read the end of %s: the broker lists no partition 0 (%v)", t.topic, missing.Err)
			}
			if purged {
				return 0, fmt.Errorf("read %s: %w", t.topic, ErrNoTopic)
			}
			// kadm answers from metadata cached for a few seconds,
			// which may predate the topic's creation: ask the broker
			// again before calling the topic missing.
			t.restart()
			purged = true
			continue
		}
		// Partition 0 exists but has no leader yet (a topic created a
		// moment ago): wait for one.
		if serr := backoff.Sleep(ctx, delay); serr != nil {
			return 0, fmt.Errorf("read the end of %s: %w (last error: %v)", t.topic, serr, end.Err)
		}
	}
}
