package capture

import (
	"time"

	"github.com/walhouse/walhouse/record"
)

// StatusOf builds the status document of a capture streaming from slot,
// from one snapshot of its Stats taken at now: what `walhouse capture
// --metrics-addr ADDR` serves at GET http://ADDR/status, and `walhouse
// serve --capture-url` reads (package monitor).
func StatusOf(slot string, st Stats, now time.Time) record.CaptureStatus {
	now = now.UTC()
	out := record.CaptureStatus{
		Slot:          slot,
		ReceivedLSN:   st.Received,
		ConfirmedLSN:  st.Confirmed,
		ServerWALEnd:  st.ServerWALEnd,
		PendingBytes:  int64(st.PendingBytes),
		Rows:          st.Rows,
		RefusedTables: st.Refused,
		Now:           now,
	}
	if out.RefusedTables == nil {
		out.RefusedTables = []record.RefusedTable{}
	}
	// Before the first server message the WAL end is unknown (zero): no lag
	// rather than a negative one.
	if st.ServerWALEnd > st.Confirmed {
		out.SlotLagBytes = int64(st.ServerWALEnd - st.Confirmed)
	}
	if !st.LastEvent.IsZero() {
		at := st.LastEvent.UTC()
		lag := max(now.Sub(at).Seconds(), 0)
		out.LastEventAt, out.LagSeconds = &at, &lag
	}
	return out
}
