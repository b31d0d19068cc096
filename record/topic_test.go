package record

import (
	"strings"
	"testing"
)

func TestTopicName(t *testing.T) {
	long := strings.Repeat("x", 300)
	for _, tc := range []struct {
		schema, table string
		want          string // exact, or "" to check the rules only
	}{
		{"public", "orders", "wh.public.orders"},
		{"Sales", "Order-Items_2", "wh.Sales.Order-Items_2"},
		{"public", "order items", ""},
		{"public", "order_items", "wh.public.order_items"},
		{"public", `a"b`, ""},
		{"ünï", "cödé", ""},
		{"public", long, ""},
	} {
		got := TopicName("wh", tc.schema, tc.table)
		if tc.want != "" && got != tc.want {
			t.Errorf("TopicName(%q, %q) = %q, want %q", tc.schema, tc.table, got, tc.want)
		}
		if len(got) > maxTopicLen || strings.ContainsFunc(got, illegalTopicRune) {
			t.Errorf("TopicName(%q, %q) = %q: not a legal Kafka topic", tc.schema, tc.table, got)
		}
		if !strings.HasPrefix(got, "wh.") {
			t.Errorf("TopicName(%q, %q) = %q: lost the prefix", tc.schema, tc.table, got)
		}
	}
	if a, b := TopicName("wh", "public", "a b"), TopicName("wh", "public", "a_b"); a == b {
		t.Errorf("%q and %q share topic %q", "a b", "a_b", a)
	}
	if a, b := TopicName("wh", "public", long+"1"), TopicName("wh", "public", long+"2"); a == b {
		t.Errorf("two long names share topic %q", a)
	}
	hashed := TopicName("wh", "public", "a b")
	for _, pair := range [][4]string{
		{"public", "a b", "public", strings.TrimPrefix(hashed, "wh.public.")}, // a table named like another's hashed topic
		{"a", "b.c", "a.b", "c"},
		{"public", "a b", "public", "a_b"},
	} {
		if a, b := TopicName("wh", pair[0], pair[1]), TopicName("wh", pair[2], pair[3]); a == b {
			t.Errorf("%q.%q and %q.%q share topic %q", pair[0], pair[1], pair[2], pair[3], a)
		}
	}
	for _, table := range []string{"t-012345678", "t-abcdefABCD", "t_0123456789", "t-0123456789x"} {
		if got := TopicName("wh", "public", table); got != "wh.public."+table {
			t.Errorf("TopicName(%q) = %q, want it unchanged", table, got)
		}
	}
}
