package record

import (
	"errors"
	"testing"
)

func TestParseHeartbeatPartitions(t *testing.T) {
	base := map[string]string{HeaderHeartbeat: "2024-05-01T10:00:00Z", HeaderLSN: "0/10", HeaderTable: "public.orders"}
	for _, tc := range []struct {
		name    string
		parts   string // "" leaves the header out
		want    int32
		invalid bool
	}{
		{name: "absent (older capture)", want: 0},
		{name: "count", parts: "6", want: 6},
		{name: "zero", parts: "0", invalid: true},
		{name: "negative", parts: "-1", invalid: true},
		{name: "not a number", parts: "six", invalid: true},
		{name: "over int32", parts: "4294967296", invalid: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := map[string]string{}
			for k, v := range base {
				h[k] = v
			}
			if tc.parts != "" {
				h[HeaderPartitions] = tc.parts
			}
			hb, ok, err := ParseHeartbeat(func(k string) (string, bool) { v, ok := h[k]; return v, ok })
			if !ok {
				t.Fatal("not taken for a heartbeat")
			}
			if tc.invalid {
				if !errors.Is(err, ErrInvalid) {
					t.Fatalf("err = %v, want ErrInvalid", err)
				}
				return
			}
			if err != nil || hb.Partitions != tc.want {
				t.Fatalf("got %d, %v; want %d", hb.Partitions, err, tc.want)
			}
		})
	}
}
