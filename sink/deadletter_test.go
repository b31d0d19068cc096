package sink

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestParseDeadLetterValueDropped reads a dead letter that went without
// its value.
func TestParseDeadLetterValueDropped(t *testing.T) {
	l, err := ParseDeadLetter(&kgo.Record{Key: []byte("k"), Headers: []kgo.RecordHeader{
		{Key: HeaderTopic, Value: []byte("wh.public.t")},
		{Key: HeaderError, Value: []byte("too large")},
		{Key: HeaderValueDropped, Value: []byte("70000000")},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if l.ValueDropped != 70000000 || l.Value != nil || l.Topic != "wh.public.t" {
		t.Errorf("parsed %+v, want topic wh.public.t, no value and ValueDropped 70000000", l)
	}
}
