// Package pgslot drops the PostgreSQL replication slots that walhouse's
// harness creates: the demo's, the integration tests' and the benchmarks'.
// A leaked slot pins WAL and uses up max_replication_slots, and a capture
// that just stopped may hold its slot for a moment, so dropping one needs
// a wait that every caller would otherwise write again.
//
// It owns no state and holds no connection: data enters as the caller's
// connection and a slot name and leaves as statements run on it. It does
// not import package testing, so the shipped binary (`walhouse demo`) may
// use it.
package pgslot
