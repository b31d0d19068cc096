package pipeline

import (
	"context"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"

	"github.com/walhouse/walhouse/capture"
	"github.com/walhouse/walhouse/kafka"
	"github.com/walhouse/walhouse/registry"
)

// CaptureRun is everything `walhouse capture` runs: capture, its Kafka
// topics, and its metrics, status and health.
type CaptureRun struct {
	// PG is the connection string of the captured database, with its
	// password.
	PG    string
	Kafka kafka.Config
	// Slot is the replication slot, named in the status document (the
	// capture.WithSlot option sets it for capture).
	Slot string
	// Prefix is the topic prefix (capture.WithTopicPrefix sets it for
	// capture); DLQ the dead-letter topic, for the durability check.
	Prefix, DLQ string
	// Replication and MinInsync are the replication factor and
	// min.insync.replicas of the topics capture creates (-1: the broker's
	// default).
	Replication    int16
	MinInsync      int
	MaxRecordBytes int
	// Durability is the check of the pipeline's topics at start.
	Durability kafka.DurabilityMode
	// Options are capture's options from the settings; RunCapture adds its
	// Kafka's (CaptureKafka, the state store, the re-copy topic).
	Options []capture.Option
	HTTP    HTTP
	// LogAttrs are what the start line names: the endpoints as given,
	// without their secrets.
	LogAttrs []any
}

// RunCapture builds capture of r and runs it until ctx ends or it fails.
func RunCapture(ctx context.Context, r CaptureRun) error {
	slog.Info("capture: starting", r.LogAttrs...)
	cl, err := kafka.NewClient(ctx, r.Kafka, kafka.ProducerOpts(r.MaxRecordBytes, capture.Partitioner())...)
	if err != nil {
		return err
	}
	defer cl.Close()
	if err := kafka.CheckProducer(cl); err != nil {
		return err
	}
	topicOpts := []kafka.TopicOption{kafka.MinInsyncReplicas(r.MinInsync)}
	state, err := kafka.NewState(ctx, cl, kafka.StateTopic(r.Prefix), r.Replication, topicOpts...)
	if err != nil {
		return err
	}
	// Sinks run with --recopy-on-gap ask for copies here.
	recopies, err := kafka.NewRecopies(ctx, cl, r.Prefix, r.Replication, slog.Default().With("component", "capture"), topicOpts...)
	if err != nil {
		return err
	}
	defer recopies.Close()
	// The state and re-copy topics exist now, made as the tables' topics
	// will be: what the check finds in them holds for those too.
	if err := kafka.EnforceDurability(ctx, cl, kafka.PipelineTopics(r.Prefix, r.DLQ), r.Durability, slog.Default().With("component", "capture")); err != nil {
		return err
	}
	opts := append(append(r.Options, CaptureKafka(cl, r.Prefix, r.Replication, r.MaxRecordBytes, topicOpts...)...), capture.WithStateStore(state), capture.WithRecopies(recopies))
	c, err := capture.New(r.PG, cl, opts...)
	if err != nil {
		return err
	}
	if r.HTTP.Addr == "" {
		return c.Run(ctx)
	}
	reg := prometheus.NewRegistry()
	if err := capture.RegisterMetrics(reg, c); err != nil {
		return err
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return r.HTTP.ServeCapture(gctx, reg, NewCaptureStatus(r.Slot, c)) })
	g.Go(func() error { return c.Run(gctx) })
	return g.Wait()
}

// CaptureKafka wires a Capturer of the pipeline with the given topic prefix
// to Kafka through its producer cl: the tables' topics are created sized
// for maxRecordBytes, and the schemas that version 2 records refer to are
// registered in the pipeline's registry topic (created with the given
// replication factor); topicOpts set further settings of every topic it
// creates (kafka.MinInsyncReplicas).
func CaptureKafka(cl *kgo.Client, prefix string, replication int16, maxRecordBytes int, topicOpts ...kafka.TopicOption) []capture.Option {
	return []capture.Option{
		capture.WithTopicCreator(kafka.Topics(cl, maxRecordBytes, topicOpts...)),
		capture.WithSchemaRegistry(registry.NewWriter(cl, kafka.SchemasTopic(prefix), replication, topicOpts...)),
	}
}
