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
	if a, b := TopicName("wh", "s", "a.b"), TopicName("wh", "s.a", "b"); a == b {
		t.Errorf("s.\"a.b\" and \"s.a\".b share topic %q", a)
	}
	hashed := TopicName("wh", "public", "a b")
	if lookalike := TopicName("wh", "public", strings.TrimPrefix(hashed, "wh.public.")); lookalike == hashed {
		t.Errorf("table %q shares the hashed topic of \"a b\"", lookalike)
	}
	if a, b := TopicName("wh", "public", long+"1"), TopicName("wh", "public", long+"2"); a == b {
		t.Errorf("two long names share topic %q", a)
	}
}
