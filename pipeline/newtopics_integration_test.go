package pipeline_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walhouse/walhouse/harness/testenv"
	"github.com/walhouse/walhouse/kafka"
	"github.com/walhouse/walhouse/pipeline"
	"github.com/walhouse/walhouse/record"
	"github.com/walhouse/walhouse/registry"
	"github.com/walhouse/walhouse/sink"
)

// tables is a sink.Loader that notes the tables it loaded.
type tables struct {
	mu      sync.Mutex
	loaded  map[string]bool
	more    chan struct{} // a value after each load
	stopped chan error    // the sink's Run returned
}

func (l *tables) Load(_ context.Context, b sink.Batch) error {
	l.mu.Lock()
	l.loaded[b.Source.Table] = true
	l.mu.Unlock()
	select {
	case l.more <- struct{}{}:
	default:
	}
	return nil
}

// waitLoaded waits until table was loaded, or ctx ends.
func (l *tables) waitLoaded(ctx context.Context, t *testing.T, table, why string) {
	t.Helper()
	for {
		l.mu.Lock()
		done := l.loaded[table]
		l.mu.Unlock()
		if done {
			return
		}
		select {
		case <-l.more:
		case <-time.After(50 * time.Millisecond):
		case err := <-l.stopped:
			t.Fatalf("the sink stopped before table %s loaded: %v", table, err)
		case <-ctx.Done():
			t.Fatalf("table %s never loaded: %s", table, why)
		}
	}
}

// A table's topic created after the sink started is consumed once its
// schema is in the registry: the watch forces the group client's metadata
// refresh. The client's periodic refresh is set past the test's end here,
// so only the forced one can find the topic.
func TestIntegrationSinkFindsNewTopicBySchema(t *testing.T) {
	env := testenv.Require(t, "kafka")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	kc := kafka.Config{Brokers: strings.Split(env.Kafka, ",")}
	prefix := testenv.Name("newtopic")
	cl, err := kafka.NewClient(ctx, kc)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	t.Cleanup(func() { _ = testenv.DeleteTopicsWithPrefix(context.Background(), kadm.NewClient(cl), prefix) })
	schemas := registry.NewWriter(cl, kafka.SchemasTopic(prefix), -1)
	creator := kafka.Topics(cl, record.DefaultMaxBytes)

	// addTable does what capture does for a table joining the pipeline:
	// creates its topic, registers its schema, produces its first row.
	addTable := func(table string) {
		t.Helper()
		topic := record.TopicName(prefix, "public", table)
		if err := creator.CreateTopic(ctx, topic, 1, -1); err != nil {
			t.Fatal(err)
		}
		cols := []record.Column{
			{Name: "tenant_id", Type: "text", TypMod: -1, Key: true, Attnum: 1},
			{Name: "id", Type: "int8", TypMod: -1, Key: true, Attnum: 2},
			{Name: table + "_note", Type: "text", TypMod: -1, Attnum: 3},
		}
		if err := schemas.Register(ctx, record.Schema{TenantColumn: "tenant_id", Columns: cols}); err != nil {
			t.Fatal(err)
		}
		at := time.Now().UTC()
		src := record.Source{ID: prefix, Schema: "public", Table: table}
		r := &record.Record{EventID: record.EventID(src.ID, 0x100, 0, at), OccurredAt: at, IngestedAt: at,
			TenantID: "acme", TenantColumn: "tenant_id", Source: src, LSN: 0x100, CommitLSN: 0x100, Version: record.Version(0x100),
			Op: record.Insert, Columns: cols, SchemaID: record.SchemaID("tenant_id", cols),
			Values: []record.Value{{Text: "acme"}, {Text: "1"}, {Text: "first row"}}}
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Key: []byte(r.PartitionKey()), Value: record.AppendJSON(nil, r)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}

	addTable("before") // found by the client's first metadata read
	l := &tables{loaded: map[string]bool{}, more: make(chan struct{}, 1), stopped: make(chan error, 1)}
	reader, closeReader, err := pipeline.SchemaReader(ctx, kc, prefix)
	if err != nil {
		t.Fatal(err)
	}
	defer closeReader()
	never := []kgo.Opt{kgo.MetadataMinAge(10 * time.Minute), kgo.MetadataMaxAge(10 * time.Minute)}
	snk, scl, err := pipeline.Sink(ctx, kc, l, pipeline.SinkSettings{Group: prefix, Prefix: prefix, DLQ: "off", MaxWait: 100 * time.Millisecond, Schemas: reader, ClientOpts: never})
	if err != nil {
		t.Fatal(err)
	}
	defer scl.CloseAllowingRebalance()
	watch, err := pipeline.WatchTopics(ctx, kc, prefix, scl)
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { stop(); wg.Wait() }()
	wg.Add(2)
	go func() { defer wg.Done(); l.stopped <- snk.Run(rctx) }()
	go func() { defer wg.Done(); _ = watch.Run(rctx) }()
	l.waitLoaded(ctx, t, "before", "the sink did not consume a topic that existed at its start")

	forced := watch.Forced()
	addTable("after")
	l.waitLoaded(ctx, t, "after", "no forced metadata refresh found its topic")
	if got := watch.Forced(); got <= forced {
		t.Errorf("forced refreshes %d, before the new table %d: want more", got, forced)
	}
}
