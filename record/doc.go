// Package record defines the change record that walhouse moves from
// PostgreSQL to ClickHouse: its envelope, its identity (eventId and version)
// and its encoding on the Kafka wire.
//
// It is the one leaf package that both capture (which produces records) and
// sink (which consumes them) import; it imports neither, so data flows one
// way: capture → record → Kafka → sink → clickhouse.
//
// # Wire format (envelope version 1)
//
// A record is one JSON object per Kafka record value. The Kafka key is the
// record's partition key, so all changes of one row land in one partition, in
// order. Field by field:
//
//	eventId       deterministic UUIDv7 (see EventID)
//	eventType     "<schema>.<table>.<inserted|updated|deleted|snapshotted>"
//	eventVersion  envelope version, currently 1
//	occurredAt    commit time of the source transaction (RFC 3339, UTC)
//	ingestedAt    time capture read the change (RFC 3339, UTC)
//	tenantId      value of the table's tenant column (or the configured default)
//	tenantColumn  the source column holding the tenant; absent when it is a constant
//	partitionKey  tenant and primary-key values, a JSON array encoded as a string
//	source        {"id","schema","table"}: where the change was read
//	lsn           the change's own WAL position ("X/Y"), also the version
//	commitLsn     the commit LSN of its transaction
//	ordinal       position of the change in its transaction, from 0
//	version       the ReplacingMergeTree version (see Version)
//	op            "c" insert, "u" update, "d" delete, "r" row read by the initial snapshot
//	columns       the relation's columns at the time of the change, in order:
//	              name, type, enum, array, typmod, key, attnum, missing (the value
//	              of rows older than an ADD COLUMN ... DEFAULT)
//	schemaId      a short hash of columns and tenantColumn; equal ids mean equal shapes
//	key           for updates that changed the key and for deletes: the old key values
//	payload       column name → PostgreSQL text value or null; for a delete, the old row
//	              as far as the replica identity sends it
//	unchanged     names of columns whose values PostgreSQL did not send because they
//	              are unchanged TOASTed values; they are absent from payload
//
// # Control records
//
// Records with no key and no value carry headers instead of a payload:
// heartbeats (see HeaderHeartbeat) and truncate markers (see HeaderTruncate
// and Truncate), which capture sends to every partition of a table's topic
// when the table is truncated. A marker at WAL position T means that every
// row of the table whose latest version is below T is gone; the sink applies
// it after loading the partition's records before it.
//
// Values are PostgreSQL's text output (DateStyle ISO, TimeZone UTC,
// extra_float_digits 3, bytea hex), which is lossless; the sink converts them
// to ClickHouse types with the mapping in package schema.
//
// # Encoding
//
// AppendJSON writes the wire form; an Encoder, made once per relation shape,
// writes the same bytes faster by copying the parts that depend only on the
// relation (source, columns, schemaId). testdata/envelope_v1.golden pins the
// exact bytes of version 1, and randomized tests compare the encoders with
// a reference kept in the tests.
package record
