package main

import "testing"

func TestParseAcceptLost(t *testing.T) {
	accept, err := parseAcceptLost([]string{"wh.public.a/2", "wh.public.b"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		topic     string
		partition int32
		want      bool
	}{{"wh.public.a", 2, true}, {"wh.public.a", 1, false}, {"wh.public.b", 7, true}, {"wh.public.c", 0, false}} {
		if got := accept(c.topic, c.partition); got != c.want {
			t.Errorf("accept(%s, %d) = %v, want %v", c.topic, c.partition, got, c.want)
		}
	}
	if _, err := parseAcceptLost([]string{"wh.public.a/x"}); err == nil {
		t.Error("a partition that is no number was accepted")
	}
}
