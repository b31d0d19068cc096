package kafka

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walhouse/walhouse/record"
)

// Listing and replaying the dead-letter topic (`walhouse dlq list` and
// `walhouse dlq replay`, which keep the flags and the output). The topic
// is read, not trusted: a record walhouse did not write is reported, never
// replayed, and replay writes table topics of its pipeline only.

// DeadLetterEntry is one record of the dead-letter topic as
// ListDeadLetters reads it.
type DeadLetterEntry struct {
	Offset int64 // in the dead-letter topic
	Letter record.DeadLetter
	// Unreadable says why the record is not a dead letter walhouse wrote
	// (Letter then holds its key and value only).
	Unreadable error
}

// ListDeadLetters calls each with every record of topic, from the log
// start to the end the topic had when it was called, and returns how many
// it read. opts size the client (RecordLimitOpts).
func ListDeadLetters(ctx context.Context, cfg Config, topic string, opts []kgo.Opt, each func(DeadLetterEntry) error) (int, error) {
	cl, err := NewClient(ctx, cfg, append(slices.Clone(opts), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	sp, err := readSpan(ctx, cl, topic, "")
	if err != nil {
		return 0, err
	}
	n := 0
	err = readToEnd(ctx, cl, topic, sp, dlqPoll, func(r *kgo.Record) error {
		n++
		l, err := ParseDeadLetter(r)
		if err != nil {
			return each(DeadLetterEntry{Offset: r.Offset, Letter: record.DeadLetter{Key: r.Key, Value: r.Value}, Unreadable: err})
		}
		return each(DeadLetterEntry{Offset: r.Offset, Letter: l})
	})
	return n, err
}

// ReplayDeadLetters produces the dead letters of topic again to their
// table topics, once per replay group: the group's committed offsets say
// what earlier replays did. A dead letter that cannot be replayed (not
// walhouse's, naming a topic other than a table topic of the pipeline of
// prefix, without its value) is skipped and reported to skip. Dead
// letters Kafka deleted before the group replayed them stop it with an
// error that says what to do.
func ReplayDeadLetters(ctx context.Context, cfg Config, topic, group, prefix string, opts []kgo.Opt, skip func(offset int64, why error)) (replayed, skipped int, err error) {
	cl, err := NewClient(ctx, cfg, append(slices.Clone(opts), kgo.ConsumeTopics(topic), kgo.ConsumerGroup(group),
		kgo.DisableAutoCommit(), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
	if err != nil {
		return 0, 0, err
	}
	defer cl.Close()
	sp, err := readSpan(ctx, cl, topic, group)
	if err != nil {
		return 0, 0, err
	}
	// Dead letters Kafka deleted (retention) before they were replayed are
	// changes missing from ClickHouse: replay stops at such a gap, as the
	// sink does, instead of going on from the log start without a word.
	if len(sp.lost) > 0 {
		p := slices.Min(slices.Collect(maps.Keys(sp.lost)))
		return 0, 0, dlqLost(topic, group, p, sp.lost[p][0], sp.lost[p][1])
	}
	next := maps.Clone(sp.from)
	err = readToEnd(ctx, cl, topic, sp, dlqPoll, func(r *kgo.Record) error {
		if want, ok := next[r.Partition]; ok && r.Offset > want {
			return dlqLost(topic, group, r.Partition, want, r.Offset)
		}
		next[r.Partition] = r.Offset + 1
		l, err := ParseDeadLetter(r)
		if err == nil {
			err = replayTarget(prefix, l.Topic)
		}
		if err == nil && l.ValueDropped > 0 {
			err = fmt.Errorf("its %d-byte value was too large for the dead-letter topic and is not in it (%s/%d@%d); copy the row again with capture --resnapshot", l.ValueDropped, l.Topic, l.Partition, l.Offset)
		}
		if err == nil && len(l.Value) == 0 {
			err = fmt.Errorf("it has no record to replay (%s of %s, primary key %s): change the row in PostgreSQL once the cause is fixed, or copy the table again with --resnapshot", l.Reason, l.Table, l.PrimaryKey)
		}
		if err != nil {
			skipped++
			skip(r.Offset, err)
			return cl.CommitRecords(ctx, r)
		}
		out := &kgo.Record{Topic: l.Topic, Key: l.Key, Value: l.Value}
		if l.Rows > 0 {
			out.Headers = []kgo.RecordHeader{{Key: record.HeaderRows, Value: []byte(strconv.Itoa(l.Rows))}}
		}
		if err := cl.ProduceSync(ctx, out).FirstErr(); err != nil {
			return fmt.Errorf("replay to %s: %w", l.Topic, err)
		}
		if err := cl.CommitRecords(ctx, r); err != nil {
			return fmt.Errorf("remember replay progress: %w", err)
		}
		replayed++
		return nil
	})
	return replayed, skipped, err
}

// dlqSpan is what list and replay read of the dead-letter topic: each
// partition from its first record not yet read (the log start, or the
// replay group's committed offset beyond it) to the end it had when they
// started.
type dlqSpan struct {
	from, end map[int32]int64
	// lost holds, per partition, the offsets [from, to) the replay group
	// committed below the log start: dead letters Kafka deleted before
	// they were replayed.
	lost map[int32][2]int64
}

// readSpan returns the span of topic to read; group is the replay group
// ("" for list).
func readSpan(ctx context.Context, cl *kgo.Client, topic, group string) (dlqSpan, error) {
	adm := kadm.NewClient(cl)
	sp := dlqSpan{from: map[int32]int64{}, end: map[int32]int64{}}
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return sp, fmt.Errorf("read the start of %s: %w", topic, err)
	}
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return sp, fmt.Errorf("read the end of %s: %w", topic, err)
	}
	var committed kadm.OffsetResponses
	if group != "" {
		if committed, err = adm.FetchOffsets(ctx, group); err == nil {
			err = committed.Error()
		}
		if err != nil {
			return sp, fmt.Errorf("read the offsets replay group %s committed: %w", group, err)
		}
	}
	ends.Each(func(o kadm.ListedOffset) {
		sp.end[o.Partition] = o.Offset
		from := int64(0)
		if s, ok := starts.Lookup(topic, o.Partition); ok {
			from = s.Offset
		}
		if c, ok := committed.Lookup(topic, o.Partition); ok && c.At >= 0 && c.At < from {
			if sp.lost == nil {
				sp.lost = map[int32][2]int64{}
			}
			sp.lost[o.Partition] = [2]int64{c.At, from}
		} else if ok && c.At > from {
			from = c.At
		}
		sp.from[o.Partition] = from
	})
	return sp, nil
}

// fetchPoller is the part of *kgo.Client that readToEnd polls.
type fetchPoller interface {
	PollFetches(ctx context.Context) kgo.Fetches
}

// dlqPoll is how long readToEnd waits for one poll, and dlqMaxIdlePolls
// how many polls in a row may bring nothing before it gives up: a group
// still joining, a slow broker may answer a poll empty, which is no end.
const (
	dlqPoll         = 10 * time.Second
	dlqMaxIdlePolls = 6
)

// readToEnd polls cl, which consumes topic, until every partition reached
// the end of sp. It never ends on an empty poll alone: after
// dlqMaxIdlePolls of them in a row it fails, naming the partitions not
// read to their end.
func readToEnd(ctx context.Context, cl fetchPoller, topic string, sp dlqSpan, pollTimeout time.Duration, each func(*kgo.Record) error) error {
	next := maps.Clone(sp.from)
	left := func() []string {
		var out []string
		for p, e := range sp.end {
			if next[p] < e {
				out = append(out, fmt.Sprintf("partition %d at offset %d of %d", p, next[p], e))
			}
		}
		slices.Sort(out)
		return out
	}
	for idle := 0; len(left()) > 0; {
		pctx, cancel := context.WithTimeout(ctx, pollTimeout)
		fs := cl.PollFetches(pctx)
		cancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var ferr error
		fs.EachError(func(_ string, _ int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) {
				ferr = err
			}
		})
		if ferr != nil {
			return ferr
		}
		if fs.NumRecords() == 0 {
			if idle++; idle >= dlqMaxIdlePolls {
				return fmt.Errorf("%s: nothing read for %d polls of %s, and not at its end (%s): check that this user may read it and that no other replay holds the group, then run again (it resumes)", topic, idle, pollTimeout, strings.Join(left(), ", "))
			}
			continue
		}
		idle = 0
		for _, r := range fs.Records() {
			if err := each(r); err != nil {
				return err
			}
			next[r.Partition] = r.Offset + 1
		}
	}
	return nil
}

// replayTarget checks that topic is one replay may produce to: a table
// topic of the pipeline of prefix. A name under the prefix that is also
// another pipeline's own topic ("<prefix>.x-schemas" is the registry of
// the pipeline "<prefix>.x"; so for -state and -dlq) is refused: a forged
// dead letter must never write a registry or a state topic. A table
// whose own name ends so cannot be replayed (copy it again instead).
// Table topics of a nested pipeline stay possible targets; its sink
// dead-letters records whose table is not their topic's.
func replayTarget(prefix, topic string) error {
	rest, ok := strings.CutPrefix(topic, prefix+".")
	if !ok || rest == "" {
		return fmt.Errorf("its topic %q is not a table topic of this pipeline (%s.*)", topic, prefix)
	}
	for _, own := range []func(string) string{SchemasTopic, StateTopic, DeadLetterTopic} {
		suffix := own("")
		if strings.HasSuffix(topic, suffix) {
			return fmt.Errorf("its topic %q is named as the %s topic of the pipeline %q, which replay never writes; if it is a table's topic, copy the table again (capture --resnapshot)", topic, strings.TrimPrefix(suffix, "-"), strings.TrimSuffix(topic, suffix))
		}
	}
	return nil
}

// dlqLost is the error of a replay that found dead letters [from, to) of
// partition deleted before its group replayed them.
func dlqLost(topic, group string, partition int32, from, to int64) error {
	return fmt.Errorf("dead letters lost: offsets %d to %d of %s partition %d were deleted by Kafka (retention) before replay group %s replayed them; their changes are missing from ClickHouse. "+
		"Copy the tables they belonged to again (walhouse capture --resnapshot; the sink's log named each dead letter's table when it set it aside), then replay the rest under a new --replay-group",
		from, to-1, topic, partition, group)
}
