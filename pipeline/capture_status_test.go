package pipeline

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"
	"time"

	"github.com/walhouse/walhouse/capture"
	"github.com/walhouse/walhouse/record"
)

// TestCaptureStatus checks the handler serves capture.StatusOf of the
// current stats as JSON (capture's TestStatusOf covers the document).
func TestCaptureStatus(t *testing.T) {
	now := time.Date(2024, 5, 1, 10, 0, 10, 0, time.UTC)
	stats := capture.Stats{Rows: 42, Received: 0x3000, Confirmed: 0x2000, ServerWALEnd: 0x3800, LastEvent: now.Add(-4 * time.Second), PendingBytes: 777}
	cs := CaptureStatus{slot: "walhouse_x", stats: func() capture.Stats { return stats }, now: func() time.Time { return now }}
	rec := httptest.NewRecorder()
	cs.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/status", nil))
	if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != "application/json" || rec.Header().Get("Cache-Control") != "no-store" {
		t.Fatalf("status %d, headers %v", rec.Code, rec.Header())
	}
	var got record.CaptureStatus
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatalf("decode %s: %v", rec.Body, err)
	}
	if want := capture.StatusOf("walhouse_x", stats, now); !reflect.DeepEqual(got, want) {
		t.Errorf("served %+v\nwant    %+v", got, want)
	}
}
