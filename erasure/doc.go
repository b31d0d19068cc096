// Package erasure erases a data subject (GDPR Art. 17) from the ClickHouse
// side of walhouse and keeps it erased.
//
// An erasure (Eraser.Erase; the API runs Eraser.Begin, which records the
// start, and the rest detached) runs four steps:
//
//  1. it checks PostgreSQL: the subject's rows must be gone from every
//     source table concerned (walhouse never deletes source rows), every
//     row the removal would take is looked up by key in the same snapshot
//     (a row PostgreSQL still holds loses only its versions that carried
//     the subject, never its key), and it reads the as-of LSN,
//     pg_current_wal_insert_lsn() at that check;
//  2. it records the erasure in the ledger, the ClickHouse table
//     _walhouse_erasures, before it removes anything: keyed hashes
//     (HMAC-SHA256 under a key walhouse holds) of tenant, table, column and
//     subject value, never the values, with the as-of LSN;
//  3. it removes every stored version of the subject's rows, tombstones
//     included, with ALTER TABLE … DELETE (a mutation that rewrites the
//     parts, waited for), and counts what is left without FINAL: zero, or
//     the erasure fails;
//  4. it writes a manifest signed with ed25519 (tables, versions removed,
//     as-of LSN, verification) to _walhouse_erasure_manifests and logs an
//     audit line.
//
// The ledger keeps the subject erased: the sink asks Ledger.Erased of every
// record of a table with erasures and drops those of an erased subject
// committed at or before the erasure's as-of LSN, so a Kafka or dead-letter
// replay never brings them back, while a row the subject gets later (a
// commit after the as-of LSN) loads as usual. The sink asks again before
// every insert attempt once the ledger was read since (Ledger.Generation),
// and inserts nothing while its copy is older than its max age: it waits
// (Ledger.WaitFresh) until a read makes the copy fresh. An erasure's settle time exceeds that age, so whatever a
// sink loaded without the entry is in ClickHouse before the removal.
//
// Data enters as a Request (from `walhouse erase` or POST /v1/erasures) and
// as the ledger's rows; it leaves as ClickHouse mutations, ledger rows and
// a Manifest. The package owns its two tables' DDL (ddl.go); it knows the
// record envelope (package record) only to read a record's tenant, table,
// column values and commit LSN.
package erasure
