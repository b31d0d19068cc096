// Package record defines the change record that walhouse moves from
// PostgreSQL to ClickHouse: its envelope, its identity (eventId and version)
// and its encoding on the Kafka wire.
//
// It is the one leaf package that both capture (which produces records) and
// sink (which consumes them) import; it imports neither, so data flows one
// way: capture → record → Kafka → sink → clickhouse.
//
// # Wire format (envelope version 2)
//
// A record is one JSON object per Kafka record value (snapshot rows may
// instead travel many to a record: see Row batches). The Kafka key is the
// record's partition key, so all changes of one row land in one partition, in
// order. Field by field:
//
//	eventId       deterministic UUIDv7 (see EventID)
//	eventType     "<schema>.<table>.<inserted|updated|deleted|snapshotted>"
//	eventVersion  envelope version: 2 (1 is still read, see below)
//	occurredAt    commit time of the source transaction (RFC 3339, UTC)
//	ingestedAt    time capture read the change (RFC 3339, UTC)
//	tenantId      value of the table's tenant column (or the configured default)
//	tenantColumn  the source column holding the tenant; absent when it is a constant
//	partitionKey  tenant and primary-key values, a JSON array encoded as a string
//	source        {"id","schema","table"}: where the change was read
//	lsn           the change's own WAL position ("X/Y"), also the version
//	commitLsn     the commit LSN of its transaction
//	ordinal       position of the change in its transaction, from 0 (a move's
//	              delete shares its update's; its eventId is a MoveSource's)
//	version       the ReplacingMergeTree version (see Version; the delete half
//	              of a row's move has one below, MoveVersion)
//	op            "c" insert, "u" update, "d" delete, "r" row read by the initial snapshot
//	schemaId      the content hash of the relation's Schema (columns and tenant
//	              column) at the time of the change: the key of its entry in the
//	              schema registry
//	key           for updates that changed the key and for deletes: the old key values
//	payload       column name → PostgreSQL text value or null; for a delete, the old row
//	              as far as the replica identity sends it
//	unchanged     names of columns whose values PostgreSQL did not send because they
//	              are unchanged TOASTed values; they are absent from payload
//
// # Schema registry
//
// The column list is the same for every record of a relation, and for a
// typical table it is more than a third of a record; repeated in every
// record it costs capture, the broker and the sink CPU per byte, and Kafka
// disk. So a version 2 record names it by schemaId, like the schemaUri of
// the envelope this format follows, and capture publishes each Schema to
// the registry topic "<prefix>-schemas" (compacted, one partition) before
// the first record that refers to it. An entry's key is its schemaId; its
// value (Schema.AppendJSON) is
//
//	{"format":1,"schemaId":"…","columns":[…],"tenantColumn":"…"}
//
// where columns lists, in order, each column's name, type (PostgreSQL type
// name, of the element for arrays, domains resolved), enum, array, typmod,
// key (part of the replica identity), attnum, missing (the value rows
// older than an ADD COLUMN ... DEFAULT have) and labels (an enum's labels
// in PostgreSQL's order, only for an enum a layout stores as a ClickHouse
// Enum; at most MaxEnumLabels per column and MaxSchemaLabels in all,
// refused with ErrOverBudget before they are kept). A consumer that meets an
// unknown schemaId reads the registry to its end; DecodeSchema checks that
// an entry hashes to its id.
//
// # Row batches
//
// The rows of an initial snapshot share everything in the envelope but
// their values: the same eventType, times, source, positions, version and
// schema. Sent as records of their own, that shared part and Kafka's work
// per record cost capture, the broker and the sink more than the values do.
// So capture sends snapshot rows in row batches: one Kafka record holding
// up to a thousand rows (at most about 128 KiB) of one table, all of them
// rows whose partition keys the partitioner places in the record's
// partition, so each row still precedes its later changes there. A row
// batch has no Kafka key and the header HeaderRows ("walhouse-rows", the
// number of rows in decimal); its value is
//
//	{"eventType":"<schema>.<table>.snapshotted","eventVersion":2,
//	 "occurredAt":…,"ingestedAt":…,["tenantId":…,]"tenantColumn":…,
//	 "source":{…},"lsn":…,"commitLsn":…,"ordinal":0,"version":0,"op":"r",
//	 "schemaId":…,"rows":[["v1","v2",null,…],…]}
//
// (a copy after a table rewrite has "version" equal to its lsn instead of
// 0: RewriteCopyVersion)
//
// Each row is an array of its values in the schema's column order, text or
// null. What a single record carries per row is derived from it, by
// DecodeBatch, exactly as capture derives it for a single record:
//
//	tenantId      the tenant column's value; tenantId is in the batch only
//	              for a table without a tenant column (the configured tenant)
//	partitionKey  tenant and key values, as for a single record
//	eventId       SnapshotEventID(source.id, commitLsn, "<schema>.<table>",
//	              key values, occurredAt): the same id the row gets when it
//	              is sent alone, so a chunk re-read after a crash dedups
//	              against either form
//
// Only envelope version 2 has row batches; capture sends single records
// instead with --snapshot-batch-rows 1 or --envelope-version 1, for
// consumers of the topics that read only single records. A consumer that
// meets a row batch must not take it for a single record: Decode rejects
// one and points to DecodeBatch.
//
// A decoder refuses, with ErrOverBudget, a row batch of more than
// MaxBatchRows rows or MaxBatchCells values, and any record of more than
// MaxColumns columns or members, while it reads it: decoded rows cost
// many times their text, and records come from Kafka (ParseRows checks a
// HeaderRows value before decoding). DecodeSchema refuses a registry
// entry of more than MaxColumns columns, which would size the decoding of
// every record naming it. A producer keeps its batches below.
//
// # Version 1
//
// Version 1 records carry the column list in a "columns" field after
// schemaId instead of referring to the registry; they are otherwise the
// same. Capture writes them with --envelope-version 1, for consumers that
// cannot read the registry; Decode reads both versions, so records written
// before an upgrade still load.
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
// # Capture's status document
//
// CaptureStatus (with RefusedTable) is not a Kafka record but capture's
// progress as JSON over HTTP (GET /status of `walhouse capture
// --metrics-addr`), which monitor reads for `walhouse serve`. It lives here
// with the other wire forms so that its reader needs no import of capture.
//
// # Encoding
//
// AppendJSON writes the wire form; an Encoder, made once per relation shape,
// writes the same bytes faster by copying the parts that depend only on the
// relation (source, columns, schemaId). testdata/envelope_v1.golden and
// envelope_v2.golden pin the exact bytes of both versions, and randomized
// tests compare the encoders with a reference kept in the tests.
//
// # Decoding
//
// Decode and DecodeBatch (and a Decoder, which keeps its buffers from one
// record to the next) read a value in one pass with a scanner of their
// own, straight into the Record, by the rules of encoding/json, which the
// decoder before them used: the same syntax, unescaping (invalid UTF-8
// becomes U+FFFD) and matching of field names. They reject what it let
// through: data after the object and a field given twice. Randomized tests
// and a fuzz target hold Decode to that decoder, kept in the tests.
package record
