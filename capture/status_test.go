package capture

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/walhouse/walhouse/record"
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
		{name: "a table left out",
			stats:    Stats{Refused: []record.RefusedTable{{Table: "public.audit", Reasons: []string{"no_primary_key"}, Since: now, Error: "table public.audit has no primary key"}}},
			lagBytes: 0},
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
			var got record.CaptureStatus
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatalf("decode %s: %v", b, err)
			}
			st := tt.stats
			if got.Slot != "walhouse_x" || got.Rows != st.Rows || got.PendingBytes != int64(st.PendingBytes) ||
				got.ReceivedLSN != st.Received || got.ConfirmedLSN != st.Confirmed || got.ServerWALEnd != st.ServerWALEnd ||
				!got.Now.Equal(now) || got.Now.Location() != time.UTC {
				t.Errorf("status %+v from stats %+v", got, st)
			}
			if want := st.Refused; want == nil {
				if got.RefusedTables == nil || len(got.RefusedTables) != 0 {
					t.Errorf("refused tables %#v, want [] (never null)", got.RefusedTables)
				}
			} else if len(got.RefusedTables) != 1 || got.RefusedTables[0].Table != want[0].Table || !slices.Equal(got.RefusedTables[0].Reasons, want[0].Reasons) ||
				got.RefusedTables[0].Error != want[0].Error || !got.RefusedTables[0].Since.Equal(want[0].Since) {
				t.Errorf("refused tables %+v, want %+v", got.RefusedTables, want)
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
