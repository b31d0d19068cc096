package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walhouse/walhouse/kafka"
	"github.com/walhouse/walhouse/record"
	"github.com/walhouse/walhouse/sink"
)

func runDLQ(ctx context.Context, inv *invocation) error {
	sub := inv.subcommand()
	fs, ep := newFlagSet("dlq", usesKafka)
	prefix := fs.String("topic-prefix", envOr("WALHOUSE_TOPIC_PREFIX", "walhouse"), "topic prefix of the pipeline (env WALHOUSE_TOPIC_PREFIX)")
	topic := fs.String("dlq-topic", envOr("WALHOUSE_DLQ_TOPIC", ""), "dead-letter topic (default <prefix>-dlq; env WALHOUSE_DLQ_TOPIC)")
	maxRecord := maxRecordBytesFlag(fs)
	group := fs.String("replay-group", "walhouse-dlq-replay", "consumer group that remembers what replay already re-produced")
	if err := inv.parse(fs); err != nil {
		return err
	}
	if sub != "list" && sub != "replay" {
		return usageErrorf("want a subcommand: list (print the records in the dead-letter topic as JSON lines) or replay (produce them again to their original topics, once per replay group)")
	}
	if *topic == "" {
		*topic = kafka.DeadLetterTopic(*prefix)
	}
	kc, err := ep.kafkaConfig()
	if err != nil {
		return err
	}
	if err := record.ValidateMaxBytes(*maxRecord); err != nil {
		return fmt.Errorf("--max-record-bytes: %w", err)
	}
	limits := kafka.RecordLimitOpts(*maxRecord)
	if sub == "list" {
		return dlqList(ctx, kc, *topic, limits)
	}
	return dlqReplay(ctx, kc, *topic, *group, *prefix, limits)
}

// dlqEnd returns the end offset of each partition of topic, so list and
// replay stop at what existed when they started.
func dlqEnd(ctx context.Context, cl *kgo.Client, topic string) (map[int32]int64, error) {
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("read the end of %s: %w", topic, err)
	}
	out := map[int32]int64{}
	var lerr error
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			lerr = fmt.Errorf("read the end of %s: %w", topic, o.Err)
		}
		out[o.Partition] = o.Offset
	})
	return out, lerr
}

// readToEnd polls cl, which consumes topic, until every partition reached
// the end offset it had when readToEnd started.
func readToEnd(ctx context.Context, cl *kgo.Client, topic string, each func(*kgo.Record) error) error {
	ends, err := dlqEnd(ctx, cl, topic)
	if err != nil {
		return err
	}
	next := map[int32]int64{}
	done := func() bool {
		for p, e := range ends {
			if next[p] < e {
				return false
			}
		}
		return true
	}
	for !done() {
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
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
		for _, r := range fs.Records() {
			if err := each(r); err != nil {
				return err
			}
			next[r.Partition] = r.Offset + 1
		}
		if fs.NumRecords() == 0 {
			// Nothing more to read (for example a group already past the end).
			break
		}
	}
	return nil
}

func dlqList(ctx context.Context, kc kafka.Config, topic string, limits []kgo.Opt) error {
	cl, err := kafka.NewClient(ctx, kc, append(limits, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
	if err != nil {
		return err
	}
	defer cl.Close()
	enc := json.NewEncoder(os.Stdout)
	n := 0
	err = readToEnd(ctx, cl, topic, func(r *kgo.Record) error {
		l, err := sink.ParseDeadLetter(r)
		if err != nil {
			// Not written by walhouse: shown, not trusted, and no reason
			// to stop listing the others.
			n++
			return enc.Encode(map[string]any{"dlqOffset": r.Offset, "unreadable": err.Error(),
				"key": string(r.Key), "value": json.RawMessage(validJSON(r.Value))})
		}
		n++
		out := map[string]any{
			"dlqOffset": r.Offset, "origin": l.Origin, "topic": l.Topic, "partition": l.Partition, "offset": l.Offset,
			"error": l.Err.Error(), "firstSeen": l.FirstSeen, "attempts": l.Attempts, "valueDropped": l.ValueDropped,
			"key": string(l.Key), "value": json.RawMessage(validJSON(l.Value)),
		}
		if l.Reason != "" {
			out["reason"] = l.Reason
		}
		if l.Table != "" {
			out["table"], out["primaryKey"], out["commitLsn"] = l.Table, json.RawMessage(validJSON([]byte(l.PrimaryKey))), l.CommitLSN.String()
		}
		return enc.Encode(out)
	})
	fmt.Fprintf(os.Stderr, "%d dead-lettered records in %s\n", n, topic)
	return err
}

// validJSON returns b as JSON: itself when valid, else as a string; null
// when empty (a dead letter without its value).
func validJSON(b []byte) []byte {
	if len(b) == 0 {
		return []byte("null")
	}
	if json.Valid(b) {
		return b
	}
	q, _ := json.Marshal(string(b))
	return q
}

// dlqReplay produces the dead letters again to their table topics. A dead
// letter naming any other topic (the registry, the state topic, another
// pipeline's) is skipped: the dead-letter topic is read, not trusted.
func dlqReplay(ctx context.Context, kc kafka.Config, topic, group, prefix string, limits []kgo.Opt) error {
	cl, err := kafka.NewClient(ctx, kc, append(limits, kgo.ConsumeTopics(topic), kgo.ConsumerGroup(group),
		kgo.DisableAutoCommit(), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
	if err != nil {
		return err
	}
	defer cl.Close()
	n, skipped := 0, 0
	err = readToEnd(ctx, cl, topic, func(r *kgo.Record) error {
		l, err := sink.ParseDeadLetter(r)
		if err == nil && !strings.HasPrefix(l.Topic, prefix+".") {
			err = fmt.Errorf("its topic %q is not a table topic of this pipeline (%s.*)", l.Topic, prefix)
		}
		if err == nil && l.ValueDropped > 0 {
			err = fmt.Errorf("its %d-byte value was too large for the dead-letter topic and is not in it (%s/%d@%d); copy the row again with capture --resnapshot", l.ValueDropped, l.Topic, l.Partition, l.Offset)
		}
		if err == nil && len(l.Value) == 0 {
			err = fmt.Errorf("it has no record to replay (%s of %s, primary key %s): change the row in PostgreSQL once the cause is fixed, or copy the table again with --resnapshot", l.Reason, l.Table, l.PrimaryKey)
		}
		if err != nil {
			skipped++
			fmt.Fprintf(os.Stderr, "skipping dead letter at offset %d: %v\n", r.Offset, err)
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
		n++
		return nil
	})
	fmt.Fprintf(os.Stderr, "replayed %d records from %s, skipped %d\n", n, topic, skipped)
	return err
}
