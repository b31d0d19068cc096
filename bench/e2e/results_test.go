package main

import (
	"testing"
	"time"
)

func TestProcessedTransactions(t *testing.T) {
	tests := []struct {
		name    string
		out     string
		want    int64
		wantErr bool
	}{
		{"pgbench -T", "duration: 3 s\nnumber of transactions actually processed: 1484\nnumber of failed transactions: 0 (0.000%)\n", 1484, false},
		{"no summary", "pgbench: error: connection to server failed\n", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := processedTransactions(tt.out)
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Fatalf("processedTransactions = %d, %v; want %d, error %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestSummarize(t *testing.T) {
	cpu := func(pairs ...any) []usage {
		var u []usage
		for i := 0; i < len(pairs); i += 2 {
			u = append(u, usage{Process: pairs[i].(string), CPUSeconds: pairs[i+1].(float64)})
		}
		return u
	}
	r := report{
		Loads: []loadResult{
			{Table: "narrow", Ratio: 0.25, MaterializedRatio: 0.4, MaterializedCPURatio: 2.5, Runs: []loadRun{
				{Name: runWalhouse, Usage: cpu("sink", 6.0, "redis", 2.0, "clickhouse", 2.0)},
				{Name: runEngine},
				{Name: runMaterialized, Usage: cpu("clickhouse", 3.0, "postgres", 1.0)}, // not Layer 2 off
				{Name: runNoLayer2, Usage: cpu("sink", 5.0, "clickhouse", 2.0)},
			}},
			{Table: "wide", Ratio: 0.5, Runs: []loadRun{{Name: runWalhouse}, {Name: runEngine}}},
		},
		Steady: []stepResult{
			{OfferedRowsPerSecond: 10_000, Drained: true, P99: 0.7, TokenReads: 100, TokenWaitP99: 0.4},
			{OfferedRowsPerSecond: 30_000, Drained: true, P99: 1.0, TokenReads: 100, TokenStale: 1, TokenWaitP99: 0.5}, // a stale read
			{OfferedRowsPerSecond: 60_000, Drained: false, P99: 0.9, TokenReads: 100, TokenWaitP99: 0.9},               // not drained: its p99 is a lower bound
			{OfferedRowsPerSecond: 90_000, Drained: true, P99: 3, TokenReads: 100, TokenWaitP99: 1.2},
		},
		FirstRows: []firstRow{{VisibleAfter: 1.5}, {VisibleAfter: 12}},
	}
	r.summarize()
	s := r.Summary
	if s.LoadRatio["narrow"] != 0.25 || s.LoadRatio["wide"] != 0.5 {
		t.Errorf("load ratios %v", s.LoadRatio)
	}
	if s.MaterializedRatio["narrow"] != 0.4 || s.MaterializedCPURatio["narrow"] != 2.5 || len(s.MaterializedRatio) != 1 {
		t.Errorf("ratios to MaterializedPostgreSQL %v, CPU %v; want narrow's only (wide's did not run)", s.MaterializedRatio, s.MaterializedCPURatio)
	}
	if s.MaxRateP99UnderOneSecond != 30_000 {
		t.Errorf("highest rate with p99 ≤ 1 s = %d, want 30000", s.MaxRateP99UnderOneSecond)
	}
	if s.MaxRateTokenP99UnderOneSecond != 10_000 {
		t.Errorf("highest rate with a token wait p99 ≤ 1 s = %d, want 10000 (30000 had a stale read)", s.MaxRateTokenP99UnderOneSecond)
	}
	if s.FirstRowSeconds != 12 {
		t.Errorf("first row = %v, want the slowest, 12", s.FirstRowSeconds)
	}
	if s.RedisShare != 0.2 || s.Layer2Share != 0.3 {
		t.Errorf("Redis share %v, Layer 2 share %v; want 0.2 and 0.3", s.RedisShare, s.Layer2Share)
	}
}

func TestQuickKeepsExplicitFlags(t *testing.T) {
	t.Setenv("WALHOUSE_PG_URL", "postgres://x")
	t.Setenv("WALHOUSE_KAFKA_BROKERS", "k:1")
	t.Setenv("WALHOUSE_CLICKHOUSE_URL", "http://c:1")
	t.Setenv("WALHOUSE_REDIS_ADDR", "r:1")
	o, err := parseOptions([]string{"-quick", "-step", "7s", "-pgbench", "/bin/sh"})
	if err != nil {
		t.Fatal(err)
	}
	if o.step != 7*time.Second || o.narrowRows != 200_000 || len(o.rates) != 2 || o.name != "e2e-quick" {
		t.Errorf("quick options: step %v, narrow rows %d, rates %v, name %q", o.step, o.narrowRows, o.rates, o.name)
	}
}

func TestTokenWaits(t *testing.T) {
	var ps []tokenProbe
	for i := 1; i <= 200; i++ {
		ps = append(ps, tokenProbe{wait: time.Duration(i) * 10 * time.Millisecond, fresh: i <= 199})
	}
	n, stale, p50, p99, maxWait := tokenWaits(ps)
	if n != 200 || stale != 1 || p50 != 1.01 || p99 != 1.99 || maxWait != 2 {
		t.Errorf("tokenWaits = %d reads, %d stale, p50 %v, p99 %v, max %v; want 200, 1, 1.01, 1.99, 2", n, stale, p50, p99, maxWait)
	}
	if n, _, _, _, _ := tokenWaits(nil); n != 0 {
		t.Errorf("tokenWaits of no probe counted %d", n)
	}
}

func TestServerWaits(t *testing.T) {
	ps := []tokenProbe{{server: 3 * time.Second}, {server: time.Second}, {server: 2 * time.Second}}
	if p50, p99 := serverWaits(ps); p50 != 2 || p99 != 3 {
		t.Errorf("serverWaits = p50 %v, p99 %v; want 2, 3", p50, p99)
	}
}
