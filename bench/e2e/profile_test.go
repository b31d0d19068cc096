package main

import (
	"testing"

	"github.com/google/pprof/profile"
)

// stack builds a sample whose frames are funcs, innermost first.
func stack(nanos int64, funcs ...string) *profile.Sample {
	s := &profile.Sample{Value: []int64{1, nanos}}
	for _, f := range funcs {
		s.Location = append(s.Location, &profile.Location{Line: []profile.Line{{Function: &profile.Function{Name: f}}}})
	}
	return s
}

func TestByStage(t *testing.T) {
	p := &profile.Profile{
		SampleType: []*profile.ValueType{{Type: "samples", Unit: "count"}, {Type: "cpu", Unit: "nanoseconds"}},
		Sample: []*profile.Sample{
			// An allocation inside the decoder counts as decoding.
			stack(2e9, "runtime.mallocgc", "github.com/walhouse/walhouse/record.(*decoder).read", "github.com/walhouse/walhouse/record.(*Decoder).Decode", "github.com/walhouse/walhouse/sink.(*Sink).loadSegment"),
			// A helper of the decoder counts as decoding.
			stack(1e9, "github.com/walhouse/walhouse/record.appendUnquoted", "github.com/walhouse/walhouse/record.(*decoder).read", "github.com/walhouse/walhouse/sink.(*Sink).loadSegment"),
			// The payload hash, a record function, counts as Layer 2.
			stack(1e9, "crypto/sha256.Sum256", "github.com/walhouse/walhouse/record.PayloadHash", "github.com/walhouse/walhouse/sink.(*Sink).filter"),
			stack(5e8, "github.com/ClickHouse/clickhouse-go/v2.(*httpBatch).Append", "github.com/walhouse/walhouse/clickhouse.(*Writer).insert"),
			stack(5e8, "runtime.scanObject", "runtime.gcBgMarkWorker"),
			stack(25e7, "main.main"),
			stack(25e7, "github.com/walhouse/walhouse/record.EventID", "github.com/walhouse/walhouse/capture.(*translator).emit"),
		},
	}
	total, stages := byStage(p)
	if total != 5.5 {
		t.Errorf("total %v s, want 5.5", total)
	}
	want := []stageCPU{{"decode", 3}, {"layer 2 (dedup)", 1}, {"clickhouse insert", 0.5}, {"gc", 0.5}, {"encode, eventId", 0.25}, {"other", 0.25}}
	if len(stages) != len(want) {
		t.Fatalf("stages %v, want %v", stages, want)
	}
	for i := range want {
		if stages[i] != want[i] {
			t.Errorf("stage %d: %v, want %v", i, stages[i], want[i])
		}
	}
}

func TestLayer2Share(t *testing.T) {
	st := stepResult{
		Usage: []usage{{Process: "capture", CPUSeconds: 3}, {Process: "sink", CPUSeconds: 4}, {Process: "postgres", CPUSeconds: 50},
			{Process: "kafka", CPUSeconds: 1}, {Process: "clickhouse", CPUSeconds: 1}, {Process: "redis", CPUSeconds: 1}},
		Profiles: []processProfile{{Process: "sink", Seconds: 2, Stages: []stageCPU{{"layer 2 (dedup)", 0.5}}}},
	}
	// The sink's 4 s × 0.5/2, plus Redis's 1 s, over 10 s of pipeline.
	if got, ok := st.layer2Share(); !ok || got != 0.2 {
		t.Errorf("layer2Share = %v, %v; want 0.2, true", got, ok)
	}
	if _, ok := (stepResult{}).layer2Share(); ok {
		t.Error("a step without profiles has a Layer 2 share")
	}
}
