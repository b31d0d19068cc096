package query

import (
	"fmt"
	"reflect"
	"testing"
	"time"
)

func TestSampleOf(t *testing.T) {
	at := time.Date(2024, 5, 1, 10, 0, 0, 0, time.UTC)
	f := func(v float64) *float64 { return &v }
	n := func(v int64) *int64 { return &v }
	tests := []struct {
		name string
		rep  LagReport
		want LagSample
	}{
		{
			name: "freshness only",
			rep: LagReport{Now: at, Tables: []LagTable{
				{SyncState: SyncState{Table: "orders"}, FreshnessSeconds: f(3.5)},
				{SyncState: SyncState{Table: "new"}},
			}},
			want: LagSample{At: at, Tables: map[string]TableSample{"orders": {FreshnessSeconds: f(3.5)}, "new": {}}},
		},
		{
			name: "with the pipeline",
			rep: LagReport{Now: at,
				Tables: []LagTable{{SyncState: SyncState{Table: "orders"}, FreshnessSeconds: f(1), ConsumerLag: map[int32]int64{0: 4, 1: 6}}},
				Pipeline: &PipelineLag{
					Slot:                 &SlotLag{Name: "walhouse", LagBytes: 4096, LagSeconds: f(0.25)},
					ConsumerLag:          map[string]map[int32]int64{"walhouse.public.orders": {0: 4, 1: 6}, "walhouse.public.items": {0: 5}},
					DLQDepth:             n(2),
					ProducerBacklogBytes: n(777),
				}},
			want: LagSample{At: at, Tables: map[string]TableSample{"orders": {FreshnessSeconds: f(1), ConsumerLag: n(10)}},
				SlotLagBytes: n(4096), SlotLagSeconds: f(0.25), ProducerBacklogBytes: n(777), ConsumerLag: n(15), DLQDepth: n(2)},
		},
		{
			name: "pipeline parts that could not be read",
			rep:  LagReport{Now: at, Tables: []LagTable{}, Pipeline: &PipelineLag{Errors: []string{"replication slot: down"}}},
			want: LagSample{At: at, Tables: map[string]TableSample{}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := sampleOf(tt.rep); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("sampleOf = %+v\nwant       %+v", got, tt.want)
			}
		})
	}
}

func TestLagHistoryRing(t *testing.T) {
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
			h := newLagHistory(tt.interval, tt.span)
			if h.limit > maxHistorySamples {
				t.Fatalf("keeps %d samples, above the bound %d", h.limit, maxHistorySamples)
			}
			for i := range tt.added {
				h.add(LagSample{At: base.Add(time.Duration(i) * time.Second)})
			}
			got := h.snapshot()
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
