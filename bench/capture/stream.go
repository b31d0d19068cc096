package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walhouse/walhouse/capture"
	"github.com/walhouse/walhouse/harness/testenv"
	"github.com/walhouse/walhouse/record"
)

// statusInterval is how often walhouse reports its confirmed position to
// PostgreSQL during the benchmark (default 5s): the measurement ends when the
// slot shows the last transaction confirmed, so a coarse interval would add
// up to 5s to walhouse's time.
const statusInterval = 100 * time.Millisecond

// pollInterval is how often the benchmark looks at a slot's position.
const pollInterval = 50 * time.Millisecond

// streaming measures reading a backlog: pg_recvlogical and walhouse each
// read it from their own slot, both created before the backlog at the same
// position. The slots are dropped when the phase ends.
func (b *bench) streaming(ctx context.Context) (err error) {
	var undo testenv.Cleanups
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		err = errors.Join(err, undo.Run(cctx))
	}()
	roles := []string{"recv", "stream"}
	if b.opts.profileDir != "" {
		roles = append(roles, "prof")
	}
	if err := b.createSlots(ctx, &undo, roles...); err != nil {
		return err
	}
	bl, err := b.fillTable(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("backlog: %d rows inserted in %.1fs, %.0f MB of WAL, last transaction at %s, WAL end %s\n",
		b.opts.rows, bl.took.Seconds(), float64(bl.walSize)/(1<<20), bl.lastTx, bl.end)
	ref, err := b.timeRecvlogical(ctx, bl)
	if err != nil {
		return err
	}
	wh, err := b.timeStreamingCapture(ctx, bl)
	if err != nil {
		return err
	}
	b.result.add(comparison{
		title: "streaming: backlog of row changes (one pgoutput slot each, same start)",
		ref:   ref, walhouse: wh, ratioTarget: 0.8, rssTarget: 165 << 20,
	})
	if b.opts.profileDir == "" {
		return nil
	}
	return b.profile(ctx, profileRequest{
		name: "stream", rows: int64(b.opts.rows),
		prefix: b.names.topicPrefix("prof"),
		opts:   []capture.Option{capture.WithSlot(b.names.slot("prof")), capture.WithoutSnapshot()},
		done:   func(s capture.Stats) bool { return s.Confirmed >= bl.lastTx },
	})
}

// timeRecvlogical times PostgreSQL's own client reading the backlog with
// pgoutput to /dev/null: how fast PostgreSQL can hand out the changes.
func (b *bench) timeRecvlogical(ctx context.Context, bl backlog) (measurement, error) {
	args := []string{
		"-d", b.opts.pgURL, "--slot", b.names.slot("recv"), "--start", "--no-loop",
		"-o", "proto_version=1", "-o", "publication_names=" + b.names.publication,
		"--endpos", bl.end.String(), "-f", "/dev/null",
	}
	return b.timeTool(ctx, "pg_recvlogical", int64(b.opts.rows), b.opts.recvBin, args)
}

// timeTool times a PostgreSQL tool (the baselines walhouse is compared
// with) running bin with args to its end, as measurement name over rows.
func (b *bench) timeTool(ctx context.Context, name string, rows int64, bin string, args []string) (measurement, error) {
	cpu := readServiceCPU(b.opts.localDir)
	p, err := testenv.StartProcess(ctx, testenv.ProcessRequest{Name: name, Bin: bin, Args: args})
	if err != nil {
		return measurement{}, err
	}
	defer p.Stop(5 * time.Second)
	if err := p.Wait(ctx); err != nil {
		return measurement{}, err
	}
	return measurement{
		name: name, rows: rows, took: time.Since(p.Started()),
		cpu: p.CPUSeconds(), services: readServiceCPU(b.opts.localDir).sub(cpu),
	}, nil
}

// timeStreamingCapture times `walhouse capture --snapshot never` from its
// start until its slot's confirmed position passes the last transaction,
// which it confirms only after Kafka acknowledged every record.
func (b *bench) timeStreamingCapture(ctx context.Context, bl backlog) (measurement, error) {
	slot, prefix := b.names.slot("stream"), b.names.topicPrefix("stream")
	args := []string{
		"capture", "--snapshot", "never", "--slot", slot, "--publication", b.names.publication,
		"--topic-prefix", prefix, "--tables", b.names.table, "--status-interval", statusInterval.String(),
	}
	cpu := readServiceCPU(b.opts.localDir)
	p, err := testenv.StartProcess(ctx, testenv.ProcessRequest{Name: "walhouse capture", Bin: b.bin, Args: args})
	if err != nil {
		return measurement{}, err
	}
	defer p.LogTo(b.opts.verbose)
	defer p.Stop(15 * time.Second)
	m := measurement{name: "walhouse capture", rows: int64(b.opts.rows)}
	err = b.poll(ctx, p, func(ctx context.Context) (bool, error) {
		l, _, err := b.slotPosition(ctx, slot)
		return l >= bl.lastTx, err
	})
	if err != nil {
		return m, err
	}
	m.took = time.Since(p.Started())
	m.cpu, m.services = p.CPUSeconds(), readServiceCPU(b.opts.localDir).sub(cpu)
	if m.rss, err = p.PeakRSS(); err != nil {
		return m, err
	}
	m.note = b.kafkaCount(ctx, prefix+"."+b.names.table)
	return m, nil
}

// poll calls done every pollInterval until it reports true, failing if the
// process exits first.
func (b *bench) poll(ctx context.Context, p *testenv.Process, done func(context.Context) (bool, error)) error {
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	for {
		ok, err := done(ctx)
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w; its last output:\n%s", p.Name(), ctx.Err(), p.Output())
		case <-p.Done():
			return p.Failed()
		case <-t.C:
		}
	}
}

// kafkaCount describes how many records a topic holds, as a sanity check
// that every row reached Kafka (heartbeats add a few).
func (b *bench) kafkaCount(ctx context.Context, topic string) string {
	ends, err := b.adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return "records in Kafka unknown: " + err.Error()
	}
	var n int64
	ends.Each(func(o kadm.ListedOffset) { n += o.Offset })
	return fmt.Sprintf("%d records in %s", n, topic)
}

// kafkaRows describes how many rows a topic's records hold (a row batch
// holds many), as a sanity check that every row reached Kafka; it reads
// the topic to its end.
func (b *bench) kafkaRows(ctx context.Context, topic string) string {
	ends, err := b.adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return "rows in Kafka unknown: " + err.Error()
	}
	left := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			left[o.Partition] = o.Offset
		}
	})
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.opts.brokers...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return "rows in Kafka unknown: " + err.Error()
	}
	defer cl.Close()
	rows, records := 0, 0
	for len(left) > 0 && ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		fs.EachRecord(func(r *kgo.Record) {
			records++
			if r.Value != nil {
				n := 1
				for _, h := range r.Headers {
					if h.Key == record.HeaderRows {
						n = record.RowsOf(string(h.Value))
					}
				}
				rows += n
			}
			if r.Offset+1 >= left[r.Partition] {
				delete(left, r.Partition)
			}
		})
	}
	return fmt.Sprintf("%d rows in %d records in %s", rows, records, topic)
}
