package record

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestDeadLetterRoundTrip: what Headers writes, ParseDeadLetter reads
// back, for the sink's dead letters and capture's, and for one that goes
// without its value.
func TestDeadLetterRoundTrip(t *testing.T) {
	at := time.Date(2026, 12, 7, 8, 0, 0, 123, time.UTC)
	for name, l := range map[string]DeadLetter{
		"sink": {Topic: "wh.public.t", Partition: 2, Offset: 77, Key: []byte("k"), Value: []byte(`{"v":1}`),
			Err: errors.New("why"), FirstSeen: at, Attempts: 3, Origin: "sink", Reason: "over_budget"},
		"sink, a row batch": {Topic: "wh.public.t", Partition: 0, Offset: 1, Key: []byte("k"), Value: []byte(`x`),
			Err: errors.New("why"), FirstSeen: at, Attempts: 1, Origin: "sink", Rows: 12},
		"capture": {Topic: "wh.public.t", Partition: -1, Offset: -1, Key: []byte("k"), Value: []byte(`{"v":1}`),
			Err: errors.New("no tenant"), FirstSeen: at, Attempts: 1, Origin: "capture", Reason: ReasonNoTenant,
			Table: "public.t", PrimaryKey: `{"id":"7"}`, CommitLSN: 0x200},
		"without its value": DeadLetter{Topic: "wh.public.t", Partition: 1, Offset: 5, Key: []byte("k"), Value: []byte("123456"),
			Err: errors.New("too large"), FirstSeen: at, Attempts: 1, Origin: "sink"}.WithoutValue(),
	} {
		t.Run(name, func(t *testing.T) {
			got, err := ParseDeadLetter(l.Key, l.Value, l.Headers())
			if err != nil {
				t.Fatal(err)
			}
			if got.Err.Error() != l.Err.Error() {
				t.Errorf("error %q, want %q", got.Err, l.Err)
			}
			got.Err, l.Err = nil, nil
			if !reflect.DeepEqual(got, l) {
				t.Errorf("read back\n%+v\nwant\n%+v", got, l)
			}
		})
	}
	if l := (DeadLetter{Value: []byte("123456")}).WithoutValue(); l.Value != nil || l.ValueDropped != 6 {
		t.Errorf("WithoutValue: value %q, dropped %d; want none and 6", l.Value, l.ValueDropped)
	}
}

// TestDeadLetterErrorIsCut: an error quoting a whole value travels cut to
// MaxDeadLetterError.
func TestDeadLetterErrorIsCut(t *testing.T) {
	l := DeadLetter{Topic: "t", Err: errors.New(strings.Repeat("x", 1<<20))}
	for _, h := range l.Headers() {
		if h.Key == HeaderDLError && len(h.Value) > MaxDeadLetterError+len("…") {
			t.Errorf("error header of %d bytes, want at most %d", len(h.Value), MaxDeadLetterError)
		}
	}
}

// TestParseDeadLetterRefuses: the topic is read, not trusted.
func TestParseDeadLetterRefuses(t *testing.T) {
	for name, hs := range map[string][]Header{
		"no topic":        {{HeaderDLError, "why"}},
		"partition":       {{HeaderDLTopic, "t"}, {HeaderDLPartition, "x"}},
		"partition range": {{HeaderDLTopic, "t"}, {HeaderDLPartition, "4294967296"}},
		"offset":          {{HeaderDLTopic, "t"}, {HeaderDLOffset, "1.5"}},
		"first seen":      {{HeaderDLTopic, "t"}, {HeaderDLFirstSeen, "yesterday"}},
		"attempts":        {{HeaderDLTopic, "t"}, {HeaderDLAttempts, "many"}},
		"value dropped":   {{HeaderDLTopic, "t"}, {HeaderDLValueDropped, "-"}},
		"commit position": {{HeaderDLTopic, "t"}, {HeaderDLCommitLSN, "0/zz"}},
	} {
		if _, err := ParseDeadLetter(nil, nil, hs); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if l, err := ParseDeadLetter(nil, nil, []Header{{HeaderDLTopic, "t"}}); err != nil || l.Origin != "sink" {
		t.Errorf("a dead letter without an origin: %+v, %v; want the sink's (written before origins were named)", l, err)
	}
}
