package monitor

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// Kafka deletes a topic's records by age (retention.ms) or size
// (retention.bytes), read or not. The probe reports what it already
// deleted before the sink's group read it (RecordsLost: the committed
// offset below the log start, which the sink also stops at) and what it is
// about to (NearRetention: unread records past half of retention.ms), so
// an operator can raise the retention or add sinks before the loss.

// lostOffsets returns the offsets a group committed at commit lost when its
// partition's log start moved to start: none when it committed nothing
// (commit < 0) or its commit is at or past the log start.
func lostOffsets(commit, start int64) int64 {
	if commit < 0 || start <= commit {
		return 0
	}
	return start - commit
}

// retentionConfig is the topic setting nearRetention reads.
const retentionConfig = "retention.ms"

// nearRetention returns, for each partition of unread (its first offset
// not consumed), the records before the first one younger than half its
// topic's retention.ms at now. Topics kept forever (retention.ms -1) are
// left out.
func (p *Probe) nearRetention(ctx context.Context, unread map[string]map[int32]int64, now time.Time) (map[string]map[int32]int64, error) {
	topics := make([]string, 0, len(unread))
	for t := range unread {
		topics = append(topics, t)
	}
	rcs, err := p.cfg.Kafka.DescribeTopicConfigs(ctx, topics...)
	if err != nil {
		return nil, err
	}
	byRetention := map[int64][]string{} // retention.ms → topics
	for _, rc := range rcs {
		if rc.Err != nil {
			return nil, fmt.Errorf("topic %s: %w", rc.Name, rc.Err)
		}
		for _, c := range rc.Configs {
			if c.Key != retentionConfig {
				continue
			}
			ms, err := strconv.ParseInt(c.MaybeValue(), 10, 64)
			if err != nil {
				return nil, fmt.Errorf("topic %s: %s=%q: %w", rc.Name, retentionConfig, c.MaybeValue(), err)
			}
			if ms > 0 {
				byRetention[ms] = append(byRetention[ms], rc.Name)
			}
		}
	}
	out := map[string]map[int32]int64{}
	for ms, ts := range byRetention {
		young, err := p.cfg.Kafka.ListOffsetsAfterMilli(ctx, now.UnixMilli()-ms/2, ts...)
		if err != nil {
			return nil, err
		}
		if err := young.Error(); err != nil {
			return nil, err
		}
		young.Each(func(o kadm.ListedOffset) {
			first, ok := unread[o.Topic][o.Partition]
			if !ok {
				return
			}
			if out[o.Topic] == nil {
				out[o.Topic] = map[int32]int64{}
			}
			out[o.Topic][o.Partition] = max(o.Offset-first, 0)
		})
	}
	return out, nil
}
