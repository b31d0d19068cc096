package pipeline

import (
	"testing"
	"time"

	"github.com/walhouse/walhouse/clickhouse"
	"github.com/walhouse/walhouse/schema"
	"github.com/walhouse/walhouse/verify"
)

// TestVerifiedRound checks what a verified table's round records for the
// status page: counts and positions, repaired rows apart from those left.
func TestVerifiedRound(t *testing.T) {
	at := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name string
		res  verify.TableResult
		want clickhouse.VerifyRound
	}{
		{"equal", verify.TableResult{Table: "public.orders", ClickHouse: "orders", Snapshot: 0x1700000, VerifiedAt: at, RowsChecked: 900},
			clickhouse.VerifyRound{Table: "orders", Outcome: schema.Verified, FinishedAt: at, SnapshotLSN: 0x1700000, RowsChecked: 900}},
		{"some repaired, some left, more not examined", verify.TableResult{Table: "crm.items", ClickHouse: "crm__items", Snapshot: 7, VerifiedAt: at, Standby: true,
			RowsChecked: 50, ChangedSince: 2, NotExamined: 4, Mismatches: []verify.Mismatch{{Repaired: true}, {}, {Repaired: true}}},
			clickhouse.VerifyRound{Table: "crm__items", Outcome: schema.Verified, FinishedAt: at, SnapshotLSN: 7, Standby: true,
				RowsChecked: 50, MismatchedRows: 1, RepairedRows: 2, NotExamined: 4, ChangedSince: 2}},
	} {
		if got := verifiedRound(c.res); got != c.want {
			t.Errorf("%s: verifiedRound = %+v, want %+v", c.name, got, c.want)
		}
	}
}
