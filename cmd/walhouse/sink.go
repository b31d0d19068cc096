package main

import (
	"context"
	"flag"
	"regexp"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walhouse/walhouse/clickhouse"
	"github.com/walhouse/walhouse/sink"
)

func runSink(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("sink", flag.ContinueOnError)
	var ep endpoints
	ep.register(fs, false, true, true)
	var (
		group       = fs.String("group", envOr("WALHOUSE_GROUP", "walhouse-sink"), "Kafka consumer group (env WALHOUSE_GROUP)")
		prefix      = fs.String("topic-prefix", envOr("WALHOUSE_TOPIC_PREFIX", "walhouse"), "consume every topic <prefix>.* (env WALHOUSE_TOPIC_PREFIX)")
		maxBatch    = fs.Int("max-batch", 50_000, "most records loaded in one batch")
		partitionBy = fs.String("partition-by", "", "date/timestamp key column to partition tables by month (optional)")
	)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	conn, err := clickhouse.Open(ctx, ep.clickhouse)
	if err != nil {
		return err
	}
	defer conn.Close()
	w, err := clickhouse.NewWriter(ctx, conn, ep.database, *partitionBy)
	if err != nil {
		return err
	}
	cl, err := kafkaClient(ctx, ep.brokers(), consumerOpts(*group, *prefix)...)
	if err != nil {
		return err
	}
	defer cl.Close()
	s, err := sink.New(cl, w, sink.Config{MaxBatchRecords: *maxBatch})
	if err != nil {
		return err
	}
	return s.Run(ctx)
}

// consumerOpts are the consumer-group settings the sink relies on: manual
// commits after a successful load, no revocation while a batch is in
// flight, cooperative-sticky balancing (franz-go's default), and a short
// metadata refresh so new tables' topics are picked up quickly.
func consumerOpts(group, prefix string) []kgo.Opt {
	return []kgo.Opt{
		kgo.ConsumerGroup(group),
		kgo.ConsumeRegex(),
		kgo.ConsumeTopics("^" + regexp.QuoteMeta(prefix) + `\..+`),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.MetadataMaxAge(10 * time.Second),
		kgo.FetchMaxWait(500 * time.Millisecond),
	}
}
