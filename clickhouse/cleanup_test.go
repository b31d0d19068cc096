package clickhouse

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/walhouse/walhouse/record"
)

// Cleanup removes every stored version of a deleted row and the
// superseded versions of the others in partitions whose tombstones are
// older than the horizon, leaves younger partitions alone, and never
// changes what FINAL shows. A version older than a cleaned tombstone that
// arrives afterwards brings its row back: the condition the horizon must
// guarantee (docs/operations.md).
func TestIntegrationCleanup(t *testing.T) {
	f := newTruncFixture(t)
	ctx := context.Background()
	// January: a row deleted, a row updated, a row left as it is.
	f.load("jan-1", change{"a/1/2024-01-05", record.Insert, 10, "gone"}, change{"a/2/2024-01-06", record.Insert, 11, "v1"}, change{"a/3/2024-01-07", record.Insert, 12, "kept"})
	f.load("jan-2", change{"a/1/2024-01-05", record.Delete, 20, ""}, change{"a/2/2024-01-06", record.Update, 21, "v2"})
	horizon := time.Now()
	// February: a tombstone younger than the horizon.
	f.load("feb-1", change{"a/4/2024-02-05", record.Insert, 30, "x"})
	f.load("feb-2", change{"a/4/2024-02-05", record.Delete, 31, ""})
	final := f.rows(true)
	stored := f.rows(false)

	cleaned, err := Cleanup(ctx, f.w.conn, CleanupRequest{Database: f.db, Before: horizon}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(cleaned) != 1 || cleaned[0].Partition != "202401" || cleaned[0].RowsBefore != 5 || cleaned[0].RowsAfter != 2 {
		t.Errorf("cleaned %+v; want partition 202401 from 5 rows to 2", cleaned)
	}
	if got := f.rows(true); got != final {
		t.Errorf("FINAL changed:\n%s\nwant\n%s", got, final)
	}
	after := f.rows(false)
	for _, gone := range []string{"'a',1,", "'a',2,'2024-01-06',11"} {
		if strings.Contains(after, gone) {
			t.Errorf("stored rows still hold %s:\n%s", gone, after)
		}
	}
	if !strings.Contains(after, "'a',4,'2024-02-05',31,1") || !strings.Contains(after, "'a',4,'2024-02-05',30,0") {
		t.Errorf("February (tombstone younger than the horizon) was cleaned:\n%s\nbefore:\n%s", after, stored)
	}

	// A version older than the cleaned tombstone, loaded late: the row
	// is back. The horizon exists to make this impossible.
	f.load("late", change{"a/1/2024-01-05", record.Update, 15, "late"})
	if got := f.rows(true); !strings.Contains(got, "'late'") {
		t.Errorf("a late older version after cleanup did not come back; if ClickHouse now refuses it, update docs/operations.md:\n%s", got)
	}
}
