package sink

import (
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// NewTopicsWithin is how soon a sink that consumes topics by a pattern
// notices a table's new topic at the latest: its client's periodic
// metadata refresh (see ClientOpts). A TopicRefresh (walhouse sink's watch
// of the schema registry) makes it notice most at once.
const NewTopicsWithin = time.Second

// DefaultFetchMinBytes is how much a fetch waits for, at most maxWait
// (ClientOpts): 1 MiB makes a busy table's flushes come faster than
// maxWait (about 3 a second at 30,000 rows/s), for lower lag; a minimum
// above what a table writes in maxWait (16 MiB) holds them to about one
// per maxWait at any rate, for fewer inserts, at up to maxWait more lag.
const DefaultFetchMinBytes = 1 << 20

// ClientOpts returns the fetch and metadata settings the sink is tuned for,
// for its consumer-group client, next to the options New requires:
//
//   - a fetch waits for minBytes (DefaultFetchMinBytes when 0) or maxWait,
//     whichever comes first, and takes up to 16 MiB of a partition, so
//     batches grow on the broker;
//   - the client reads the cluster's metadata every NewTopicsWithin
//     (franz-go's default is 5 minutes), so the topic of a table that
//     joins the pipeline is consumed within about a second (its first row
//     loaded after 1.0 s instead of 10 s) even when nothing announces it.
//     A metadata request a second cost the idle sink 0.03 CPU seconds a
//     minute and the broker nothing measurable (bench/sink -first-row); it
//     grows with the topics of the cluster, which a pattern subscription
//     asks about. A table whose schema capture registers is found sooner:
//     the registry entry forces a refresh (TopicRefresh).
func ClientOpts(maxWait time.Duration, minBytes int32) []kgo.Opt {
	if minBytes <= 0 {
		minBytes = DefaultFetchMinBytes
	}
	return []kgo.Opt{
		kgo.FetchMinBytes(minBytes),
		kgo.FetchMaxWait(maxWait),
		kgo.FetchMaxPartitionBytes(16 << 20),
		kgo.MetadataMinAge(NewTopicsWithin / 2),
		kgo.MetadataMaxAge(NewTopicsWithin),
	}
}
