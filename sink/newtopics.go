package sink

import (
	"context"
	"sync/atomic"
	"time"
)

// RefreshEvery is the least time between two metadata refreshes that a
// TopicRefresh forces: a burst of signals (capture registering the schemas
// of many tables at its start) costs one metadata request per
// RefreshEvery, not one per signal.
const RefreshEvery = 100 * time.Millisecond

// TopicRefresh forces the group client's metadata refresh
// ((*kgo.Client).ForceMetadataRefresh) when a signal says that a table's
// topic may have just been created, so a pattern subscription consumes it
// at once instead of at the periodic refresh (NewTopicsWithin, which stays
// the fallback for topics no signal announces). With a regex subscription
// the refresh reads the cluster's topics, and the group joins the new ones
// that match. Signal is safe for concurrent use; Run runs once.
type TopicRefresh struct {
	refresh func()
	every   time.Duration
	signals chan struct{}
	forced  atomic.Int64
}

// NewTopicRefresh returns a TopicRefresh calling refresh (the group
// client's ForceMetadataRefresh) at most once per RefreshEvery.
func NewTopicRefresh(refresh func()) *TopicRefresh {
	return &TopicRefresh{refresh: refresh, every: RefreshEvery, signals: make(chan struct{}, 1)}
}

// Signal asks for a refresh; it never blocks. Signals that arrive before
// the refresh they asked for ran are served by that one refresh.
func (t *TopicRefresh) Signal() {
	select {
	case t.signals <- struct{}{}:
	default: // one is pending already
	}
}

// Forced returns the refreshes forced so far (the metric
// walhouse_sink_metadata_refreshes_forced_total).
func (t *TopicRefresh) Forced() int64 { return t.forced.Load() }

// Run forces a refresh for the signals until ctx ends, then returns nil.
func (t *TopicRefresh) Run(ctx context.Context) error {
	var last time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.signals:
		}
		if wait := refreshWait(last, time.Now(), t.every); wait > 0 {
			// The signal stays served: it is consumed, and the refresh
			// after the wait reads what it announced.
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(wait):
			}
		}
		// A signal that came during the wait is served by this refresh.
		select {
		case <-t.signals:
		default:
		}
		t.refresh()
		t.forced.Add(1)
		last = time.Now()
	}
}

// refreshWait is how long a refresh asked for at now waits after the last
// one (zero time: none yet) so that two are at least every apart.
func refreshWait(last, now time.Time, every time.Duration) time.Duration {
	if last.IsZero() {
		return 0
	}
	return max(last.Add(every).Sub(now), 0)
}
