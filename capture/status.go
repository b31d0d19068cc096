package capture

import (
	"time"

	"github.com/walhouse/walhouse/record"
)

// Status is capture's progress as one JSON document: what `walhouse capture
// --metrics-addr ADDR` serves at GET http://ADDR/status. Capture runs as a
// separate process, so the producer backlog (records handed to Kafka and
// not acknowledged yet) is known only here; `walhouse serve --capture-url`
// reads this document (package monitor) to report it. Capture writes the
// type, so it lives here; readers decode it and must tolerate fields they
// do not know.
type Status struct {
	// Slot is the replication slot capture streams from.
	Slot string `json:"slot"`
	// ReceivedLSN is the newest WAL position received from PostgreSQL.
	ReceivedLSN record.LSN `json:"receivedLsn"`
	// ConfirmedLSN is the position confirmed to the slot: every change
	// before it is acknowledged by Kafka.
	ConfirmedLSN record.LSN `json:"confirmedLsn"`
	// ServerWALEnd is the server's WAL end as of its last message.
	ServerWALEnd record.LSN `json:"serverWalEnd"`
	// SlotLagBytes is ServerWALEnd − ConfirmedLSN (0 when negative).
	SlotLagBytes int64 `json:"slotLagBytes"`
	// PendingBytes is the producer backlog: bytes produced to Kafka and
	// not acknowledged yet.
	PendingBytes int64 `json:"pendingBytes"`
	// Rows is the number of records produced since capture started.
	Rows int64 `json:"rows"`
	// LastEventAt is the commit time of the newest transaction (or
	// heartbeat) read; null before the first.
	LastEventAt *time.Time `json:"lastEventAt"`
	// LagSeconds is Now − LastEventAt; null before the first event.
	LagSeconds *float64 `json:"lagSeconds"`
	// RefusedTables are the published tables capture leaves out because it
	// cannot capture them whole (no primary key, a column list without
	// the key...), by
	// name; empty when it captures every table. ClickHouse does not follow
	// them: see docs/operations.md, "Tables left out".
	RefusedTables []RefusedTable `json:"refusedTables"`
	// Now is when capture answered.
	Now time.Time `json:"now"`
}

// StatusOf builds the status document of a capture streaming from slot,
// from one snapshot of its Stats taken at now.
func StatusOf(slot string, st Stats, now time.Time) Status {
	now = now.UTC()
	out := Status{
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
		out.RefusedTables = []RefusedTable{}
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
