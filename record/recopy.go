package record

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// A topic gap (records Kafka deleted before the sink read them) can be
// repaired without an operator when the sink runs with --recopy-on-gap: the
// sink asks capture to copy the table again (RecopyRequest, in the
// compacted topic <prefix>-recopy), capture copies it online at a WAL
// position L exactly as after a rewrite (every copied row at Version(L)),
// and when the copy is acknowledged it sends a re-copy done marker
// (RecopyDone) to every partition of the table's topic. Once the sink has
// passed the marker in every partition, every copied row is loaded, and a
// sweep at L (truncate semantics: rows whose latest version is below L are
// gone) removes the rows PostgreSQL deleted in the lost records. Capture
// ends the copy after a DDL rewrite with such markers too (RewriteSweepID).

// RecopyRequest is the sink's request to copy a table again after a gap in
// its topic: the value, JSON, of the key Table in the re-copy topic. A
// newer request for the same table replaces an older one; a key without a
// value (a tombstone) says the table's last request is done.
type RecopyRequest struct {
	// ID names the request; capture's copy and its done markers carry it.
	ID string `json:"id"`
	// Table is "schema.table".
	Table string `json:"table"`
	// Topic, Partition, From and To say which gap the request repairs:
	// offsets From to To-1 of the partition were lost.
	Topic       string    `json:"topic"`
	Partition   int32     `json:"partition"`
	From        int64     `json:"from"`
	To          int64     `json:"to"`
	RequestedAt time.Time `json:"requested_at"`
}

// maxRecopyRequest bounds the encoded request a reader accepts: the topic
// is open to whoever may write to Kafka, so its values are untrusted.
const maxRecopyRequest = 4 << 10

// Source returns the request's table as a Source, ok false when Table is
// not "schema.table".
func (r RecopyRequest) Source() (Source, bool) {
	schema, table, ok := strings.Cut(r.Table, ".")
	if !ok || schema == "" || table == "" {
		return Source{}, false
	}
	return Source{Schema: schema, Table: table}, true
}

// MarshalRecopyRequest encodes a request as the re-copy topic holds it.
func MarshalRecopyRequest(r RecopyRequest) ([]byte, error) {
	if err := r.validate(); err != nil {
		return nil, err
	}
	return json.Marshal(r)
}

// ParseRecopyRequest decodes the value of key (the table) in the re-copy
// topic; the error wraps ErrInvalid when it is not a valid request of that
// table.
func ParseRecopyRequest(key string, value []byte) (RecopyRequest, error) {
	var r RecopyRequest
	if len(value) > maxRecopyRequest {
		return r, fmt.Errorf("%w: re-copy request of %q: %d bytes, at most %d", ErrInvalid, key, len(value), maxRecopyRequest)
	}
	if err := json.Unmarshal(value, &r); err != nil {
		return r, fmt.Errorf("%w: re-copy request of %q: %v", ErrInvalid, key, err)
	}
	if err := r.validate(); err != nil {
		return r, err
	}
	if r.Table != key {
		return r, fmt.Errorf("%w: re-copy request of %q names table %q", ErrInvalid, key, r.Table)
	}
	return r, nil
}

// validate checks what a reader relies on.
func (r RecopyRequest) validate() error {
	switch _, ok := r.Source(); {
	case r.ID == "" || len(r.ID) > 128:
		return fmt.Errorf("%w: re-copy request of %q: id %q: want 1 to 128 bytes", ErrInvalid, r.Table, r.ID)
	case !ok:
		return fmt.Errorf("%w: re-copy request: table %q: want schema.table", ErrInvalid, r.Table)
	case r.Topic == "" || r.Partition < 0 || r.From < 0 || r.To < r.From:
		return fmt.Errorf("%w: re-copy request of %s: gap %s/%d offsets %d to %d", ErrInvalid, r.Table, r.Topic, r.Partition, r.From, r.To)
	}
	return nil
}

// Re-copy done marker headers. A re-copy done marker is a keyless,
// valueless record that capture produces to every partition of a table's
// topic once every row of the copy a RecopyRequest asked for is
// acknowledged by Kafka: every copied row of a partition precedes the
// marker in it. Like a truncate marker it carries the heartbeat headers,
// HeaderHeartbeat first (capture's partitioner honours the partition of such
// a record), with HeaderLSN the copy's position L; a consumer checks for
// HeaderRecopy before taking a record for a heartbeat.
const (
	HeaderRecopy           = "walhouse-recopy"            // the request's ID
	HeaderRecopyPartitions = "walhouse-recopy-partitions" // the topic's partition count when capture sent the markers
)

// RecopyDone is the content of a re-copy done marker: the copy of Source
// that request ID asked for was read at version Version(LSN) and all of it
// precedes the marker in its partition, as in each of Partitions
// partitions.
type RecopyDone struct {
	Source     Source // Schema and Table only
	ID         string
	LSN        LSN       // the copy's position L
	At         time.Time // the HeaderHeartbeat value: when the markers were sent
	Partitions int32
}

// Headers returns the marker's headers, HeaderHeartbeat first.
func (d RecopyDone) Headers() []Header {
	return []Header{
		{HeaderHeartbeat, d.At.UTC().Format(time.RFC3339Nano)},
		{HeaderLSN, d.LSN.String()},
		{HeaderTable, d.Source.Schema + "." + d.Source.Table},
		{HeaderRecopy, d.ID},
		{HeaderRecopyPartitions, strconv.Itoa(int(d.Partitions))},
	}
}

// ParseRecopyDone reads a re-copy done marker from header values (as
// returned by get). ok is false when the record is not one; err wraps
// ErrInvalid when it is one but malformed.
func ParseRecopyDone(get func(key string) (string, bool)) (d RecopyDone, ok bool, err error) {
	id, ok := get(HeaderRecopy)
	if !ok {
		return d, false, nil
	}
	if id == "" || len(id) > 128 {
		return d, true, fmt.Errorf("%w: re-copy done marker: id %q: want 1 to 128 bytes", ErrInvalid, id)
	}
	hb, isHB, err := ParseHeartbeat(get)
	if !isHB {
		return d, true, fmt.Errorf("%w: re-copy done marker without %s header", ErrInvalid, HeaderHeartbeat)
	}
	if err != nil {
		return d, true, fmt.Errorf("re-copy done marker: %w", err)
	}
	d.Source, d.ID, d.LSN, d.At = hb.Source, id, hb.LSN, hb.At
	if d.LSN == 0 {
		return d, true, fmt.Errorf("%w: re-copy done marker of %s.%s has no WAL position", ErrInvalid, d.Source.Schema, d.Source.Table)
	}
	n, _ := get(HeaderRecopyPartitions)
	parts, err := strconv.ParseInt(n, 10, 32)
	if err != nil || parts < 1 {
		return d, true, fmt.Errorf("%w: re-copy done marker partitions %q: want a positive count", ErrInvalid, n)
	}
	d.Partitions = int32(parts)
	return d, true, nil
}

// rewriteSweepPrefix starts the ID of the done markers capture sends after
// the copy that follows a DDL rewrite (RewriteSweepID).
const rewriteSweepPrefix = "rewrite/"

// RewriteSweepID names the done markers of the copy of table src after the
// DDL rewrite at at. Such a copy answers no RecopyRequest, but ends like
// one: the sink sweeps the table at at once every partition passed them,
// which removes a row the rewrite moved to another ClickHouse position (a
// sorting or partition column, or the key, converted) from its old one.
// The ID is unique per table and rewrite (the sinks count the partitions
// that passed by ID) and within the 128 bytes a marker allows.
func RewriteSweepID(src Source, at LSN) string {
	sum := sha256.Sum256([]byte(src.Schema + "." + src.Table))
	return rewriteSweepPrefix + at.String() + "/" + hex.EncodeToString(sum[:8])
}

// IsRewriteSweep reports whether id names the done markers of a copy after
// a DDL rewrite (RewriteSweepID) rather than of a RecopyRequest.
func IsRewriteSweep(id string) bool { return strings.HasPrefix(id, rewriteSweepPrefix) }
