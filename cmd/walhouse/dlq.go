package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walhouse/walhouse/cli"
	"github.com/walhouse/walhouse/kafka"
	"github.com/walhouse/walhouse/record"
)

func runDLQ(ctx context.Context, inv *cli.Invocation) error {
	sub := inv.Subcommand()
	fs, ep := cli.NewFlagSet("dlq", cli.UsesKafka)
	prefix := fs.String("topic-prefix", "walhouse", "topic prefix of the pipeline")
	topic := fs.String("dlq-topic", "", "dead-letter topic (default <prefix>-dlq)")
	maxRecord := cli.MaxRecordBytesFlag(fs)
	group := fs.String("replay-group", "walhouse-dlq-replay", "consumer group that remembers what replay already re-produced")
	if err := inv.Parse(fs); err != nil {
		return err
	}
	if sub != "list" && sub != "replay" {
		return cli.Usagef("want a subcommand: list (print the records in the dead-letter topic as JSON lines) or replay (produce them again to their original topics, once per replay group)")
	}
	if *topic == "" {
		*topic = kafka.DeadLetterTopic(*prefix)
	}
	kc, err := ep.KafkaConfig()
	if err != nil {
		return err
	}
	if err := record.ValidateMaxBytes(*maxRecord); err != nil {
		return cli.Usagef("--max-record-bytes: %w", err)
	}
	limits := kafka.RecordLimitOpts(*maxRecord)
	if sub == "list" {
		return dlqList(ctx, kc, *topic, limits)
	}
	return dlqReplay(ctx, kc, *topic, *group, *prefix, limits)
}

func dlqList(ctx context.Context, kc kafka.Config, topic string, limits []kgo.Opt) error {
	enc := json.NewEncoder(os.Stdout)
	n, err := kafka.ListDeadLetters(ctx, kc, topic, limits, func(e kafka.DeadLetterEntry) error {
		l := e.Letter
		if e.Unreadable != nil {
			// Not written by walhouse: shown, not trusted, and no reason
			// to stop listing the others.
			return enc.Encode(map[string]any{"dlqOffset": e.Offset, "unreadable": e.Unreadable.Error(),
				"key": string(l.Key), "value": json.RawMessage(validJSON(l.Value))})
		}
		out := map[string]any{
			"dlqOffset": e.Offset, "origin": l.Origin, "topic": l.Topic, "partition": l.Partition, "offset": l.Offset,
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

// dlqReplay produces the dead letters again to their table topics
// (kafka.ReplayDeadLetters), saying on stderr what it skipped and did.
func dlqReplay(ctx context.Context, kc kafka.Config, topic, group, prefix string, limits []kgo.Opt) error {
	n, skipped, err := kafka.ReplayDeadLetters(ctx, kc, topic, group, prefix, limits, func(offset int64, why error) {
		fmt.Fprintf(os.Stderr, "skipping dead letter at offset %d: %v\n", offset, why)
	})
	fmt.Fprintf(os.Stderr, "replayed %d records from %s, skipped %d\n", n, topic, skipped)
	return err
}
