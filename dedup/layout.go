package dedup

import (
	"encoding/hex"
	"strconv"
	"unsafe"
)

// The key layout. A key per eventId (SET NX EX, the layout before this one)
// cost Redis a command, a key and an expiry entry per row: more CPU than
// ClickHouse spent loading the same rows. eventIds are UUIDv7 (see
// record.EventID) whose first 48 bits are the commit time in milliseconds,
// so the store groups them into one hash per window of commit time and per
// sixteenth of the id space:
//
//	<prefix>v2:<window start, unix seconds>:<0-f>  field: the id's 16 bytes  value: the payload hash
//
// A batch of streamed changes spans a few seconds of commits, so a lookup or
// a claim is a few HMGET or HSET commands per window instead of one per
// row, and each bucket carries one TTL, set again on every write: an id is
// remembered at least the TTL after it was stored, and at most a window
// longer. The sixteenths keep the bucket of a very large transaction small
// enough to expire without stalling Redis (at 100k rows/s, 62k fields). An
// id that is not a canonical UUIDv7 gets a bucket of its own.
//
// Each claim also writes the field "~" with a value longer than Redis's
// hash-max-listpack-value (64 bytes by default), so that a bucket is a hash
// table from its first write: Redis keeps a small hash as a listpack that
// every lookup and insert scans from the start, and buckets near the
// listpack limit (512 entries on Debian's Redis) cost 3-5× the CPU of a hash
// table. A store configured with a larger limit still works, only dearer.
// No 16-byte field can be "~".
//
// "v2" keeps the layouts apart: after an upgrade the ids stored by the old
// layout are not found (they expire with their TTL), so a duplicate of a
// change loaded just before the upgrade is loaded again, where insert tokens
// and ReplacingMergeTree drop it, as when the store is down.
const layoutVersion = "v2:"

// windowSeconds is the commit time a bucket covers. Windows of 10 s put
// some hundred ids of a batch into each bucket at the bench's thousand
// commits a second, where windows of one second put five (bench/sink).
const windowSeconds = 10

// tableMarkerField and tableMarkerValue (65 bytes) keep a bucket a hash
// table.
const (
	tableMarkerField = "~"
	tableMarkerValue = "~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~"
)

// bucketGroup is the ids of one bucket: their fields and their positions
// in the caller's slice.
type bucketGroup struct {
	key    string
	fields []string
	at     []int
}

// group sorts ids into their buckets, keeping the order of first
// appearance. The fields of UUIDv7 ids share one buffer that is never
// written again once sliced, so they are strings without an allocation
// each.
func (s *Store) group(ids []string) []bucketGroup {
	var groups []bucketGroup
	index := map[uint64]int{}
	arena := make([]byte, 0, 16*len(ids))
	for i, id := range ids {
		u, ok := parseUUIDv7(id)
		if !ok {
			groups = append(groups, bucketGroup{key: s.prefix + layoutVersion + "id:" + id, fields: []string{"h"}, at: []int{i}})
			continue
		}
		ms := uint64(u[0])<<40 | uint64(u[1])<<32 | uint64(u[2])<<24 | uint64(u[3])<<16 | uint64(u[4])<<8 | uint64(u[5])
		b := ms/1000/windowSeconds<<4 | uint64(u[15]&0x0f)
		g, ok := index[b]
		if !ok {
			g = len(groups)
			index[b] = g
			groups = append(groups, bucketGroup{key: s.bucketKey(b)})
		}
		arena = append(arena, u[:]...)
		field := arena[len(arena)-16:]
		groups[g].fields = append(groups[g].fields, unsafe.String(unsafe.SliceData(field), len(field)))
		groups[g].at = append(groups[g].at, i)
	}
	return groups
}

// bucketKey returns the key of bucket b: the first second of its window,
// then the sixteenth of the id space.
func (s *Store) bucketKey(b uint64) string {
	k := make([]byte, 0, len(s.prefix)+len(layoutVersion)+16)
	k = append(k, s.prefix...)
	k = append(k, layoutVersion...)
	k = strconv.AppendUint(k, (b>>4)*windowSeconds, 10)
	k = append(k, ':', "0123456789abcdef"[b&0x0f])
	return string(k)
}

// parseUUIDv7 decodes a canonical UUIDv7.
func parseUUIDv7(id string) (u [16]byte, ok bool) {
	if len(id) != 36 || id[8] != '-' || id[13] != '-' || id[18] != '-' || id[23] != '-' || id[14] != '7' {
		return u, false
	}
	var compact [32]byte
	n := copy(compact[:], id[0:8])
	n += copy(compact[n:], id[9:13])
	n += copy(compact[n:], id[14:18])
	n += copy(compact[n:], id[19:23])
	copy(compact[n:], id[24:36])
	// Lower case only, as walhouse writes them: hex.Decode takes both, and
	// an id in upper case must not share the field of its lower-case twin.
	for _, c := range compact {
		if 'A' <= c && c <= 'F' {
			return u, false
		}
	}
	if _, err := hex.Decode(u[:], compact[:]); err != nil {
		return u, false
	}
	return u, true
}
