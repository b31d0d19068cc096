package query

import (
	"context"
	"net/http"
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
	// The pipeline figures, present when serve reads them (PipelineProbe).
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

// LagHistory is the body of GET /v1/lag/history.
type LagHistory struct {
	IntervalSeconds float64 `json:"intervalSeconds"`
	SpanSeconds     float64 `json:"spanSeconds"`
	// Samples are oldest first.
	Samples []LagSample `json:"samples"`
}

// sampleOf keeps the charted figures of a lag report.
func sampleOf(rep LagReport) LagSample {
	s := LagSample{At: rep.Now, Tables: make(map[string]TableSample, len(rep.Tables))}
	for _, t := range rep.Tables {
		ts := TableSample{FreshnessSeconds: t.FreshnessSeconds}
		if t.ConsumerLag != nil {
			ts.ConsumerLag = sumLag(t.ConsumerLag)
		}
		s.Tables[t.Table] = ts
	}
	if pl := rep.Pipeline; pl != nil {
		if pl.Slot != nil {
			b := pl.Slot.LagBytes
			s.SlotLagBytes, s.SlotLagSeconds = &b, pl.Slot.LagSeconds
		}
		s.ProducerBacklogBytes, s.DLQDepth = pl.ProducerBacklogBytes, pl.DLQDepth
		if pl.ConsumerLag != nil {
			var total int64
			for _, parts := range pl.ConsumerLag {
				total += *sumLag(parts)
			}
			s.ConsumerLag = &total
		}
	}
	return s
}

func sumLag(parts map[int32]int64) *int64 {
	var n int64
	for _, l := range parts {
		n += l
	}
	return &n
}

// lagHistory is a ring of the most recent lag samples, so that the status
// page's charts start with the last hour instead of empty on every load.
// It is safe for concurrent use.
type lagHistory struct {
	interval, span time.Duration

	limit int // samples kept: span / interval, bounded

	mu    sync.Mutex
	ring  []LagSample // grows to limit, then wraps
	start int         // index of the oldest sample once the ring is full
}

func newLagHistory(interval, span time.Duration) *lagHistory {
	return &lagHistory{interval: interval, span: span, limit: min(max(int(span/interval), 1), maxHistorySamples)}
}

// add records s, dropping the oldest sample when the ring is full.
func (h *lagHistory) add(s LagSample) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.ring) < h.limit {
		h.ring = append(h.ring, s)
		return
	}
	h.ring[h.start] = s
	h.start = (h.start + 1) % len(h.ring)
}

// snapshot returns the samples, oldest first.
func (h *lagHistory) snapshot() LagHistory {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := LagHistory{IntervalSeconds: h.interval.Seconds(), SpanSeconds: h.span.Seconds(), Samples: make([]LagSample, 0, len(h.ring))}
	out.Samples = append(out.Samples, h.ring[h.start:]...)
	out.Samples = append(out.Samples, h.ring[:h.start]...)
	return out
}

// Run records a lag sample (what GET /v1/lag reports) into the history
// served at GET /v1/lag/history every Config.HistoryInterval, until ctx
// ends; it then returns nil. Without Run the history stays empty and the
// status page's charts start with its first poll. Call it once.
func (s *Server) Run(ctx context.Context) error {
	tick := time.NewTicker(s.history.interval)
	defer tick.Stop()
	failing := false
	for {
		// Each sample is bounded by the interval (at least a few seconds),
		// so a hanging ClickHouse or database never stacks samples up.
		sctx, cancel := context.WithTimeout(ctx, max(s.history.interval, 5*time.Second))
		rep, err := lagReport(sctx, s.conn, s.catalog, s.cfg.Database, s.cfg.Pipeline, time.Now())
		cancel()
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil && !failing:
			// Once per outage: the sampler runs every few seconds.
			s.log.Warn("lag history: cannot sample the lag; the history has a gap until it can", "err", err)
			failing = true
		case err == nil:
			if failing {
				s.log.Info("lag history: sampling again")
				failing = false
			}
			s.history.add(sampleOf(rep))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

func (s *Server) handleLagHistory(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, s.history.snapshot())
}
