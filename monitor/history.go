package monitor

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Defaults of the lag history kept for the status page.
const (
	DefaultHistoryInterval = 5 * time.Second
	DefaultHistorySpan     = time.Hour
	// maxHistorySamples bounds the history's memory whatever the settings:
	// a sample is a few hundred bytes per table.
	maxHistorySamples = 100_000
)

// LagSample is one point of the lag history: the figures of GET /v1/lag
// that the status page charts, as of At.
type LagSample struct {
	At     time.Time              `json:"at"`
	Tables map[string]TableSample `json:"tables"`
	// The pipeline figures, present when serve reads them (Probe).
	SlotLagBytes         *int64   `json:"slotLagBytes,omitempty"`
	SlotLagSeconds       *float64 `json:"slotLagSeconds,omitempty"`
	ProducerBacklogBytes *int64   `json:"producerBacklogBytes,omitempty"`
	ConsumerLag          *int64   `json:"consumerLag,omitempty"`
	DLQDepth             *int64   `json:"dlqDepth,omitempty"`
}

// TableSample is one table in a LagSample.
type TableSample struct {
	FreshnessSeconds *float64 `json:"freshnessSeconds"`
	// ConsumerLag is the records of the table's topic not consumed yet,
	// summed over its partitions.
	ConsumerLag *int64 `json:"consumerLag,omitempty"`
}

// NewSample starts the sample taken at at with the charted figures of pl
// (nil when serve reads no pipeline); the caller adds the tables.
func NewSample(at time.Time, pl *PipelineLag) LagSample {
	s := LagSample{At: at, Tables: map[string]TableSample{}}
	if pl == nil {
		return s
	}
	if pl.Slot != nil {
		b := pl.Slot.LagBytes
		s.SlotLagBytes, s.SlotLagSeconds = &b, pl.Slot.LagSeconds
	}
	s.ProducerBacklogBytes, s.DLQDepth = pl.ProducerBacklogBytes, pl.DLQDepth
	if pl.ConsumerLag != nil {
		var total int64
		for _, parts := range pl.ConsumerLag {
			total += SumLag(parts)
		}
		s.ConsumerLag = &total
	}
	return s
}

// SumLag is the consumer lag of a topic: its partitions' lags summed.
func SumLag(parts map[int32]int64) int64 {
	var n int64
	for _, l := range parts {
		n += l
	}
	return n
}

// LagHistory is the body of GET /v1/lag/history.
type LagHistory struct {
	IntervalSeconds float64 `json:"intervalSeconds"`
	SpanSeconds     float64 `json:"spanSeconds"`
	// Samples are oldest first.
	Samples []LagSample `json:"samples"`
}

// History is a ring of the most recent lag samples, so that the status
// page's charts start with the last hour instead of empty on every load.
// It is safe for concurrent use.
type History struct {
	interval, span time.Duration

	limit int // samples kept: span / interval, bounded

	mu    sync.Mutex
	ring  []LagSample // grows to limit, then wraps
	start int         // index of the oldest sample once the ring is full
}

// NewHistory keeps a sample every interval (positive) for span (at least
// interval), at most 100,000 samples.
func NewHistory(interval, span time.Duration) *History {
	return &History{interval: interval, span: span, limit: min(max(int(span/interval), 1), maxHistorySamples)}
}

// Add records s, dropping the oldest sample when the ring is full.
func (h *History) Add(s LagSample) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.ring) < h.limit {
		h.ring = append(h.ring, s)
		return
	}
	h.ring[h.start] = s
	h.start = (h.start + 1) % len(h.ring)
}

// Snapshot returns the samples, oldest first.
func (h *History) Snapshot() LagHistory {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := LagHistory{IntervalSeconds: h.interval.Seconds(), SpanSeconds: h.span.Seconds(), Samples: make([]LagSample, 0, len(h.ring))}
	out.Samples = append(out.Samples, h.ring[h.start:]...)
	out.Samples = append(out.Samples, h.ring[:h.start]...)
	return out
}

// Run adds a sample taken by sample every interval, until ctx ends; it
// then returns nil. A sample that fails leaves a gap, logged once per
// outage on log. Call it once.
func (h *History) Run(ctx context.Context, sample func(context.Context) (LagSample, error), log *slog.Logger) error {
	tick := time.NewTicker(h.interval)
	defer tick.Stop()
	failing := false
	for {
		// Each sample is bounded by the interval (at least a few seconds),
		// so a hanging ClickHouse or database never stacks samples up.
		sctx, cancel := context.WithTimeout(ctx, max(h.interval, 5*time.Second))
		s, err := sample(sctx)
		cancel()
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil && !failing:
			// Once per outage: the sampler runs every few seconds.
			log.Warn("lag history: cannot sample the lag; the history has a gap until it can", "err", err)
			failing = true
		case err == nil:
			if failing {
				log.Info("lag history: sampling again")
				failing = false
			}
			h.Add(s)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}
