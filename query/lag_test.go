package query

import (
	"reflect"
	"testing"
	"time"

	"github.com/walhouse/walhouse/monitor"
)

func TestTopicLagOf(t *testing.T) {
	lag := map[string]map[int32]int64{
		"walhouse.public.orders":     {0: 3},
		"walhouse.crm.orders":        {0: 5},
		"team.a.walhouse.public.cut": {1: 7},
	}
	for table, want := range map[string]int64{"orders": 3, "crm__orders": 5, "cut": 7} {
		got := topicLagOf(lag, table)
		var sum int64
		for _, l := range got {
			sum += l
		}
		if sum != want {
			t.Errorf("topicLagOf(%q) = %v, want lag %d", table, got, want)
		}
	}
	if got := topicLagOf(lag, "missing"); got != nil {
		t.Errorf("lag for an unknown table: %v", got)
	}
}

func TestSampleOf(t *testing.T) {
	at := time.Date(2024, 5, 1, 10, 0, 0, 0, time.UTC)
	f := func(v float64) *float64 { return &v }
	n := func(v int64) *int64 { return &v }
	tests := []struct {
		name string
		rep  LagReport
		want monitor.LagSample
	}{
		{
			name: "freshness only",
			rep: LagReport{Now: at, Tables: []LagTable{
				{SyncState: SyncState{Table: "orders"}, FreshnessSeconds: f(3.5)},
				{SyncState: SyncState{Table: "new"}},
			}},
			want: monitor.LagSample{At: at, Tables: map[string]monitor.TableSample{"orders": {FreshnessSeconds: f(3.5)}, "new": {}}},
		},
		{
			name: "with the pipeline",
			rep: LagReport{Now: at,
				Tables: []LagTable{{SyncState: SyncState{Table: "orders"}, FreshnessSeconds: f(1), ConsumerLag: map[int32]int64{0: 4, 1: 6}}},
				Pipeline: &monitor.PipelineLag{
					Slot:                 &monitor.SlotLag{Name: "walhouse", LagBytes: 4096, LagSeconds: f(0.25)},
					ConsumerLag:          map[string]map[int32]int64{"walhouse.public.orders": {0: 4, 1: 6}, "walhouse.public.items": {0: 5}},
					DLQDepth:             n(2),
					ProducerBacklogBytes: n(777),
				}},
			want: monitor.LagSample{At: at, Tables: map[string]monitor.TableSample{"orders": {FreshnessSeconds: f(1), ConsumerLag: n(10)}},
				SlotLagBytes: n(4096), SlotLagSeconds: f(0.25), ProducerBacklogBytes: n(777), ConsumerLag: n(15), DLQDepth: n(2)},
		},
		{
			name: "pipeline parts that could not be read",
			rep:  LagReport{Now: at, Tables: []LagTable{}, Pipeline: &monitor.PipelineLag{Errors: []string{"replication slot: down"}}},
			want: monitor.LagSample{At: at, Tables: map[string]monitor.TableSample{}},
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
