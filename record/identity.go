package record

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unsafe"
)

// LSN is a PostgreSQL write-ahead-log position.
type LSN uint64

// String formats l as PostgreSQL does ("16/B374D848").
func (l LSN) String() string {
	return fmt.Sprintf("%X/%X", uint32(l>>32), uint32(l))
}

// MarshalText writes l as "X/Y", so LSNs read naturally in JSON.
func (l LSN) MarshalText() ([]byte, error) { return []byte(l.String()), nil }

// UnmarshalText parses the "X/Y" form.
func (l *LSN) UnmarshalText(b []byte) error {
	v, err := ParseLSN(string(b))
	if err != nil {
		return err
	}
	*l = v
	return nil
}

// ParseLSN parses the "X/Y" form written by String and by PostgreSQL.
func ParseLSN(s string) (LSN, error) {
	hi, lo, ok := strings.Cut(s, "/")
	if !ok {
		return 0, fmt.Errorf("lsn %q: want the form X/Y", s)
	}
	// Each half as String and PostgreSQL write it, 1 to 8 hex digits, is
	// read here (the sink parses two LSNs per record); anything else, such
	// as more leading zeros or an error to explain, by strconv.
	if h, ok := hex32(hi); ok {
		if l, ok := hex32(lo); ok {
			return LSN(h<<32 | l), nil
		}
	}
	h, err := strconv.ParseUint(hi, 16, 32)
	if err != nil {
		return 0, fmt.Errorf("lsn %q: %w", s, err)
	}
	l, err := strconv.ParseUint(lo, 16, 32)
	if err != nil {
		return 0, fmt.Errorf("lsn %q: %w", s, err)
	}
	return LSN(h<<32 | l), nil
}

// hex32 reads 1 to 8 hex digits, false for anything else.
func hex32(s string) (uint64, bool) {
	if len(s) == 0 || len(s) > 8 {
		return 0, false
	}
	var n uint64
	for i := 0; i < len(s); i++ {
		d, ok := hexDigit(s[i])
		if !ok {
			return 0, false
		}
		n = n<<4 | uint64(d)
	}
	return n, true
}

// hexDigit returns the value of the hex digit c.
func hexDigit(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// SnapshotVersion is the version of rows read by an initial snapshot. Every
// streamed change has a larger version (its LSN), so a change that happened
// after the snapshot always replaces the snapshot's row.
const SnapshotVersion uint64 = 0

// RewriteCopyVersion is the version of rows copied again after a DDL that
// rewrote their table's stored values without row changes (ALTER COLUMN
// TYPE with a conversion, ADD COLUMN with a volatile default): the WAL
// position at of the rewrite. Such a DDL holds an ACCESS EXCLUSIVE lock
// from before at until its commit, so every change of the table written
// before the rewrite has a smaller version and every change after it a
// larger one: the copy replaces the rows' stale values and never a newer
// change. A version-0 copy would lose to every change streamed before the
// DDL. The record's LSN and CommitLSN are at, so the rule that a version
// is its record's WAL position holds.
func RewriteCopyVersion(at LSN) uint64 { return Version(at) }

// Version returns the ReplacingMergeTree version of a change whose own WAL
// position is lsn.
//
// The change's own LSN, not its transaction's commit LSN, is used because it
// orders everything that matters and fits in 64 bits without loss:
//   - Within a transaction, changes are written to the WAL in execution order,
//     so two changes of one row in one transaction get increasing versions.
//   - Across transactions, two transactions that change the same row conflict
//     on that row's lock (or on its unique key), so the second one writes its
//     change only after the first has committed: its LSN is larger than
//     anything the first wrote. Row versions therefore increase in commit
//     order even though transactions interleave in the WAL.
//   - The same change read again after a restart has the same LSN, hence the
//     same version.
//
// A version that packed the commit LSN and an ordinal into 64 bits would
// have to drop LSN bits and overflow after a few hundred TiB of WAL; this one
// is exact over the whole LSN range (PostgreSQL never wraps an LSN). Changes
// decoded from one multi-insert WAL record share an LSN; they are always
// different rows, so sharing a version is harmless. Snapshot rows use
// SnapshotVersion (0): a transaction that was in progress when the snapshot
// was taken may have written its change at an LSN below the snapshot's
// consistent point, so no LSN-derived value is safely below every later
// change. Resyncing a table therefore loads into a fresh table instead of
// over old rows.
func Version(lsn LSN) uint64 { return uint64(lsn) }

// MoveVersion returns the version of the delete that removes a row from
// its old position when an update moves it (its key or a sorting column of
// its layout changed): one below the version of the row that follows it,
// Version(lsn), both from the update at lsn.
//
// Where the two share a ClickHouse key (a table whose sorting key lacks
// the moved column, as during a relayout, before the swap) the row must
// win whatever order they land in: equal versions leave it to insertion
// order, which a load split by a hold's expiry, a retry or a replay does
// not keep. One below is still above every earlier change of the row,
// whose WAL records end before lsn, so the delete still removes them.
func MoveVersion(lsn LSN) uint64 { return uint64(lsn) - 1 }

// EventID returns the deterministic eventId of the change at position ordinal
// of the transaction that committed at commitLSN, read from source (capture
// passes ChangeSource: the database and the change's table).
//
// The layout is UUIDv7 (RFC 9562): the first 48 bits are the commit time in
// Unix milliseconds, so ids sort by time; the remaining 74 non-fixed bits are
// taken from SHA-256(source, commitLSN, ordinal) instead of a random source.
// A random UUIDv7 generated at publish time would give a change re-published
// after a crash a new id, and the dedup layer could not recognise it; this id
// is the same every time the same change is captured.
func EventID(source string, commitLSN LSN, ordinal uint32, commitTime time.Time) string {
	// The hash input is built in a stack buffer (a ChangeSource holds the
	// database and a table name of at most 2×63 bytes) and hashed in one
	// call: no hasher is allocated.
	var in [256]byte
	b := append(in[:0], source...)
	b = appendPosition(b, commitLSN, ordinal)
	var id [36]byte
	return string(appendUUIDv7(id[:0], sha256.Sum256(b), commitTime))
}

// ChangeSource returns the source of the eventIds of the changes of table
// schema.table read from the database source:
// "<source>\x00change\x00<schema>\x00<table>".
//
// The table is part of it because an ordinal numbers the changes of a
// transaction that one capture sees, and that depends on its publication:
// two captures of one database, each with its own publication and tables
// (docs/scale-out.md), number the changes of a transaction that touches
// tables of both alike, from 0. With the table their eventIds differ, so
// Layer 2 never takes one capture's change for the other's. The slot is not
// part of it: the same change read through another slot (a re-created one,
// one on a standby) keeps its eventId and is recognised as a duplicate.
// Schema and table are apart (schema "a.b" with table "c" is not schema
// "a" with table "b.c"); names hold no NUL, and the "change" tag keeps the
// input apart from a snapshot row's ("snapshot", AppendSnapshotEventID).
func ChangeSource(source, schema, table string) string {
	return source + "\x00change\x00" + schema + "\x00" + table
}

// MoveSource returns the source of the eventIds of the deletes that remove
// moved rows from their old positions (MoveVersion), in table schema.table
// read from the database source: ChangeSource's, with the tag "move".
//
// Such a delete takes the ordinal of its update, which the row that
// follows it keeps too: ordinals number the transaction's changes, not its
// records. So a layout that starts (or stops) watching a column for moves
// changes no other record's eventId, and a change captured before the
// layout changed and again after it is still recognised by Layer 2.
func MoveSource(source, schema, table string) string {
	return source + "\x00move\x00" + schema + "\x00" + table
}

// appendPosition ends an eventId's hash input: a zero byte after the
// source, then the commit position and the ordinal, big endian.
func appendPosition(b []byte, commitLSN LSN, ordinal uint32) []byte {
	b = append(b, 0)
	b = binary.BigEndian.AppendUint64(b, uint64(commitLSN))
	return binary.BigEndian.AppendUint32(b, ordinal)
}

// SnapshotEventID returns the deterministic eventId of a row read by the
// snapshot taken at consistent point cp: the same row read again after a
// crash gets the same id. keyValues are the row's primary-key values.
func SnapshotEventID(source string, cp LSN, table string, keyValues []string, at time.Time) string {
	var id [36]byte
	return string(AppendSnapshotEventID(id[:0], source, cp, table, keyValues, at))
}

// AppendSnapshotEventID appends SnapshotEventID(source, cp, table,
// keyValues, at) to dst without allocating (for keys of usual length), for
// a snapshot reader that writes one id per row.
func AppendSnapshotEventID(dst []byte, source string, cp LSN, table string, keyValues []string, at time.Time) []byte {
	// The key takes the place of the ordinal: it is folded into the hash
	// input as part of the source, "<source>\x00snapshot\x00<table>", then
	// "\x00" and the JSON string of each key value.
	var in [256]byte
	b := append(in[:0], source...)
	b = append(b, "\x00snapshot\x00"...)
	b = append(b, table...)
	for _, v := range keyValues {
		b = append(b, 0)
		b = appendJSONString(b, v)
	}
	b = appendPosition(b, cp, 0)
	return appendUUIDv7(dst, sha256.Sum256(b), at)
}

// appendUUIDv7 writes the eventId made of the millisecond time of at and
// the first 74 free bits of sum, in canonical form.
func appendUUIDv7(dst []byte, sum [sha256.Size]byte, at time.Time) []byte {
	var u [16]byte
	ms := uint64(at.UnixMilli())
	u[0] = byte(ms >> 40)
	u[1] = byte(ms >> 32)
	u[2] = byte(ms >> 24)
	u[3] = byte(ms >> 16)
	u[4] = byte(ms >> 8)
	u[5] = byte(ms)
	copy(u[6:], sum[:10])
	u[6] = 0x70 | u[6]&0x0f // version 7
	u[8] = 0x80 | u[8]&0x3f // RFC 9562 variant
	dst = hex.AppendEncode(dst, u[0:4])
	dst = append(dst, '-')
	dst = hex.AppendEncode(dst, u[4:6])
	dst = append(dst, '-')
	dst = hex.AppendEncode(dst, u[6:8])
	dst = append(dst, '-')
	dst = hex.AppendEncode(dst, u[8:10])
	dst = append(dst, '-')
	return hex.AppendEncode(dst, u[10:])
}

// ParseEventID checks that s is a UUIDv7 in canonical form and returns the
// millisecond timestamp it carries.
func ParseEventID(s string) (time.Time, error) {
	if len(s) != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return time.Time{}, fmt.Errorf("%q is not a canonical UUID", s)
	}
	// Decoded group by group with encoding/hex's table; b only reads s.
	b := unsafe.Slice(unsafe.StringData(s), len(s))
	var u [16]byte
	_, err1 := hex.Decode(u[0:4], b[0:8])
	_, err2 := hex.Decode(u[4:6], b[9:13])
	_, err3 := hex.Decode(u[6:8], b[14:18])
	_, err4 := hex.Decode(u[8:10], b[19:23])
	_, err5 := hex.Decode(u[10:16], b[24:36])
	if err1 != nil || err2 != nil || err3 != nil || err4 != nil || err5 != nil {
		return time.Time{}, fmt.Errorf("%q is not a canonical UUID: bad hex digit", s)
	}
	if u[6]>>4 != 7 {
		return time.Time{}, fmt.Errorf("%q is not a version 7 UUID", s)
	}
	if u[8]>>6 != 2 {
		return time.Time{}, fmt.Errorf("%q does not have the RFC 9562 variant", s)
	}
	ms := int64(u[0])<<40 | int64(u[1])<<32 | int64(u[2])<<24 | int64(u[3])<<16 | int64(u[4])<<8 | int64(u[5])
	return time.UnixMilli(ms).UTC(), nil
}
