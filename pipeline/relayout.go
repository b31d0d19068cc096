package pipeline

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walhouse/walhouse/kafka"
	"github.com/walhouse/walhouse/record"
	"github.com/walhouse/walhouse/registry"
)

// The columns of a table are where the sink takes them: the newest
// record of its topic (walhouse relayout rebuilds a table in them).

// NewestChange returns the newest change (by LSN) among the last records
// of each partition of topic, decoded with schemas, or nil when the topic
// holds none. It reads further back while it finds only heartbeats.
func NewestChange(ctx context.Context, kc kafka.Config, topic string, schemas *registry.Reader) (*record.Record, error) {
	cl, err := kafka.NewClient(ctx, kc)
	if err != nil {
		return nil, err
	}
	adm := kadm.NewClient(cl)
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err == nil {
		err = starts.Error()
	}
	var ends kadm.ListedOffsets
	if err == nil {
		ends, err = adm.ListEndOffsets(ctx, topic)
	}
	if err == nil {
		err = ends.Error()
	}
	cl.Close()
	if errors.Is(err, kerr.UnknownTopicOrPartition) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the offsets of topic %s: %w", topic, err)
	}
	// Capture registers a schema before the records that refer to it.
	if err := schemas.Refresh(ctx); err != nil {
		return nil, err
	}
	for back := int64(256); ; back *= 8 {
		from, to := map[int32]kgo.Offset{}, map[int32]int64{}
		whole := true
		ends.Each(func(o kadm.ListedOffset) {
			s, _ := starts.Lookup(topic, o.Partition)
			f := max(s.Offset, o.Offset-back)
			if f > s.Offset {
				whole = false
			}
			if f < o.Offset {
				from[o.Partition], to[o.Partition] = kgo.NewOffset().At(f), o.Offset
			}
		})
		if len(from) == 0 {
			return nil, nil
		}
		r, err := newestIn(ctx, kc, topic, from, to, schemas)
		if err != nil || r != nil || whole {
			return r, err
		}
	}
}

// newestIn reads the records of topic's partitions from the offsets from
// up to (not including) to and returns the newest change among them.
func newestIn(ctx context.Context, kc kafka.Config, topic string, from map[int32]kgo.Offset, to map[int32]int64, schemas *registry.Reader) (*record.Record, error) {
	cl, err := kafka.NewClient(ctx, kc, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: from}))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	var newest *record.Record
	for len(to) > 0 {
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		fetches := cl.PollFetches(pctx)
		cancel()
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if fetches.Empty() {
			break // transaction markers or compaction left the end unreachable
		}
		fetches.EachError(func(_ string, _ int32, e error) {
			if err == nil && !errors.Is(e, context.DeadlineExceeded) {
				err = e
			}
		})
		if err != nil {
			return nil, fmt.Errorf("read topic %s: %w", topic, err)
		}
		fetches.EachRecord(func(kr *kgo.Record) {
			if kr.Offset >= to[kr.Partition]-1 {
				delete(to, kr.Partition)
			}
			r, err := record.Decode(kr.Value, schemas)
			if err != nil || len(r.Columns) == 0 {
				return // a heartbeat, or a record the sink dead-letters
			}
			if newest == nil || r.LSN > newest.LSN {
				newest = r
			}
		})
	}
	return newest, nil
}
