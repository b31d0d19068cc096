package sink

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walhouse/walhouse/record"
)

func TestProvesLoaded(t *testing.T) {
	copying := []kgo.RecordHeader{{Key: record.HeaderCopying, Value: []byte("1")}}
	for _, tc := range []struct {
		name    string
		op      record.Op
		headers []kgo.RecordHeader
		want    bool
	}{
		{name: "streamed change", op: record.Insert, want: true},
		{name: "streamed delete", op: record.Delete, want: true},
		{name: "copied row", op: record.Read, want: false},
		{name: "change during its table's copy", op: record.Update, headers: copying, want: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := provesLoaded(classify(&kgo.Record{Headers: tc.headers, Value: []byte("{}")}), &record.Record{Op: tc.op}); got != tc.want {
				t.Fatalf("provesLoaded = %v, want %v", got, tc.want)
			}
		})
	}
}
