package record

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestRecopyDoneHeadersRoundTrip(t *testing.T) {
	at := time.Date(2026, 3, 4, 5, 6, 7, 891000, time.UTC)
	in := RecopyDone{Source: Source{Schema: "public", Table: "orders"}, ID: "r-1", LSN: 0x16B3748, At: at, Partitions: 3}
	hs := in.Headers()
	if hs[0].Key != HeaderHeartbeat {
		t.Errorf("first header is %q, want %q: capture's partitioner places only such records explicitly", hs[0].Key, HeaderHeartbeat)
	}
	got, ok, err := ParseRecopyDone(headerGetter(hs))
	if !ok || err != nil || got.Source != in.Source || got.ID != in.ID || got.LSN != in.LSN || !got.At.Equal(in.At) || got.Partitions != in.Partitions {
		t.Fatalf("round trip: got %+v ok %v err %v, want %+v", got, ok, err, in)
	}
	if _, ok, _ := ParseTruncate(headerGetter(hs)); ok {
		t.Error("a re-copy done marker parses as a truncate marker")
	}
	if _, ok, _ := ParseRecopyDone(headerGetter(Truncate{Source: in.Source, LSN: 1, CommitTime: at, At: at}.Headers())); ok {
		t.Error("a truncate marker parses as a re-copy done marker")
	}
}

func TestParseRecopyDoneRejectsMalformedMarkers(t *testing.T) {
	good := RecopyDone{Source: Source{Schema: "public", Table: "orders"}, ID: "r-1", LSN: 42, At: time.Unix(0, 0), Partitions: 2}.Headers()
	with := func(key, value string) []Header {
		out := append([]Header(nil), good...)
		for i := range out {
			if out[i].Key == key {
				out[i].Value = value
			}
		}
		return out
	}
	without := func(key string) []Header {
		var out []Header
		for _, h := range good {
			if h.Key != key {
				out = append(out, h)
			}
		}
		return out
	}
	for name, hs := range map[string][]Header{
		"empty id":        with(HeaderRecopy, ""),
		"long id":         with(HeaderRecopy, strings.Repeat("x", 129)),
		"no heartbeat":    without(HeaderHeartbeat),
		"no lsn":          with(HeaderLSN, "0/0"),
		"bad table":       with(HeaderTable, "orders"),
		"no partitions":   without(HeaderRecopyPartitions),
		"zero partitions": with(HeaderRecopyPartitions, "0"),
		"bad partitions":  with(HeaderRecopyPartitions, "x"),
	} {
		if _, ok, err := ParseRecopyDone(headerGetter(hs)); !ok || !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: ok %v, err %v; want a marker and ErrInvalid", name, ok, err)
		}
	}
}

func TestRecopyRequestCodec(t *testing.T) {
	good := RecopyRequest{ID: "r-1", Table: "public.orders", Topic: "wh.public.orders", Partition: 0, From: 10, To: 20, RequestedAt: time.Unix(5, 0).UTC()}
	raw, err := MarshalRecopyRequest(good)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseRecopyRequest("public.orders", raw)
	if err != nil || got != good {
		t.Fatalf("round trip: %+v, %v; want %+v", got, err, good)
	}
	for name, tc := range map[string]struct {
		key   string
		value string
	}{
		"not json":      {"public.orders", "{"},
		"other key":     {"public.other", string(raw)},
		"no id":         {"public.orders", `{"table":"public.orders","topic":"t","from":1,"to":2}`},
		"bad table":     {"orders", `{"id":"x","table":"orders","topic":"t","from":1,"to":2}`},
		"no topic":      {"public.orders", `{"id":"x","table":"public.orders","from":1,"to":2}`},
		"negative gap":  {"public.orders", `{"id":"x","table":"public.orders","topic":"t","from":3,"to":2}`},
		"too large":     {"public.orders", `{"id":"x","pad":"` + strings.Repeat("x", maxRecopyRequest) + `"}`},
		"bad partition": {"public.orders", `{"id":"x","table":"public.orders","topic":"t","partition":-1,"from":1,"to":2}`},
	} {
		if _, err := ParseRecopyRequest(tc.key, []byte(tc.value)); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	if _, err := MarshalRecopyRequest(RecopyRequest{Table: "public.orders", Topic: "t"}); !errors.Is(err, ErrInvalid) {
		t.Errorf("marshal without id: %v, want ErrInvalid", err)
	}
}

// TestRewriteSweepID: the done markers of a copy after a rewrite are told
// from a request's, are unique per table and position, and fit a marker
// (ParseRecopyDone refuses IDs over 128 bytes) whatever the table's name.
func TestRewriteSweepID(t *testing.T) {
	long := Source{Schema: strings.Repeat("s", 63), Table: strings.Repeat("t", 63)}
	ids := map[string]bool{}
	for _, c := range []struct {
		src Source
		at  LSN
	}{
		{Source{Schema: "public", Table: "a"}, 0x1_0000_0000},
		{Source{Schema: "public", Table: "b"}, 0x1_0000_0000},
		{Source{Schema: "public", Table: "a"}, 0x1_0000_0001},
		{long, ^LSN(0)},
	} {
		id := RewriteSweepID(c.src, c.at)
		if !IsRewriteSweep(id) || len(id) > 128 || ids[id] {
			t.Errorf("RewriteSweepID(%v, %s) = %q: want a rewrite sweep ID of at most 128 bytes, unique", c.src, c.at, id)
		}
		ids[id] = true
		d, ok, err := ParseRecopyDone(headerGetter(RecopyDone{Source: c.src, ID: id, LSN: c.at, At: time.Now(), Partitions: 3}.Headers()))
		if !ok || err != nil || d.ID != id {
			t.Errorf("marker with ID %q: parsed %+v, %v, %v", id, d, ok, err)
		}
	}
	for _, id := range []string{"wh.public.a/0/10-20", "", "rewrit"} {
		if IsRewriteSweep(id) {
			t.Errorf("IsRewriteSweep(%q) = true, want false: a request's ID", id)
		}
	}
}
