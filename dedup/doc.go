// Package dedup is Layer 2 of walhouse's deduplication: a shared memory, in
// Valkey or Redis, of the eventIds the sink has loaded, each stored with its
// payload hash and a TTL. It catches the duplicates that Kafka redelivery and
// capture restarts produce before they reach ClickHouse.
//
// Every call has a short timeout and no retries: the sink treats a failed
// call as "unknown" and loads the records anyway (fail open), because
// ClickHouse's insert tokens and ReplacingMergeTree (Layer 3) still hold.
//
// What it owns: the Redis client and its TLS/ACL settings, the key layout
// (one hash per second of the eventIds' commit time, see layout.go) and
// the pipelined lookups and claims, one round trip each. What it does not
// own: when to check or claim (package sink decides: claims only after the
// insert succeeded), nor what a mismatch means (the sink's --mismatch-mode). Data enters as
// eventIds with payload hashes from the sink and leaves as seen / new /
// mismatch answers; the store holds nothing else.
package dedup
