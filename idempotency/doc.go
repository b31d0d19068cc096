// Package idempotency is walhouse's Layer 1: it makes an application's
// writes to PostgreSQL idempotent, so that a retried request (a client that
// timed out, a lost response, a double click) takes effect once and gets
// the first attempt's result again. Layers 2 and 3 (the sink's eventId
// dedup and ClickHouse's ReplacingMergeTree) remove duplicates that arise
// after PostgreSQL; this one keeps them out of PostgreSQL.
//
// A write is identified by a Key, a UUIDv7 made by NewKey before the first
// attempt and sent again with every retry, and described by a Fingerprint,
// the hash of its canonical request. Keys are scoped per tenant; row-level
// security keeps tenants apart (RowLevelSecurity, SetTenant): no tenant can
// see or replay another's key. Two patterns:
//
//   - The table pattern (Insert, InsertTx): the row carries its key in a
//     UNIQUE column and its fingerprint, and is written with INSERT … ON
//     CONFLICT (idempotency_key) DO NOTHING; a retry returns the row the
//     first attempt wrote.
//   - The key table (Keys: Do, Begin): for any write, updates and deletes
//     included, the key, its fingerprint and the write's result go into
//     walhouse.idempotency_keys (Migrate creates it) in the same
//     transaction as the write, so both commit or neither does; a retry
//     returns the stored result without doing the write again.
//
// In both, a retry that races the first attempt waits for it (PostgreSQL's
// unique index serialises them; Request.InFlightWait bounds the wait, after
// which ErrInFlight), and the same key with another request is refused with
// a *MismatchError (errors.Is ErrKeyReused), doing nothing.
//
// Middleware applies the key table to net/http handlers through the
// Idempotency-Key header (IETF httpapi draft "The Idempotency-Key HTTP
// Header Field"): the response is stored with the key and replayed, 409
// while an attempt is in flight, 422 for a reused key, 400 for a malformed
// or missing one; WithPrincipal binds keys to the user or client within the
// tenant. Pruner deletes keys after their retention period (default 30
// days), daily, as a member of PrunerRole, the only role the retention
// policies let see other tenants' expired keys; `walhouse keys prune` runs
// it by hand.
//
// The package imports nothing of walhouse: applications use it on their own
// database. walhouse's capture leaves the key table out of the pipeline
// unless asked (capture.WithIdempotencyKeys). docs/layer1.md has the design,
// the guarantees and their limits.
package idempotency
