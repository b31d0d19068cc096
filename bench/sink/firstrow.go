package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walhouse/walhouse/clickhouse"
	"github.com/walhouse/walhouse/internal/backoff"
	"github.com/walhouse/walhouse/kafka"
	"github.com/walhouse/walhouse/pipeline"
	"github.com/walhouse/walhouse/record"
	"github.com/walhouse/walhouse/registry"
	"github.com/walhouse/walhouse/sink"
)

// refresh is a metadata refresh setting of the sink's client.
type refresh struct {
	label string
	opts  []kgo.Opt // after sink.ClientOpts (pipeline.SinkSettings.ClientOpts)
	// watch runs the sink's pipeline.TopicWatch, as walhouse sink does:
	// the table's schema registry entry forces the refresh.
	watch bool
}

// timing is how soon after its topic's creation a new table's topic was
// consumed by the sink's group client (what the metadata refresh decides)
// and its first row loaded (that, then up to two fetch waits, --max-wait).
type timing struct{ found, loaded time.Duration }

// firstRows measures, per metadata refresh setting, how soon the first row
// of a new table's topic is loaded (from the topic's creation, as capture
// creates it, then registers the table's schema and produces) and the CPU
// the sink and Kafka spend while the pipeline is idle. Each table has
// columns of its own, so its schema is a new registry entry.
func (b *bench) firstRows(ctx context.Context, cl *kgo.Client) error {
	tables := b.o.firstRowTables
	const idle = 20 * time.Second
	settings := []refresh{
		{"10s (oldest)", []kgo.Opt{kgo.MetadataMinAge(5 * time.Second), kgo.MetadataMaxAge(10 * time.Second)}, false},
		{sink.NewTopicsWithin.String() + " (sink.ClientOpts)", nil, false},
		{sink.NewTopicsWithin.String() + " + registry watch", nil, true},
	}
	b.schemas.Add(record.Schema{TenantColumn: "tenant_id", Columns: columns})
	fmt.Printf("first row of %d new tables and %v idle, per metadata refresh of the sink\n\n", tables, idle)
	fmt.Printf("%-26s %27s   %27s   %s\n", "", "topic consumed after", "first row loaded after", "")
	fmt.Printf("%-26s %9s %8s %8s   %9s %8s %8s   %s\n", "metadata refresh", "p50", "max", "min", "p50", "max", "min", "idle CPU s/min: sink kafka")
	ms := func(d time.Duration) time.Duration { return d.Round(time.Millisecond) }
	for i, st := range settings {
		ts, cpu, err := b.firstRowsWith(ctx, cl, fmt.Sprintf("%s_m%d", b.name, i), st, tables, idle)
		if err != nil {
			return fmt.Errorf("metadata refresh %s: %w", st.label, err)
		}
		var found, loaded []time.Duration
		for _, t := range ts {
			found, loaded = append(found, t.found), append(loaded, t.loaded)
		}
		slices.Sort(found)
		slices.Sort(loaded)
		perMin := 60 / idle.Seconds()
		fmt.Printf("%-26s %9s %8s %8s   %9s %8s %8s   %.2f %.2f\n", st.label,
			ms(found[len(found)/2]), ms(found[len(found)-1]), ms(found[0]),
			ms(loaded[len(loaded)/2]), ms(loaded[len(loaded)-1]), ms(loaded[0]), cpu.sink*perMin, cpu.services[1]*perMin)
	}
	return nil
}

func (b *bench) firstRowsWith(ctx context.Context, cl *kgo.Client, prefix string, st refresh, tables int, idle time.Duration) ([]timing, cpuUse, error) {
	var cpu cpuUse
	conn, err := clickhouse.Open(ctx, b.o.env.ClickHouse)
	if err != nil {
		return nil, cpu, err
	}
	defer conn.Close()
	b.databases = append(b.databases, prefix)
	w, err := clickhouse.NewWriter(ctx, conn, prefix, "")
	if err != nil {
		return nil, cpu, err
	}
	snk, scl, err := b.newSink(ctx, pipeline.SinkSettings{Group: prefix, Prefix: prefix, Schemas: staticSchemas{&b.schemas}, ClientOpts: st.opts}, w)
	if err != nil {
		return nil, cpu, err
	}
	defer scl.CloseAllowingRebalance()
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- snk.Run(rctx) }()
	schemasTopic := kafka.SchemasTopic(prefix)
	b.topics = append(b.topics, schemasTopic)
	schemas := registry.NewWriter(cl, schemasTopic, -1)
	if st.watch {
		w, err := pipeline.WatchTopics(ctx, b.kafkaConfig(), prefix, scl)
		if err != nil {
			return nil, cpu, err
		}
		watched := make(chan error, 1)
		go func() { watched <- w.Run(rctx) }()
		defer func() { stop(); <-watched }()
	}

	// addTable creates table n's topic, registers its schema, produces its
	// first row and returns how long until the sink consumed the topic and
	// loaded the row.
	addTable := func(n int) (timing, error) {
		var t timing
		src := record.Source{ID: prefix, Schema: "public", Table: fmt.Sprintf("t%d", n)}
		topic := record.TopicName(prefix, src.Schema, src.Table)
		start := time.Now()
		if err := b.createTopic(ctx, cl, topic, 1); err != nil {
			return t, err
		}
		own := append(slices.Clone(columns), record.Column{Name: fmt.Sprintf("t%d_note", n), Type: "text", TypMod: -1, Attnum: int16(len(columns) + 1)})
		if err := schemas.Register(ctx, record.Schema{TenantColumn: "tenant_id", Columns: own}); err != nil {
			return t, err
		}
		r := syntheticRow(src, n, false)
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Key: []byte(r.PartitionKey()), Value: record.AppendJSON(nil, r)}).FirstErr(); err != nil {
			return t, err
		}
		for snk.Loaded() < int64(n+1) {
			if t.found == 0 && slices.Contains(scl.GetConsumeTopics(), topic) {
				t.found = time.Since(start)
			}
			select {
			case err := <-done:
				return t, fmt.Errorf("sink stopped: %w", err)
			case <-ctx.Done():
				return t, ctx.Err()
			case <-time.After(5 * time.Millisecond):
			}
		}
		t.loaded = time.Since(start)
		if t.found == 0 {
			t.found = t.loaded
		}
		return t, nil
	}
	// The first table makes the sink join its group and find ClickHouse.
	if _, err := addTable(0); err != nil {
		return nil, cpu, err
	}
	cpu0 := cpuSeconds()
	if err := backoff.Sleep(ctx, idle); err != nil {
		return nil, cpu, err
	}
	cpu = cpuSeconds().minus(cpu0)
	var lat []timing
	for n := 1; n <= tables; n++ {
		// At a random point of the periodic refresh: each table taking
		// about one period to load would otherwise lock every table to the
		// same phase of it, and measure that phase.
		if err := backoff.Sleep(ctx, rand.N(sink.NewTopicsWithin)); err != nil {
			return nil, cpu, err
		}
		d, err := addTable(n)
		if err != nil {
			return nil, cpu, err
		}
		lat = append(lat, d)
	}
	return lat, cpu, nil
}
