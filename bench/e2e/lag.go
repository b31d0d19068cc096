package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"
)

// The lag sampler measures walhouse and MaterializedPostgreSQL the same
// way, from outside: every lagInterval of a steady step it asks each one's
// ClickHouse table for its newest row of the step (the largest created_at,
// PostgreSQL's now() in the pgbench transaction that wrote it) and takes
// the time the query was sent minus that row's created_at. Under a steady
// offered rate a new row commits every fraction of a millisecond, so a
// sample is how far behind the source what a reader sees is. walhouse's
// _synced_at − _commit_ts (the step's p50/p99) needs columns the engine
// does not write.

// lagInterval is how often the lag sampler asks.
const lagInterval = 250 * time.Millisecond

// lagTarget is a ClickHouse table the lag sampler asks.
type lagTarget struct {
	name  string // e.g. runWalhouse
	table string // quoted
}

// lagResult is one system's lag over a steady step.
type lagResult struct {
	System  string  `json:"system"`
	Samples int     `json:"samples"`
	P50     float64 `json:"p50_seconds"`
	P99     float64 `json:"p99_seconds"`
	Max     float64 `json:"max_seconds"`
}

// lagSampler samples targets until finish.
type lagSampler struct {
	targets []lagTarget
	stop    context.CancelFunc
	wg      sync.WaitGroup
	samples [][]float64 // per target, seconds
}

// startLag samples the newest row of step in each target, each target in
// its own goroutine so that a slow answer from one delays no other.
func (b *bench) startLag(ctx context.Context, step int, targets []lagTarget) *lagSampler {
	ctx, cancel := context.WithCancel(ctx)
	ls := &lagSampler{targets: targets, stop: cancel, samples: make([][]float64, len(targets))}
	for i, t := range targets {
		ls.wg.Add(1)
		go func() {
			defer ls.wg.Done()
			tick := time.NewTicker(lagInterval)
			defer tick.Stop()
			q := fmt.Sprintf("SELECT ifNull(toUnixTimestamp64Micro(max(created_at)), 0) FROM %s WHERE step = %d", t.table, step)
			for {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				sent := time.Now()
				var newest int64
				if err := b.ch.QueryRow(ctx, q).Scan(&newest); err != nil || newest == 0 {
					continue // no row of the step yet, or the sampling ended
				}
				ls.samples[i] = append(ls.samples[i], sent.Sub(time.UnixMicro(newest)).Seconds())
			}
		}()
	}
	return ls
}

// finish stops the sampling and returns each target's quantiles.
func (ls *lagSampler) finish() []lagResult {
	ls.stop()
	ls.wg.Wait()
	out := make([]lagResult, len(ls.targets))
	for i, t := range ls.targets {
		out[i] = lagQuantiles(t.name, ls.samples[i])
	}
	return out
}

// lagQuantiles returns p50, p99 and max of samples, the quantiles as the
// token waits' (quantile).
func lagQuantiles(system string, samples []float64) lagResult {
	r := lagResult{System: system, Samples: len(samples)}
	if len(samples) == 0 {
		return r
	}
	s := slices.Sorted(slices.Values(samples))
	r.P50, r.P99, r.Max = quantile(s, 0.5), quantile(s, 0.99), s[len(s)-1]
	return r
}
