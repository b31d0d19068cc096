package sink

import (
	"context"
	"testing"
	"time"
)

func TestRefreshWait(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, c := range []struct {
		name      string
		last, now time.Time
		want      time.Duration
	}{
		{"no refresh yet", time.Time{}, t0, 0},
		{"just after the last", t0, t0.Add(30 * time.Millisecond), 70 * time.Millisecond},
		{"at the same instant", t0, t0, 100 * time.Millisecond},
		{"exactly every after", t0, t0.Add(100 * time.Millisecond), 0},
		{"long after", t0, t0.Add(time.Minute), 0},
		{"clock stepped back", t0, t0.Add(-time.Second), 1100 * time.Millisecond},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := refreshWait(c.last, c.now, 100*time.Millisecond); got != c.want {
				t.Errorf("refreshWait(%v, %v) = %v, want %v", c.last, c.now, got, c.want)
			}
		})
	}
}

// TestTopicRefreshCoalesces: every signal is served by a refresh that
// starts after it, and the signals that arrive while one refresh runs are
// all served by one more, not one each.
func TestTopicRefreshCoalesces(t *testing.T) {
	calls := make(chan struct{})
	release := make(chan struct{})
	tr := NewTopicRefresh(func() { calls <- struct{}{}; <-release })
	tr.every = 0
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- tr.Run(ctx) }()

	tr.Signal()
	<-calls // the first refresh runs, and waits for release
	for range 5 {
		tr.Signal()
	}
	release <- struct{}{}
	<-calls // one more for the five
	release <- struct{}{}
	select {
	case <-calls:
		t.Fatal("a third refresh for signals that one refresh served")
	case <-time.After(50 * time.Millisecond): // long enough to see a wrong third call often
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if got := tr.Forced(); got != 2 {
		t.Errorf("Forced() = %d, want 2", got)
	}
}
