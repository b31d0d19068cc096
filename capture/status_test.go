package capture

import (
	"encoding/json"
	"testing"
	"time"
)

func TestStatusOf(t *testing.T) {
	now := time.Date(2024, 5, 1, 10, 0, 10, 0, time.UTC)
	tests := []struct {
		name       string
		stats      Stats
		lagBytes   int64
		lagSeconds *float64
	}{
		{name: "before the first message", stats: Stats{}, lagBytes: 0},
		{name: "streaming",
			stats:    Stats{Rows: 42, Received: 0x3000, Confirmed: 0x2000, ServerWALEnd: 0x3800, LastEvent: now.Add(-4 * time.Second), PendingBytes: 777},
			lagBytes: 0x1800, lagSeconds: ptr(4.0)},
		{name: "confirmed past a stale WAL end",
			stats:    Stats{Confirmed: 0x5000, ServerWALEnd: 0x4000, LastEvent: now.Add(time.Second)},
			lagBytes: 0, lagSeconds: ptr(0.0)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// What serve decodes: the document round-trips through JSON.
			b, err := json.Marshal(StatusOf("walhouse_x", tt.stats, now.In(time.FixedZone("CEST", 7200))))
			if err != nil {
				t.Fatal(err)
			}
			var got Status
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatalf("decode %s: %v", b, err)
			}
			st := tt.stats
			if got.Slot != "walhouse_x" || got.Rows != st.Rows || got.PendingBytes != int64(st.PendingBytes) ||
				got.ReceivedLSN != st.Received || got.ConfirmedLSN != st.Confirmed || got.ServerWALEnd != st.ServerWALEnd ||
				!got.Now.Equal(now) || got.Now.Location() != time.UTC {
				t.Errorf("status %+v from stats %+v", got, st)
			}
			if got.SlotLagBytes != tt.lagBytes {
				t.Errorf("slot lag %d bytes, want %d", got.SlotLagBytes, tt.lagBytes)
			}
			switch {
			case tt.lagSeconds == nil && (got.LagSeconds != nil || got.LastEventAt != nil):
				t.Errorf("lag %v s, last event %v; want both null before the first event", got.LagSeconds, got.LastEventAt)
			case tt.lagSeconds != nil && (got.LagSeconds == nil || *got.LagSeconds != *tt.lagSeconds || got.LastEventAt == nil || !got.LastEventAt.Equal(st.LastEvent)):
				t.Errorf("lag %v s, last event %v; want %v s, %v", got.LagSeconds, got.LastEventAt, *tt.lagSeconds, st.LastEvent)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }
