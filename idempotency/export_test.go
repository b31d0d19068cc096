package idempotency

import (
	"context"
	"time"
)

// WithClock replaces Run's clock, for tests.
func WithClock(now func() time.Time, sleep func(context.Context, time.Duration) error) PruneOption {
	return func(p *Pruner) { p.now, p.sleep = now, sleep }
}
