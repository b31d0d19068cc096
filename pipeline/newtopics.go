package pipeline

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"

	"github.com/walhouse/walhouse/kafka"
	"github.com/walhouse/walhouse/sink"
)

// TopicWatch makes a sink with a pattern subscription consume a table's
// new topic as soon as capture registered the table's schema, instead of
// at its group client's periodic metadata refresh (sink.NewTopicsWithin,
// which stays the fallback): it watches the schema registry topic and
// forces the group client's refresh (sink.TopicRefresh) after each new
// entry. Capture creates a joining table's topic, and the topics of an
// initial copy, before it registers their schemas, so the refresh finds
// them. A table whose columns match a schema this capture process
// registered before writes no entry, and is found by the periodic
// refresh.
type TopicWatch struct {
	refresh *sink.TopicRefresh
	cl      *kgo.Client // the watch's own: one topic's metadata, cheap to refresh
	topic   string
}

// WatchTopics returns the TopicWatch of the sink whose group client is
// group, for the topics of prefix. Run runs it; it closes its client
// when Run returns.
func WatchTopics(ctx context.Context, kc kafka.Config, prefix string, group *kgo.Client) (*TopicWatch, error) {
	// Its metadata names one topic, so it may look for a registry that
	// does not exist yet as often as the group client looks for tables.
	cl, err := kafka.NewClient(ctx, kc, kgo.MetadataMinAge(sink.NewTopicsWithin/2), kgo.MetadataMaxAge(sink.NewTopicsWithin))
	if err != nil {
		return nil, fmt.Errorf("schema registry watch: %w", err)
	}
	return &TopicWatch{refresh: sink.NewTopicRefresh(group.ForceMetadataRefresh), cl: cl, topic: kafka.SchemasTopic(prefix)}, nil
}

// Run watches until ctx ends, then closes the watch's client and returns
// nil.
func (w *TopicWatch) Run(ctx context.Context) error {
	defer w.cl.Close()
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return w.refresh.Run(gctx) })
	g.Go(func() error {
		return kafka.Watch(gctx, w.cl, w.topic, w.refresh.Signal, slog.Default().With("component", "sink"))
	})
	return g.Wait()
}

// Forced returns the metadata refreshes forced so far.
func (w *TopicWatch) Forced() int64 { return w.refresh.Forced() }

// Metrics are the watch's counter of forced refreshes.
func (w *TopicWatch) Metrics() []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "walhouse_sink_metadata_refreshes_forced_total",
			Help: "Metadata refreshes of the sink's group client forced by a new schema registry entry, so a new table's topic is consumed at once rather than at the periodic refresh (every second)."},
			func() float64 { return float64(w.Forced()) }),
	}
}
