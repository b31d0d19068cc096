// Package sink consumes change records from Kafka in a consumer group and
// loads them, batch by batch and table by table, through a Loader.
//
// Offsets are committed only after the Loader reported the batch durable, so
// a crash at any point re-delivers what was not loaded; the Loader's insert
// token, eventId deduplication and ReplacingMergeTree versions make the
// redelivery harmless. Records that can never be loaded are not dropped: the
// sink stops with an error naming them (a dead-letter topic takes them once
// configured).
//
// Truncate markers (record.Truncate) are applied through the Loader's
// optional Truncater capability, after the partition's records before the
// marker are loaded and before those after it.
//
// Data enters as Kafka records and leaves through the Loader interface; the
// package knows nothing about ClickHouse. It declares what it needs of
// Kafka (Consumer, OffsetFetcher, DeadLetters); package kafka adapts
// franz-go to them.
//
// Where things are:
//
//   - sink.go: the contract (Batch, Loader, its errors, Consumer, DeadLetters,
//     Config, Sink, New) and Run, the poll loop. classify.go: each Kafka
//     record read once as a poll brings it, into an item (change, row batch,
//     heartbeat, truncate or re-copy done marker, with what its headers
//     say), which every later step uses.
//   - inserts.go: how a batch is cut into inserts and each one named
//     (Batch.Inserts); a Loader executes them as they are.
//   - intent.go: a flush: the batch intent committed before loading, chunks
//     cut exactly as before a crash, the commit after, tables stopped at a
//     record. group.go: with CombinePartitions, the chunks of a table's
//     partitions grouped into one batch, the group in the intent. load.go:
//     a chunk's segments between markers, the markers applied, decoding,
//     isolating a record that can never load, setting it aside. retry.go:
//     retries with backoff.
//   - batch.go: row batches (decoded rows held to their rows header, a
//     stand-in for the record per row); truncate.go: truncate markers;
//     recopy.go: copying a table again after a gap, and its done markers;
//     trust.go: the checks of what Kafka says; future.go: positions and
//     times bounded by what PostgreSQL can have written; gap.go: records
//     Kafka deleted before the sink read them, which stop their partition;
//     watermark.go: load progress for freshness; layer2.go: eventId
//     deduplication; erasure.go: records of erased data subjects left out
//     of a batch when it is built and before every insert attempt, and no
//     insert while the erasure ledger is too old; deadletter.go: the dead
//     letters' format and the sink's reasons; metrics.go: the sink's
//     metrics.
//   - client.go: the group client's fetch and metadata settings;
//     newtopics.go: forcing its metadata refresh when a signal says a
//     table's topic was created (TopicRefresh), so a pattern subscription
//     consumes it at once rather than at the next periodic refresh.
package sink
