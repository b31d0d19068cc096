package query

import (
	"testing"
	"time"
)

func TestSyncStateSettle(t *testing.T) {
	at := func(s int) time.Time { return time.Date(2024, 5, 1, 10, 0, s, 0, time.UTC) }
	part := func(p int32, s int, lsn LSN) PartitionSync {
		return PartitionSync{Partition: p, LoadedThrough: at(s), LSN: lsn}
	}
	for _, tc := range []struct {
		name     string
		topic    int32
		parts    []PartitionSync
		want     *time.Time
		wantLSN  LSN
		wantNull bool
	}{
		{name: "every partition reported", topic: 3, parts: []PartitionSync{part(0, 5, 50), part(1, 3, 70), part(2, 9, 40)}, want: ptr(at(3)), wantLSN: 40},
		{name: "a partition still loading a copy", topic: 3, parts: []PartitionSync{part(0, 5, 50), part(2, 9, 40)}, wantNull: true},
		{name: "partition count unknown", topic: 0, parts: []PartitionSync{part(0, 5, 50)}, wantNull: true},
		{name: "zero time is no report", topic: 2, parts: []PartitionSync{part(0, 5, 50), {Partition: 1}}, wantNull: true},
		{name: "nothing recorded", topic: 2, wantNull: true},
		{name: "one partition", topic: 1, parts: []PartitionSync{part(0, 7, 9)}, want: ptr(at(7)), wantLSN: 9},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := SyncState{TopicPartitions: tc.topic, Partitions: tc.parts}
			st.settle()
			if tc.wantNull {
				if st.LastSyncAt != nil || st.LSN != nil {
					t.Fatalf("got lastSyncAt %v, lsn %v; want both unknown", st.LastSyncAt, st.LSN)
				}
				return
			}
			if st.LastSyncAt == nil || !st.LastSyncAt.Equal(*tc.want) || st.LSN == nil || *st.LSN != tc.wantLSN {
				t.Fatalf("got lastSyncAt %v, lsn %v; want %v, %v", st.LastSyncAt, st.LSN, *tc.want, tc.wantLSN)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }
