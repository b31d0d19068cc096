package sink

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestSinkCutsDeadLetterErrorsInTheLog: a record whose error quotes 1 MiB
// of itself (a payload member named by a long string) is logged with the
// error cut, not as a line as large as the record.
func TestSinkCutsDeadLetterErrorsInTheLog(t *testing.T) {
	bad := rec("a", 0, 1)
	name := strings.Repeat("n", 1<<20)
	bad.Value = bytes.Replace(bad.Value, []byte(`"payload":{`), []byte(`"payload":{"`+name+`":"x",`), 1)
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	dead := &fakeDead{}
	runScript(t, Config{Logger: log, DeadLetters: dead}, nil, &fakeLoader{}, []*kgo.Record{rec("a", 0, 0), bad})
	if len(dead.got) != 1 || !strings.Contains(dead.got[0].Err.Error(), name) {
		t.Fatalf("dead letters %+v, want the record with the long name", len(dead.got))
	}
	for line := range strings.Lines(buf.String()) {
		if len(line) > 4<<10 {
			t.Errorf("a log line of %d bytes: %.200s…", len(line), line)
		}
	}
}
