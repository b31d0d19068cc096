package clickhouse

import (
	"context"
	"testing"
	"time"

	"github.com/walhouse/walhouse/record"
	"github.com/walhouse/walhouse/sink"
)

// TestIntegrationLoadedPosition reads back the positions MarkLoaded
// recorded, per partition, the newest one of each; nothing for a partition
// or table without marks.
func TestIntegrationLoadedPosition(t *testing.T) {
	w := testWriter(t, "positions")
	ctx := context.Background()
	src := record.Source{ID: "s", Schema: "public", Table: "orders"}
	lsn, at, err := w.LoadedPosition(ctx, src, 0)
	if err != nil || lsn != 0 || !at.IsZero() {
		t.Fatalf("before any mark: %s, %v, %v; want nothing", lsn, at, err)
	}
	t0 := time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC)
	for _, marks := range [][]sink.Watermark{
		{{Source: src, Partition: 0, Through: t0, LSN: 0x5A_0000_0000, Partitions: 2}, {Source: src, Partition: 1, Through: t0, LSN: 0x10, Partitions: 2}},
		{{Source: src, Partition: 0, Through: t0.Add(10 * time.Second), LSN: 0x5A_0001_0000, Partitions: 2}},
	} {
		if err := w.MarkLoaded(ctx, marks); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		src       record.Source
		partition int32
		lsn       record.LSN
		at        time.Time
	}{
		{src, 0, 0x5A_0001_0000, t0.Add(10 * time.Second)},
		{src, 1, 0x10, t0},
		{src, 2, 0, time.Time{}},
		{record.Source{ID: "s", Schema: "public", Table: "other"}, 0, 0, time.Time{}},
	} {
		lsn, at, err := w.LoadedPosition(ctx, tc.src, tc.partition)
		if err != nil || lsn != tc.lsn || !at.Equal(tc.at) {
			t.Errorf("%s.%s partition %d: %s at %v (%v), want %s at %v", tc.src.Schema, tc.src.Table, tc.partition, lsn, at, err, tc.lsn, tc.at)
		}
	}
}
