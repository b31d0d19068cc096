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
// the rest of walhouse but package record. What capture needs of Kafka
// beyond producing (TopicCreator, StateStore, SchemaRegistry) it declares
// here, and package kafka (with registry) satisfies it; cmd/walhouse wires
// them.
package capture
