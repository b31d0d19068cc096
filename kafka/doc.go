// Package kafka is walhouse's adapter to Apache Kafka (through franz-go):
// everything that knows how walhouse uses Kafka, as opposed to what it
// sends through it, lives here.
//
// It owns:
//   - client construction: NewClient opens a command's first client with
//     the security settings (TLS, SASL) and checks that a broker answers;
//     Derive makes every further client from the first one's options, so
//     all of them connect alike;
//   - record sizes: RecordLimitOpts and ProducerOpts size clients, and
//     Configs and MaxMessageBytes size topics, from the record bound
//     (record.DefaultMaxBytes, --max-record-bytes);
//   - the names of the pipeline's own topics (StateTopic, SchemasTopic,
//     DeadLetterTopic; a table's topic is record.TopicName, part of the
//     records' contract), their creation and checking (Ensure, Topics);
//   - compacted topics as key-value stores (Compacted writes one, Tail
//     reads one and reports entries Kafka deleted, ErrEntriesLost),
//     behind capture's state store (State) and the schema registry
//     (registry.Writer, registry.Reader); Watch tells that a topic was
//     written to (the sink's signal of a new table, from the registry);
//   - the adapters the sink takes: Consumer (a group client with the
//     sink's commit metadata) and DeadLetters (the dead-letter producer);
//   - dead letters as Kafka records (DeadLetterRecord, ParseDeadLetter),
//     which `walhouse dlq` lists and replays.
//
// It does not own what records say (package record), the schema
// registry's rules (package registry), capture's placement of records
// (capture.Partitioner, which ProducerOpts takes) or the dead letter's
// fields and header names (record.DeadLetter, its Headers and
// record.ParseDeadLetter).
//
// Data enters as franz-go records and settings from the composition root
// (package pipeline), which builds clients here and hands them to capture and
// the sink through the small interfaces those declare
// (capture.TopicCreator, capture.StateStore, capture.SchemaRegistry,
// sink.Consumer, sink.DeadLetters); it leaves as Kafka requests. The
// package imports record and sink (for the types of the sink's
// interfaces), never capture: capture and the sink stay independent.
package kafka
