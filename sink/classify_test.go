package sink

import (
	"errors"
	"fmt"
	"testing"
	"time"
	"unsafe"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walhouse/walhouse/record"
)

// TestClassify: a record's kind and header facts are read once, as the
// sink's stages used to read them each: markers only without a value, a
// re-copy done or truncate marker before the heartbeat whose headers it
// carries, a row batch only with a value, a bad rows count weighing 1 and
// refusing the batch.
func TestClassify(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	src := record.Source{Schema: "public", Table: "t"}
	hdrs := func(hs []record.Header) []kgo.RecordHeader {
		var out []kgo.RecordHeader
		for _, h := range hs {
			out = append(out, kgo.RecordHeader{Key: h.Key, Value: []byte(h.Value)})
		}
		return out
	}
	h := func(kv ...string) []kgo.RecordHeader {
		var out []kgo.RecordHeader
		for i := 0; i < len(kv); i += 2 {
			out = append(out, kgo.RecordHeader{Key: kv[i], Value: []byte(kv[i+1])})
		}
		return out
	}
	beat := h(record.HeaderHeartbeat, at.Format(time.RFC3339Nano), record.HeaderLSN, "0/10", record.HeaderTable, "public.t")
	truncate := hdrs(record.Truncate{Source: src, LSN: 16, CommitTime: at, At: at}.Headers())
	recopy := hdrs(record.RecopyDone{Source: src, ID: "r1", LSN: 16, At: at, Partitions: 3}.Headers())
	value := []byte("{}")
	for _, tc := range []struct {
		name    string
		value   []byte
		headers []kgo.RecordHeader
		want    string
		wantErr bool
	}{
		{name: "change", value: value, want: "change rows=1"},
		{name: "change during a copy", value: value, headers: h(record.HeaderCopying, "1"), want: "change rows=1 copying"},
		{name: "a move's delete", value: value, headers: h(record.HeaderMove, "1"), want: "change rows=1 move"},
		{name: "not a move", value: value, headers: h(record.HeaderMove, "0", record.HeaderMove, "1"), want: "change rows=1"},
		{name: "row batch", value: value, headers: h(record.HeaderRows, "7", record.HeaderRows, "9"), want: "row batch rows=7"},
		{name: "row batch with a bad count", value: value, headers: h(record.HeaderRows, "x"), want: "row batch rows=1", wantErr: true},
		{name: "row batch over the budget", value: value, headers: h(record.HeaderRows, fmt.Sprint(record.MaxBatchRows+1)), want: "row batch rows=1", wantErr: true},
		{name: "valueless with a rows count", headers: h(record.HeaderRows, "7"), want: "change rows=7"},
		{name: "valueless without headers", want: "change rows=1"},
		{name: "valueless, unknown headers", headers: h("other", "1"), want: "change rows=1"},
		{name: "heartbeat", headers: beat, want: "heartbeat rows=1 public.t@0/10"},
		{name: "heartbeat headers with a value", value: value, headers: beat, want: "change rows=1"},
		{name: "malformed heartbeat", headers: h(record.HeaderHeartbeat, "yesterday"), want: "heartbeat rows=1", wantErr: true},
		{name: "truncate marker", headers: truncate, want: "truncate marker rows=1 public.t@0/10"},
		{name: "malformed truncate marker", headers: append(h(record.HeaderTruncate, "x"), beat...), want: "truncate marker rows=1", wantErr: true},
		{name: "re-copy done marker", headers: recopy, want: "re-copy done marker rows=1 public.t@0/10 r1"},
		{name: "re-copy done marker with a truncate header", headers: append(recopy, h(record.HeaderTruncate, "x")...), want: "re-copy done marker rows=1 public.t@0/10 r1"},
		{name: "malformed re-copy done marker", headers: append(h(record.HeaderRecopy, ""), beat...), want: "re-copy done marker rows=1", wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			it := classify(&kgo.Record{Value: tc.value, Headers: tc.headers})
			got := fmt.Sprintf("%s rows=%d", it.kind, it.rows)
			if it.copying {
				got += " copying"
			}
			if it.move {
				got += " move"
			}
			if it.err() == nil {
				switch {
				case it.kind == kindHeartbeat:
					got += fmt.Sprintf(" %s.%s@%s", it.detail.heartbeat.Source.Schema, it.detail.heartbeat.Source.Table, it.detail.heartbeat.LSN)
				case it.kind == kindTruncate:
					got += fmt.Sprintf(" %s.%s@%s", it.detail.truncate.Source.Schema, it.detail.truncate.Source.Table, it.detail.truncate.LSN)
				case it.kind == kindRecopy:
					got += fmt.Sprintf(" %s.%s@%s %s", it.detail.recopy.Source.Schema, it.detail.recopy.Source.Table, it.detail.recopy.LSN, it.detail.recopy.ID)
				}
			}
			if got != tc.want || (it.err() != nil) != tc.wantErr {
				t.Fatalf("classify = %s, err %v; want %s, error %v", got, it.err(), tc.want, tc.wantErr)
			}
			if it.err() != nil && !errors.Is(it.err(), record.ErrInvalid) {
				t.Fatalf("err %v does not wrap record.ErrInvalid", it.err())
			}
		})
	}
}

// TestItemStaysSmall: a poll holds an item per record (50,000 and more),
// so what few records have stays behind item.detail.
func TestItemStaysSmall(t *testing.T) {
	if n := unsafe.Sizeof(item{}); n > 24 {
		t.Fatalf("an item takes %d bytes, want at most 24 (three words)", n)
	}
}
