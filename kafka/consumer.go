package kafka

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/walhouse/walhouse/sink"
)

// Consumer adapts a franz-go consumer-group client to sink.Consumer: it
// polls, pauses and allows rebalances as the client does, and commits
// offsets with the sink's metadata (its batch intents) in place of the
// member id franz-go writes. The sink reads that metadata back through
// a *kadm.Client, which satisfies sink.OffsetFetcher as it is.
func Consumer(cl *kgo.Client) sink.Consumer { return consumer{cl} }

type consumer struct{ *kgo.Client }

// Commit commits offsets synchronously, each with its metadata, and
// returns the first error of any partition.
func (k consumer) Commit(ctx context.Context, offsets []sink.Offset) error {
	m := map[string]map[int32]kgo.EpochOffset{}
	meta := map[string]map[int32]string{}
	for _, o := range offsets {
		if m[o.Topic] == nil {
			m[o.Topic] = map[int32]kgo.EpochOffset{}
			meta[o.Topic] = map[int32]string{}
		}
		m[o.Topic][o.Partition] = kgo.EpochOffset{Epoch: o.Epoch, Offset: o.At}
		meta[o.Topic][o.Partition] = o.Metadata
	}
	// franz-go writes the member id as metadata; replace it with ours.
	cctx := kgo.PreCommitFnContext(ctx, func(req *kmsg.OffsetCommitRequest) error {
		for i := range req.Topics {
			for j := range req.Topics[i].Partitions {
				p := &req.Topics[i].Partitions[j]
				md := meta[req.Topics[i].Topic][p.Partition]
				p.Metadata = &md
			}
		}
		return nil
	})
	var cerr error
	k.CommitOffsetsSync(cctx, m, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		if err != nil {
			cerr = err
			return
		}
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if err := kerr.ErrorForCode(p.ErrorCode); err != nil && cerr == nil {
					cerr = fmt.Errorf("commit %s/%d: %w", t.Topic, p.Partition, err)
				}
			}
		}
	})
	return cerr
}
