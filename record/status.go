package record

import "time"

// CaptureStatus is capture's progress as one JSON document: what `walhouse
// capture --metrics-addr ADDR` serves at GET http://ADDR/status. Capture
// runs as a separate process, so the producer backlog (records handed to
// Kafka and not acknowledged yet) is known only there; `walhouse serve
// --capture-url` reads this document (package monitor) to report it.
// Capture builds it (capture.StatusOf); it lives here, with the other wire
// forms, so that its readers need not import capture. Readers must
// tolerate fields they do not know.
type CaptureStatus struct {
	// Slot is the replication slot capture streams from.
	Slot string `json:"slot"`
	// ReceivedLSN is the newest WAL position received from PostgreSQL.
	ReceivedLSN LSN `json:"receivedLsn"`
	// ConfirmedLSN is the position confirmed to the slot: every change
	// before it is acknowledged by Kafka.
	ConfirmedLSN LSN `json:"confirmedLsn"`
	// ServerWALEnd is the server's WAL end as of its last message.
	ServerWALEnd LSN `json:"serverWalEnd"`
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

// RefusedTable is a published table that capture leaves out of the stream,
// and why (see CaptureStatus.RefusedTables).
type RefusedTable struct {
	// Table is "schema.table".
	Table string `json:"table"`
	// Reasons are why, e.g. no_primary_key or column_list: the reason
	// labels of walhouse_capture_tables_refused.
	Reasons []string `json:"reasons"`
	// Since is when this capture process first left it out.
	Since time.Time `json:"since"`
	// Error says what is wrong and how to fix it.
	Error string `json:"error"`
}
