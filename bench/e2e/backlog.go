package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/walhouse/walhouse/record"
)

// backlog samples, every second, how many records the steady table's
// topic gained and how many of the step's rows ClickHouse shows, from the
// step's start.
type backlog struct {
	start   time.Time
	stop    context.CancelFunc
	wg      sync.WaitGroup
	samples []backlogSample
}

type backlogSample struct {
	at             time.Duration // since the step started
	kafka, visible int64
}

// startBacklog starts sampling topic and the step's rows of target.
func (b *bench) startBacklog(ctx context.Context, topic, target string, step int) (*backlog, error) {
	base, err := b.topicRecords(ctx, topic)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	bl := &backlog{start: time.Now(), stop: cancel}
	bl.wg.Add(1)
	go func() {
		defer bl.wg.Done()
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			n, err := b.topicRecords(ctx, topic)
			var visible uint64
			if err == nil {
				err = b.ch.QueryRow(ctx, fmt.Sprintf("SELECT count() FROM %s WHERE step = %d", target, step)).Scan(&visible)
			}
			if err == nil {
				bl.samples = append(bl.samples, backlogSample{at: time.Since(bl.start), kafka: n - base, visible: int64(visible)})
			}
		}
	}()
	return bl, nil
}

// finish stops the sampling.
func (bl *backlog) finish() *backlog {
	bl.stop()
	bl.wg.Wait()
	return bl
}

// max returns the most rows behind capture (committed at rate, up to
// rows in all, but not in Kafka) and behind the sink (in Kafka, not
// visible) over the samples.
func (bl *backlog) max(rate float64, rows int64) (capture, sink int64) {
	for _, s := range bl.samples {
		committed := min(int64(rate*s.at.Seconds()), rows)
		capture = max(capture, committed-s.kafka)
		sink = max(sink, s.kafka-s.visible)
	}
	return capture, sink
}

// topicRecords returns the sum of the end offsets of topic's partitions.
func (b *bench) topicRecords(ctx context.Context, topic string) (int64, error) {
	ends, err := b.adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return 0, fmt.Errorf("read the end offsets of %s: %w", topic, err)
	}
	if err := ends.Error(); err != nil {
		return 0, fmt.Errorf("read the end offsets of %s: %w", topic, err)
	}
	var n int64
	ends.Each(func(o kadm.ListedOffset) { n += o.Offset })
	return n, nil
}

// topic returns the Kafka topic of table (of schema public).
func (p *pipeline) topic(table string) string { return record.TopicName(p.name, "public", table) }
