package backoff

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestNext(t *testing.T) {
	if got := Next(300*time.Millisecond, time.Second); got != 600*time.Millisecond {
		t.Errorf("Next(300ms, 1s) = %v, want 600ms", got)
	}
	if got := Next(600*time.Millisecond, time.Second); got != time.Second {
		t.Errorf("Next(600ms, 1s) = %v, want 1s", got)
	}
}

func TestExponential(t *testing.T) {
	for _, c := range []struct {
		attempt int
		want    time.Duration
	}{
		{1, 200 * time.Millisecond},
		{2, 400 * time.Millisecond},
		{3, 800 * time.Millisecond},
		{4, time.Second},
		{60, time.Second}, // no overflow however many attempts
	} {
		if got := Exponential(200*time.Millisecond, time.Second, c.attempt); got != c.want {
			t.Errorf("Exponential(200ms, 1s, %d) = %v, want %v", c.attempt, got, c.want)
		}
	}
}

func TestSleepEndsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Errorf("Sleep with an ended context = %v, want context.Canceled", err)
	}
	if err := Sleep(context.Background(), time.Millisecond); err != nil {
		t.Errorf("Sleep(1ms) = %v", err)
	}
}

func TestPoll(t *testing.T) {
	calls := 0
	err := Poll(context.Background(), func(context.Context) error {
		if calls++; calls < 3 {
			return errors.New("not yet")
		}
		return nil
	})
	if err != nil || calls != 3 {
		t.Errorf("Poll = %v after %d calls, want nil after 3", err, calls)
	}

	last := errors.New("still held")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if err := Poll(ctx, func(context.Context) error { return last }); err != last {
		t.Errorf("Poll until the context ends = %v, want op's last error", err)
	}
}
