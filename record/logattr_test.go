package record

import (
	"fmt"
	"testing"
)

func TestLogAttrs(t *testing.T) {
	for _, tc := range []struct {
		name string
		r    *Record
		want string
	}{
		{"nil", nil, "[]"},
		{"streamed change", &Record{EventID: "e1", TenantID: "acme", Source: Source{Schema: "public", Table: "orders"}, LSN: 0x10, CommitLSN: 0x20,
			Values: []Value{{Text: "secret@example.com"}}},
			"[eventId e1 tenant acme table public.orders lsn 0/10 commit_lsn 0/20]"},
		{"empty tenant kept, no positions", &Record{Source: Source{Schema: "s", Table: "t"}}, "[tenant  table s.t]"},
	} {
		if got := fmt.Sprint(tc.r.LogAttrs()); got != tc.want {
			t.Errorf("%s: LogAttrs = %s, want %s", tc.name, got, tc.want)
		}
	}
}
