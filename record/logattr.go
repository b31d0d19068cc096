package record

// Log attribute keys for a record's identity. Capture, the sink and the
// tools log a record under these names, so that one filter on a JSON log
// (`jq 'select(.eventId == "…")'`) follows a change across processes.
const (
	// LogEventID is the key of a record's eventId.
	LogEventID = "eventId"
	// LogTenant is the key of a record's tenant.
	LogTenant = "tenant"
	// LogLSN is the key of a change's own WAL position.
	LogLSN = "lsn"
	// LogCommitLSN is the key of the commit LSN of a change's transaction.
	LogCommitLSN = "commit_lsn"
	// LogTable is the key of a source table, schema.table.
	LogTable = "table"
)

// LogAttrs returns the key-value pairs that name r in a log line, for
// slog's variadic arguments: eventId, tenant, table, LSN and commit LSN.
// Never a column value: rows may hold personal data, and logs travel
// further than the data does. Tenant identifiers are not row values: they
// are what an operator filters by. Nil r gives nothing.
func (r *Record) LogAttrs() []any {
	if r == nil {
		return nil
	}
	attrs := make([]any, 0, 10)
	if r.EventID != "" {
		attrs = append(attrs, LogEventID, r.EventID)
	}
	attrs = append(attrs, LogTenant, r.TenantID)
	if r.Source.Table != "" {
		attrs = append(attrs, LogTable, r.Source.Schema+"."+r.Source.Table)
	}
	if r.LSN != 0 {
		attrs = append(attrs, LogLSN, r.LSN.String())
	}
	if r.CommitLSN != 0 {
		attrs = append(attrs, LogCommitLSN, r.CommitLSN.String())
	}
	return attrs
}
