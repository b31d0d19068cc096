// Package query serves the HTTP API that analytics dashboards, compliance
// staff and operators call: tenant-filtered reads that add FINAL and report
// meta.lastSyncAt, streamed GDPR subject exports, and pipeline lag, metrics
// and a status page; /examples/orders is an example dashboard of one static
// page that reads its writes back with their consistency tokens.
//
// What it owns: request validation against the real ClickHouse columns
// (Catalog, from system.tables and system.columns, cached briefly), the pure
// SQL builders (BuildSelect, BuildExport; golden tests in testdata), API-key
// authentication (Keys, SHA-256 hashes in a keys file; the tenant comes only
// from the key), signed pagination cursors (Cursors), per-tenant limits, the
// subject Exporter (also used by `walhouse export`), and the HTTP Server.
// What it does not own: the replicated tables (package clickhouse creates
// them), the _walhouse_sync progress table (the sink maintains it;
// schema.SyncTableDDL documents its shape; query reads it for
// freshness), and the state of the pipeline outside ClickHouse: the
// replication slot, capture's status, consumer lag and dead-letter depth are
// read by package monitor, which query asks through its PipelineProbe
// interface, and the lag history and pipeline metrics it serves are
// monitor's (monitor.History, monitor.NewCollector).
//
// Data enters as HTTP requests, ClickHouse rows and (with a PipelineProbe)
// monitor.PipelineLag reports, and leaves as JSON, JSONL, CSV or Parquet,
// Prometheus metrics and the status page. Every statement filters on the caller's tenant (the first column
// of the table's sorting key) and on _is_deleted = 0, binds every value as a
// server-side parameter, and quotes every identifier with schema.QuoteIdent
// after checking it against system.columns. A path into a JSON column
// (payload.customer.id, jsonpath.go) is a column of the table followed by
// keys that are checked plain names, read by an expression over the column.
//
// Consistency: reads use FINAL (one row per key, its latest version) with
// do_not_merge_across_partitions_select_final=1 (0 for a table partitioned
// on a column outside its sorting key, which walhouse never creates: see
// setFinal), unless a request asks for
// "approximate": then FINAL is skipped, rows whose newest stored version is
// a delete marker are still dropped by _is_deleted = 0, but a row updated or
// deleted since the last merge can appear in several versions (and count
// several times in aggregates). The response's meta.consistency says which.
//
// Freshness: meta.lastSyncAt of a table is min(loaded_through) over its
// Kafka partitions in <database>._walhouse_sync read FINAL; every change
// committed in PostgreSQL at or before it is readable. It is per table, so
// it holds for every tenant of the table. meta.lsn is min(lsn) likewise.
// Both are null (with meta.syncNote) while the sink has recorded nothing for
// the table. The state is read before the data, so the data is at least as
// fresh as reported.
//
// Tenancy of tables (Catalog.TenantTables): a table whose tenant column
// comes from the source table is every tenant's, and reads as empty for a
// tenant with no row there yet, whatever other tenants hold; a table whose
// tenant column walhouse added (--default-tenant) is a tenant's only when
// it holds rows of that tenant. GET /v1/tables lists a tenant's tables, and
// a read or export of any other answers as for a table that does not
// exist, so a key never learns the name of a table that holds only other
// tenants' rows.
//
// Credentials: API keys (Keys, or KeyFile, re-read while serving so keys
// are added and revoked without a restart) and, optionally, bearer JWTs
// whose tenant is a claim (JWTAuth). CORS lets the browser pages of
// configured origins call the API. Dashboards' reads (buckets, last,
// or/and/not, having, uniqExact, quantile) are in build_dashboard.go and
// docs/query-dashboards.md.
//
// Bounds under a hostile caller: every read and export carries ClickHouse
// limits (Limits: memory, spilling, threads, time; result rows and bytes
// for reads); a tenant's MaxConcurrent and the server's MaxInFlight are
// taken before the body is read, so parsing runs inside them; HTTPServer
// bounds headers, reads, writes and idle connections (an export gets a
// deadline per write); exports stop at MaxExportRows, MaxExportBytes or
// MaxExportTime with the reason in their manifest, trailer and audit entry.
//
// Pagination: a cursor is an offset signed with HMAC-SHA256 and bound to the
// tenant, the table and the request (all fields but the cursor); pages are
// ordered by the requested order, then the sorting key (or the group-by
// columns), so they are stable while the data does not change.
package query
