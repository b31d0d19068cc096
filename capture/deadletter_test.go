package capture

import (
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/walhouse/walhouse/record"
)

func TestQuietCounter(t *testing.T) {
	q := quietCounter{every: time.Hour}
	steps := []struct {
		key  string
		ok   bool
		held int
	}{
		{"a", true, 0}, {"a", false, 0}, {"a", false, 0}, {"b", true, 0}, {"b", false, 0},
	}
	for i, st := range steps {
		if ok, held := q.allow(st.key); ok != st.ok || held != st.held {
			t.Fatalf("step %d (%s): allow = %v, %d; want %v, %d", i, st.key, ok, held, st.ok, st.held)
		}
	}
	q.last["a"] = time.Now().Add(-2 * time.Hour) // a period later
	if ok, held := q.allow("a"); !ok || held != 2 {
		t.Fatalf("after the period: allow = %v, %d; want true, 2", ok, held)
	}
}

func TestDeadLetterRecord(t *testing.T) {
	cols := []record.Column{{Name: "id", Type: "int8", Key: true}, {Name: "tenant_id", Type: "text"}, {Name: "note", Type: "text"}}
	rec := &record.Record{
		EventID: record.EventID("src", 0x200, 1, time.Unix(1, 0)), OccurredAt: time.Unix(1, 0).UTC(), IngestedAt: time.Unix(2, 0).UTC(),
		TenantColumn: "tenant_id", Source: record.Source{ID: "src", Schema: "public", Table: "t"},
		LSN: 0x100, CommitLSN: 0x200, Version: 0x100, Op: record.Insert, Columns: cols,
		Values: []record.Value{{Text: "7"}, {Null: true}, {Text: "big"}},
	}
	d := newDeadLetters("wh-dlq", slog.Default())
	for _, tc := range []struct {
		reason    string
		maxValue  int
		wantValue bool
	}{
		{record.ReasonNoTenant, 1 << 20, true},
		{record.ReasonNoTenant, 10, false}, // over the dead-letter topic's bound: headers only
		{record.ReasonTooLarge, 1 << 20, false},
	} {
		b := badRow{table: "public.t", topic: "wh.public.t", commit: 0x200, rec: rec, key: primaryKeyJSON(cols, []int{0}, rec.Values), reason: tc.reason, err: errors.New("why")}
		kr := d.record(b, tc.maxValue)
		h := map[string]string{}
		for _, x := range kr.Headers {
			h[x.Key] = string(x.Value)
		}
		want := map[string]string{
			record.HeaderDLTopic: "wh.public.t", record.HeaderDLPartition: "-1", record.HeaderDLOffset: "-1",
			record.HeaderDLError: "why", record.HeaderDLOrigin: "capture", record.HeaderDLReason: tc.reason,
			record.HeaderDLCommitLSN: "0/200", record.HeaderDLTable: "public.t", record.HeaderDLPrimaryKey: `{"id":"7"}`,
		}
		for k, v := range want {
			if h[k] != v {
				t.Errorf("%s/%d: header %s = %q, want %q", tc.reason, tc.maxValue, k, h[k], v)
			}
		}
		if _, dropped := h[record.HeaderDLValueDropped]; dropped == tc.wantValue {
			t.Errorf("%s/%d: header %s present: %v, want it exactly when the value is left out", tc.reason, tc.maxValue, record.HeaderDLValueDropped, dropped)
		}
		if kr.Topic != "wh-dlq" || string(kr.Key) != rec.PartitionKey() || (len(kr.Value) > 0) != tc.wantValue {
			t.Errorf("%s/%d: record %s key %s value %d bytes, want the dead-letter topic, the partition key and a value: %v", tc.reason, tc.maxValue, kr.Topic, kr.Key, len(kr.Value), tc.wantValue)
		}
	}
}

// Every policy's flag form parses back to it; anything else is refused.
func TestBadRowPolicyFlagForm(t *testing.T) {
	for _, p := range []BadRowPolicy{DeadLetterBadRows, StopOnBadRow} {
		if got, err := ParseBadRowPolicy(p.String()); got != p || err != nil {
			t.Errorf("ParseBadRowPolicy(%q) = %v, %v; want %v", p, got, err, p)
		}
	}
	if got := StopOnBadRow.String(); got != "stop" {
		t.Errorf("StopOnBadRow.String() = %q, want stop", got)
	}
	if got := BadRowPolicy(7).String(); got != "BadRowPolicy(7)" {
		t.Errorf("BadRowPolicy(7).String() = %q", got)
	}
	for _, s := range []string{"", "Stop", "BadRowPolicy(7)"} {
		if _, err := ParseBadRowPolicy(s); err == nil {
			t.Errorf("ParseBadRowPolicy(%q) accepted", s)
		}
	}
}
