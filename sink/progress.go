package sink

import (
	"context"
	"errors"
	"time"
)

// progressLog writes the sink's periodic progress line, so that an operator
// following the log sees it load without scraping metrics.
type progressLog struct {
	every         time.Duration
	last          time.Time
	loaded, batch int64
	// lag is each partition's consumer lag as of its last fetch.
	lag map[tp]int64
}

// maybe logs a progress line if one is due.
func (p *progressLog) maybe(s *Sink) {
	if p.lag == nil {
		p.lag = map[tp]int64{}
	}
	if p.every <= 0 || time.Since(p.last) < p.every {
		return
	}
	loaded, batches := s.loaded.Load(), s.batches.Load()
	var total, most int64
	for _, l := range p.lag {
		total += l
		most = max(most, l)
	}
	stopped := len(s.stopped) // Run's goroutine alone touches it
	attrs := []any{"records", loaded, "records_per_s", float64(loaded-p.loaded) / time.Since(p.last).Seconds(),
		"batches", batches - p.batch, "dead_letters", s.dead.Load(), "consumer_lag", total, "max_partition_lag", most,
		"partitions", len(p.lag), "stopped_partitions", stopped}
	if n := len(s.gaps); n > 0 { // Run's goroutine alone writes it
		attrs = append(attrs, "records_lost_partitions", n)
	}
	s.log.Info("progress", attrs...)
	p.last, p.loaded, p.batch = time.Now(), loaded, batches
}

// logStop says why Run returned: a clean stop (the context ended) at info,
// anything else at error.
func (s *Sink) logStop(err error) {
	attrs := []any{"records", s.loaded.Load(), "batches", s.batches.Load(), "dead_letters", s.dead.Load()}
	if err == nil || errors.Is(err, context.Canceled) {
		s.log.Info("stopped; every committed offset is loaded", attrs...)
		return
	}
	s.log.Error("stopped", append(attrs, "err", err)...)
}
