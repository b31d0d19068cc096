package sink

import (
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// NewTopicsWithin is how soon a sink that consumes topics by a pattern
// notices a table's new topic: its client's metadata refresh (see
// ClientOpts).
const NewTopicsWithin = time.Second

// ClientOpts returns the fetch and metadata settings the sink is tuned for,
// for its consumer-group client, next to the options New requires:
//
//   - a fetch waits for 1 MiB or maxWait, whichever comes first, and takes
//     up to 16 MiB of a partition, so batches grow on the broker;
//   - the client reads the cluster's metadata every NewTopicsWithin
//     (franz-go's default is 5 minutes), so the topic of a table that
//     joins the pipeline is consumed within about a second (its first row
//     loaded after 1.1 s instead of 10 s). A metadata request a second
//     cost the idle sink 0.03 CPU seconds a minute and the broker nothing
//     measurable (bench/sink -first-row); it grows with the topics of the
//     cluster, which a pattern subscription asks about.
func ClientOpts(maxWait time.Duration) []kgo.Opt {
	return []kgo.Opt{
		kgo.FetchMinBytes(1 << 20),
		kgo.FetchMaxWait(maxWait),
		kgo.FetchMaxPartitionBytes(16 << 20),
		kgo.MetadataMinAge(NewTopicsWithin / 2),
		kgo.MetadataMaxAge(NewTopicsWithin),
	}
}
