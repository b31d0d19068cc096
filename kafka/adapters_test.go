package kafka_test

import (
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/walhouse/walhouse/capture"
	"github.com/walhouse/walhouse/kafka"
	"github.com/walhouse/walhouse/sink"
)

// The interfaces capture and the sink declare, satisfied by this package
// (and, for the sink's offsets, by kadm as it is).
var (
	_ capture.TopicCreator = (*kafka.TopicCreator)(nil)
	_ capture.StateStore   = (*kafka.State)(nil)
	_ sink.OffsetFetcher   = (*kadm.Client)(nil)
)
