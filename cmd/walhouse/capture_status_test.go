package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/walhouse/walhouse/capture"
	"github.com/walhouse/walhouse/query"
)

func TestCaptureStatus(t *testing.T) {
	now := time.Date(2024, 5, 1, 10, 0, 10, 0, time.UTC)
	tests := []struct {
		name       string
		stats      capture.Stats
		lagBytes   int64
		lagSeconds *float64
	}{
		{name: "before the first message", stats: capture.Stats{}, lagBytes: 0},
		{name: "streaming",
			stats:    capture.Stats{Rows: 42, Received: 0x3000, Confirmed: 0x2000, ServerWALEnd: 0x3800, LastEvent: now.Add(-4 * time.Second), PendingBytes: 777},
			lagBytes: 0x1800, lagSeconds: ptr(4.0)},
		{name: "confirmed past a stale WAL end",
			stats:    capture.Stats{Confirmed: 0x5000, ServerWALEnd: 0x4000, LastEvent: now.Add(time.Second)},
			lagBytes: 0, lagSeconds: ptr(0.0)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cs := captureStatus{slot: "walhouse_x", stats: func() capture.Stats { return tt.stats }, now: func() time.Time { return now }}
			rec := httptest.NewRecorder()
			cs.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/status", nil))
			if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != "application/json" {
				t.Fatalf("status %d, content type %q", rec.Code, rec.Header().Get("Content-Type"))
			}
			// What serve decodes: the document round-trips through query's type.
			var got query.CaptureStatus
			if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
				t.Fatalf("decode %s: %v", rec.Body, err)
			}
			st := tt.stats
			if got.Slot != "walhouse_x" || got.Rows != st.Rows || got.PendingBytes != int64(st.PendingBytes) ||
				got.ReceivedLSN != st.Received || got.ConfirmedLSN != st.Confirmed || got.ServerWALEnd != st.ServerWALEnd ||
				!got.Now.Equal(now) {
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
