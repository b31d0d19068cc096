package sink

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/walhouse/walhouse/internal/backoff"
	"github.com/walhouse/walhouse/record"
)

// retry runs op until it succeeds, fails permanently or ctx ends, backing
// off exponentially with jitter between attempts.
func (s *Sink) retry(ctx context.Context, what string, op func() error) error {
	for attempt := 1; ; attempt++ {
		err := op()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var te *TableError
		if errors.Is(err, ErrPermanent) || errors.Is(err, record.ErrInvalid) || errors.As(err, &te) {
			return err
		}
		d := s.backoff(attempt)
		s.log.Warn(what+" failed; retrying", "attempt", attempt, "backoff", d, "err", err)
		if err := backoff.Sleep(ctx, d); err != nil {
			return err
		}
	}
}

// backoff returns the wait before attempt+1: exponential, capped, with
// jitter so a fleet of sinks does not retry in lockstep.
func (s *Sink) backoff(attempt int) time.Duration {
	d := backoff.Exponential(s.cfg.RetryBackoff, s.cfg.MaxRetryBackoff, attempt)
	return d/2 + rand.N(d/2+1)
}
