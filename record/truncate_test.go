package record

import (
	"errors"
	"testing"
	"time"
)

func headerGetter(hs []Header) func(string) (string, bool) {
	return func(key string) (string, bool) {
		for _, h := range hs {
			if h.Key == key {
				return h.Value, true
			}
		}
		return "", false
	}
}

func TestTruncateHeadersRoundTrip(t *testing.T) {
	commit := time.Date(2026, 3, 4, 5, 6, 7, 891000, time.UTC)
	for _, in := range []Truncate{
		{Source: Source{Schema: "public", Table: "orders"}, LSN: 0x16B3748, CommitTime: commit, At: commit.Add(-time.Second)},
		{Source: Source{Schema: "s", Table: "t.x"}, LSN: 1 << 40, CommitTime: commit, At: commit, Cascade: true, RestartIdentity: true},
	} {
		hs := in.Headers()
		if hs[0].Key != HeaderHeartbeat {
			t.Errorf("first header is %q, want %q: capture's partitioner places only such records explicitly", hs[0].Key, HeaderHeartbeat)
		}
		got, ok, err := ParseTruncate(headerGetter(hs))
		if !ok || err != nil {
			t.Fatalf("ParseTruncate(%v) = ok %v, err %v", hs, ok, err)
		}
		if got.Source != in.Source || got.LSN != in.LSN || !got.CommitTime.Equal(in.CommitTime) || !got.At.Equal(in.At) ||
			got.Cascade != in.Cascade || got.RestartIdentity != in.RestartIdentity {
			t.Errorf("round trip: got %+v, want %+v", got, in)
		}
		// A marker parses as a heartbeat too, which is why consumers check
		// for a marker first.
		hb, ok, err := ParseHeartbeat(headerGetter(hs))
		if !ok || err != nil || hb.LSN != in.LSN || hb.Source != in.Source || !hb.At.Equal(in.At) {
			t.Errorf("marker as heartbeat: %+v, ok %v, err %v", hb, ok, err)
		}
	}
}

func TestParseTruncateRejectsMalformedMarkers(t *testing.T) {
	good := Truncate{Source: Source{Schema: "public", Table: "orders"}, LSN: 42, CommitTime: time.Unix(1, 0), At: time.Unix(0, 0)}.Headers()
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
		"no heartbeat":   without(HeaderHeartbeat),
		"bad commit":     with(HeaderTruncate, "yesterday"),
		"bad lsn":        with(HeaderLSN, "16B3748"),
		"zero lsn":       with(HeaderLSN, "0/0"),
		"no table":       without(HeaderTable),
		"unknown option": with(HeaderTruncateOptions, "cascade,only"),
	} {
		_, ok, err := ParseTruncate(headerGetter(hs))
		if !ok || !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: ok %v, err %v; want a marker with an ErrInvalid error", name, ok, err)
		}
	}
	heartbeat := without(HeaderTruncate)
	if _, ok, err := ParseTruncate(headerGetter(heartbeat)); ok || err != nil {
		t.Errorf("a heartbeat parsed as a truncate marker: ok %v, err %v", ok, err)
	}
}
