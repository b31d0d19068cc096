package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walhouse/walhouse/internal/backoff"
)

// Watch calls written after each fetch of topic that returned records,
// from the topic's start, until ctx ends; then it returns nil. It reads
// no record's content: it tells a caller that something was written (the
// sink's TopicRefresh, which the schema registry's entries tell that
// capture met a table). A compacted topic's entries are read once at the
// start, so written is called then too.
//
// cl must be created without consumer options (no group, no
// ConsumeTopics): Watch adds the topic (cl.AddConsumeTopics) and owns
// cl's consumption; the caller closes cl after Watch returned. A topic
// that does not exist yet is consumed from its start once cl's metadata
// finds it (within cl's MetadataMinAge of each try). Fetch errors are
// logged and waited out, never returned: a watch is a hint whose reader
// has a fallback.
func Watch(ctx context.Context, cl *kgo.Client, topic string, written func(), log *slog.Logger) error {
	if log == nil {
		log = slog.Default()
	}
	log = log.With("topic", topic)
	cl.AddConsumeTopics(topic)
	delay := backoff.ShortMin
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if fs.IsClientClosed() {
			return fmt.Errorf("watch %s: %w", topic, kgo.ErrClientClosed)
		}
		if fs.NumRecords() > 0 {
			written()
		}
		var failed error
		fs.EachError(func(_ string, partition int32, err error) {
			if !errors.Is(err, context.Canceled) {
				failed = errors.Join(failed, fmt.Errorf("partition %d: %w", partition, err))
			}
		})
		if failed == nil {
			delay = backoff.ShortMin
			continue
		}
		log.Warn("watching the topic failed; trying again", "err", failed, "retry_in", delay)
		if backoff.Sleep(ctx, delay) != nil {
			return nil
		}
		delay = backoff.Next(delay, backoff.ShortMax)
	}
}
