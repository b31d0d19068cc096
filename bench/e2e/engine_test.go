package main

import (
	"reflect"
	"testing"
)

func TestParsePerfShares(t *testing.T) {
	for _, tc := range []struct {
		name, out string
		want      []stageCPU
	}{
		{"empty", "", nil},
		{"objects, the walhouse binary named as the HTTP front", `
    71.37%  libchdb.so
    24.43%  [kernel.kallsyms]
     4.20%  walhouse
`, []stageCPU{{"libchdb.so", 0.7137}, {"[kernel.kallsyms]", 0.2443}, {"walhouse (HTTP front, Go)", 0.042}}},
		{"comments and call-graph lines skipped", `# Samples: 540
# Event count (approx.): 1
    86.11%  libchdb.so
            |--10.00%--0x7faa875e1a06
`, []stageCPU{{"libchdb.so", 0.8611}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := parsePerfShares(tc.out)
			if len(got) != len(tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
			for i := range got {
				if got[i].Stage != tc.want[i].Stage || got[i].Seconds-tc.want[i].Seconds > 1e-9 || tc.want[i].Seconds-got[i].Seconds > 1e-9 {
					t.Errorf("share %d = %v, want %v", i, got[i], tc.want[i])
				}
			}
		})
	}
}

func TestLagQuantiles(t *testing.T) {
	for _, tc := range []struct {
		name    string
		samples []float64
		want    lagResult
	}{
		{"none", nil, lagResult{System: "s"}},
		{"one", []float64{0.4}, lagResult{System: "s", Samples: 1, P50: 0.4, P99: 0.4, Max: 0.4}},
		{"unsorted", []float64{0.9, 0.1, 0.5, 0.3}, lagResult{System: "s", Samples: 4, P50: 0.5, P99: 0.9, Max: 0.9}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := lagQuantiles("s", tc.samples); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}
