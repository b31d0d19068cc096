package monitor

import (
	"fmt"
	"testing"
	"time"
)

func TestHistoryRing(t *testing.T) {
	base := time.Date(2024, 5, 1, 10, 0, 0, 0, time.UTC)
	tests := []struct {
		interval, span time.Duration
		added          int
		wantFirst      int // index of the oldest sample kept
		wantLen        int
	}{
		{interval: 5 * time.Second, span: time.Hour, added: 0, wantLen: 0},
		{interval: 5 * time.Second, span: time.Hour, added: 3, wantFirst: 0, wantLen: 3},
		{interval: 5 * time.Second, span: time.Hour, added: 720, wantFirst: 0, wantLen: 720},
		{interval: 5 * time.Second, span: time.Hour, added: 721, wantFirst: 1, wantLen: 720},
		{interval: 5 * time.Second, span: time.Hour, added: 2000, wantFirst: 1280, wantLen: 720},
		{interval: time.Second, span: time.Second, added: 5, wantFirst: 4, wantLen: 1},
		{interval: time.Millisecond, span: 24 * time.Hour, added: 10, wantFirst: 0, wantLen: 10}, // kept samples capped
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%v/%v/%d", tt.interval, tt.span, tt.added), func(t *testing.T) {
			h := NewHistory(tt.interval, tt.span)
			if h.limit > maxHistorySamples {
				t.Fatalf("keeps %d samples, above the bound %d", h.limit, maxHistorySamples)
			}
			for i := range tt.added {
				h.Add(LagSample{At: base.Add(time.Duration(i) * time.Second)})
			}
			got := h.Snapshot()
			if len(got.Samples) != tt.wantLen {
				t.Fatalf("%d samples, want %d", len(got.Samples), tt.wantLen)
			}
			for i, s := range got.Samples {
				if want := base.Add(time.Duration(tt.wantFirst+i) * time.Second); !s.At.Equal(want) {
					t.Fatalf("sample %d at %v, want %v (oldest first, none lost)", i, s.At, want)
				}
			}
			if got.IntervalSeconds != tt.interval.Seconds() || got.SpanSeconds != tt.span.Seconds() {
				t.Errorf("interval %v s, span %v s", got.IntervalSeconds, got.SpanSeconds)
			}
		})
	}
}
