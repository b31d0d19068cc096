package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walhouse/walhouse/capture"
	"github.com/walhouse/walhouse/pipeline"
	"github.com/walhouse/walhouse/record"
)

// producerOpts mirrors the producer settings of cmd/walhouse
// (kafka.ProducerOpts), so the in-process runs produce as the binary
// does. Keep the two in step.
func producerOpts(brokers []string) []kgo.Opt {
	return []kgo.Opt{
		kgo.SeedBrokers(brokers...),
		kgo.RecordPartitioner(capture.Partitioner()),
		kgo.ProducerBatchCompression(kgo.SnappyCompression(), kgo.NoCompression()),
		kgo.ProducerLinger(5 * time.Millisecond),
		kgo.ProducerBatchMaxBytes(1 << 20),
		kgo.MaxBufferedRecords(100_000),
		kgo.MaxBufferedBytes(48 << 20),
		kgo.RecordDeliveryTimeout(0),
		kgo.MetadataMinAge(250 * time.Millisecond),
	}
}

// profileRequest describes one in-process capture run under the profiler.
type profileRequest struct {
	name   string // file name stem and label: "stream" or "snapshot"
	prefix string // topic prefix of the run
	rows   int64
	opts   []capture.Option
	// done reports that the run has done what is measured.
	done func(capture.Stats) bool
}

// profile runs capture in this process until req.done, under a CPU
// profile, and records the rate and the allocations per row. It writes
// <name>-cpu.pprof and <name>-allocs.pprof into the profile directory.
func (b *bench) profile(ctx context.Context, req profileRequest) error {
	dir := b.opts.profileDir
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("profile directory: %w", err)
	}
	kopts := producerOpts(b.opts.brokers)
	if b.opts.verbose {
		kopts = append(kopts, kgo.WithLogger(kgo.BasicLogger(os.Stderr, kgo.LogLevelInfo, nil)))
	}
	cl, err := kgo.NewClient(kopts...)
	if err != nil {
		return fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close()
	// Wired to Kafka as walhouse capture is (pipeline.CaptureKafka).
	opts := append(append([]capture.Option{
		capture.WithPublication(b.names.publication),
		capture.WithTables(b.names.table),
		capture.WithStatusInterval(statusInterval),
		capture.WithTopicPrefix(req.prefix),
	}, pipeline.CaptureKafka(cl, req.prefix, -1, record.DefaultMaxBytes)...), req.opts...)
	c, err := capture.New(b.opts.pgURL, cl, opts...)
	if err != nil {
		return err
	}
	cpuPath := filepath.Join(dir, req.name+"-cpu.pprof")
	allocPath := filepath.Join(dir, req.name+"-allocs.pprof")
	cpu, err := os.Create(cpuPath)
	if err != nil {
		return err
	}
	defer cpu.Close()

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	if err := pprof.StartCPUProfile(cpu); err != nil {
		return fmt.Errorf("start the CPU profile: %w", err)
	}
	took, runErr := runUntil(ctx, c, req.done)
	pprof.StopCPUProfile()
	runtime.ReadMemStats(&after)
	if runErr != nil {
		return runErr
	}
	if err := writeAllocs(allocPath); err != nil {
		return err
	}
	rows := float64(req.rows)
	b.result.profile = append(b.result.profile,
		fmt.Sprintf("profile %s: in-process capture took %.2fs for %d rows (%.0f rows/s, under the CPU profiler)", req.name, took.Seconds(), req.rows, rows/took.Seconds()),
		fmt.Sprintf("  allocations per row (whole process): %.1f objects, %.0f bytes; %d GC cycles",
			float64(after.Mallocs-before.Mallocs)/rows, float64(after.TotalAlloc-before.TotalAlloc)/rows, after.NumGC-before.NumGC),
		fmt.Sprintf("  go tool pprof -top [-cum] %s; go tool pprof -sample_index=alloc_objects -top %s", cpuPath, allocPath),
	)
	return nil
}

// runUntil runs c until done reports true, then stops it and waits for it.
// It returns how long reaching done took.
func runUntil(ctx context.Context, c *capture.Capturer, done func(capture.Stats) bool) (time.Duration, error) {
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	exited := make(chan error, 1)
	go func() { exited <- c.Run(rctx) }()
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	for !done(c.Stats()) {
		select {
		case err := <-exited:
			return 0, fmt.Errorf("in-process capture stopped early: %w", err)
		case <-ctx.Done():
			cancel()
			<-exited
			return 0, ctx.Err()
		case <-t.C:
		}
	}
	took := time.Since(start)
	cancel()
	if err := <-exited; err != nil && !errors.Is(err, context.Canceled) {
		return took, fmt.Errorf("in-process capture: %w", err)
	}
	return took, nil
}

func writeAllocs(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		f.Close()
		return fmt.Errorf("write the allocation profile: %w", err)
	}
	return f.Close()
}
