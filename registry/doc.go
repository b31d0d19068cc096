// Package registry keeps the schema registry: the compacted Kafka topic
// "<prefix>-schemas" that maps each schemaId to its record.Schema.
//
// Version 2 records name their schema by schemaId instead of carrying their
// column list. Capture registers a schema with a Writer before producing the
// first record that refers to it, so any record a consumer can read has its
// schema in the registry already; the sink reads the registry with a Reader
// and decodes records against it (the Reader is a record.Schemas).
//
// The topic has one partition and is compacted by key (the schemaId): an
// entry is immutable, since its id is the hash of its content, so
// compaction only ever drops duplicates of the same entry, and the topic
// stays as small as the set of distinct schemas. Entries are checked on
// read (record.DecodeSchema), so an altered or foreign entry is skipped, and
// the records that refer to it fail to decode, rather than decoding against
// the wrong columns. An id is 64 bits of the hash, so two schemas may share
// one (a collision, which can be searched for): entries are compared whole
// (record.Schema.Same), never first-entry-wins. A Writer refuses a second
// schema for an id (ErrSchemaIDConflict); a Reader that meets two trusts
// neither, and their records go to the dead letters.
//
// The package owns the registry's rules: its entry key (the schemaId), its
// entry value (record.Schema's JSON, record.Schema.AppendJSON), when an
// entry is written and which entries are trusted. The topic's name
// (kafka.SchemasTopic) and its Kafka reading and writing belong to package
// kafka (a kafka.Compacted topic, read by a kafka.Tail), as for capture's
// state. It does not own Kafka clients: callers create them, pass them in
// and close them.
// Data enters as record.Schema values (Writer.Register) and leaves as
// registry entries in Kafka; it enters a Reader from Kafka and leaves
// through Reader.Schema.
package registry
