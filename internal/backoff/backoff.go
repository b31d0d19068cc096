// Package backoff waits between the attempts of an operation that may
// succeed later: a broker that has not finished creating a topic, a
// ClickHouse that refused a load for a moment, a walsender that still holds
// a slot. It owns the wait (doubling, capped, ended by the caller's context);
// what is retried and when to give up stay with the caller.
//
// It imports nothing of walhouse, so the binary, the tests and the
// benchmarks all share it.
package backoff

import (
	"context"
	"time"
)

// Short bounds suit waits on a local server that settles within
// milliseconds to seconds: the first wait and the longest one.
const (
	ShortMin = 50 * time.Millisecond
	ShortMax = time.Second
)

// Sleep waits for d, or until ctx ends and then returns ctx's error.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Next returns the wait after d: twice d, at most limit.
func Next(d, limit time.Duration) time.Duration { return min(2*d, limit) }

// Exponential returns the wait before attempt+1 (attempts count from 1):
// first doubled attempt-1 times, at most limit.
func Exponential(first, limit time.Duration, attempt int) time.Duration {
	d := first
	for i := 1; i < attempt && d < limit; i++ {
		d *= 2
	}
	return min(d, limit)
}

// Poll calls op until it returns nil or ctx ends, waiting ShortMin, doubling
// up to ShortMax, between calls. When ctx ends it returns op's last error,
// which says why op never succeeded better than ctx's error would.
func Poll(ctx context.Context, op func(context.Context) error) error {
	for delay := ShortMin; ; delay = Next(delay, ShortMax) {
		err := op(ctx)
		if err == nil {
			return nil
		}
		if Sleep(ctx, delay) != nil {
			return err
		}
	}
}
