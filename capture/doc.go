// Package capture reads row changes from PostgreSQL's logical replication
// stream (pgoutput) and produces them to Kafka as records.
//
// It owns the publication and the replication slot, the relation cache, the
// decoding of pgoutput messages into record.Record values and the position
// bookkeeping: a Capturer confirms an LSN to the slot only after Kafka has
// acknowledged every record at or before it, so a crash at any moment loses
// nothing (the unconfirmed tail is read again and re-produced with the same
// eventIds and versions, which the sink deduplicates).
//
// Data enters as WAL messages from a replication connection and leaves as
// Kafka records through the Producer interface; nothing else is shared with
// the rest of walhouse but packages record and schema (ClickHouse names, to
// refuse tables that would share one). What capture needs of Kafka
// beyond producing (TopicCreator, StateStore, SchemaRegistry) it declares
// here, and package kafka (with registry) satisfies it; package pipeline
// wires them.
//
// Where things are:
//
//   - capture.go: the API (Producer, ErrSlotInvalidated, Capturer, New,
//     Stats, Setup) and Run, which wires a session together; options.go
//     every option of New, each with its default, the defaults in one
//     place (defaults) and their validation; limits.go sizes a record
//     before it is encoded; topics.go and state.go the interfaces it needs of
//     Kafka; deadletter.go: changes that cannot become records.
//   - source.go: connecting, checking the database and its tables, how
//     the publication sends each (publicationEntry: a row filter and a
//     column list, which the copies read through), the
//     publication (walhouse's own tables, Layer 1's key table unless
//     WithIdempotencyKeys, are left out as if excluded); pgversion.go: what
//     differs between PostgreSQL majors (serverVersion); slot.go: the
//     replication slot; ddl.go and messages.go:
//     the DDL event trigger and the key that signs walhouse's WAL messages.
//   - stream.go: one replication session (the receive loop, status updates
//     to the slot, shutdown) and the producing side of the translator's
//     output; ack.go: which positions Kafka has acknowledged;
//     receive_bound.go: the replication connection's bound on a message,
//     and oversized.go: what the translator does with one over it.
//   - dispatch.go: CopyData dispatch, and the translator, which turns
//     decoded pgoutput messages into records, dead letters, truncate
//     markers and heartbeats with no database, Kafka or clock of its own
//     (so translate_test.go drives it with scripted messages); its relation
//     cache and walhouse's logical messages. change.go: a row change to a
//     record (eventIds, ordinals, key and tenant changes, bad rows, and
//     which unchanged TOAST values capture reads from the source row:
//     fillCase).
//     Package capture/pgoutput decodes the messages; catalog.go builds
//     relations; labels.go keeps the enum labels of columns a layout
//     stores as Enum8/Enum16 current (ADD VALUE sends no Relation message).
//   - heartbeat.go: heartbeats written into the WAL and sent to every
//     partition; truncate.go: TRUNCATE as markers.
//   - tables.go: tables joining and leaving the publication, partitions;
//     snapshot*.go: the initial copy; online.go: copies next to the stream.
package capture
