package record

import (
	"fmt"
	"strings"
	"time"
)

// Truncate marker headers. A truncate marker is a Kafka record with no key
// and no value, produced by capture to every partition of a table's topic
// when the table is truncated in PostgreSQL, in the stream order of the
// truncating transaction: every change of the table written before the
// TRUNCATE precedes the marker in its partition, every change written after
// it follows the marker.
//
// A marker carries the heartbeat headers too, first of all HeaderHeartbeat
// (capture's partitioner honours the partition set on a keyless record whose
// first header is HeaderHeartbeat, which is how a marker reaches each
// partition). Its heartbeat time At is the truncating transaction's commit
// time less capture's heartbeat margin, but a marker is not a heartbeat: a
// consumer checks for HeaderTruncate first, and the sink takes no freshness
// from markers (heartbeats and row changes give it).
const (
	HeaderTruncate        = "walhouse-truncate"         // commit time of the truncating transaction, RFC 3339
	HeaderTruncateOptions = "walhouse-truncate-options" // TruncateCascade and TruncateRestartIdentity, comma-separated; may be empty
)

// The options of a TRUNCATE, as HeaderTruncateOptions spells them. They are
// informational: a CASCADE lists every truncated table in its own marker,
// and RESTART IDENTITY only resets sequences, which are not replicated.
const (
	TruncateCascade         = "cascade"
	TruncateRestartIdentity = "restart-identity"
)

// Truncate is the content of a truncate marker: Source was truncated at LSN
// by a transaction that committed at CommitTime.
//
// Its meaning for a consumer: every row of the table whose latest version is
// below Version(LSN) is gone; rows written after the TRUNCATE (in the same
// transaction or later) have larger versions and stay. This holds however
// late the marker is applied, because TRUNCATE takes an ACCESS EXCLUSIVE
// lock: no other transaction writes the table between the TRUNCATE and its
// commit, so every change written before it has a smaller WAL position and
// every change written after it a larger one.
type Truncate struct {
	Source          Source    // Schema and Table only
	LSN             LSN       // WAL position of the TRUNCATE itself
	CommitTime      time.Time // commit time of the truncating transaction
	At              time.Time // the HeaderHeartbeat value (see the header constants)
	Cascade         bool      // TRUNCATE ... CASCADE
	RestartIdentity bool      // TRUNCATE ... RESTART IDENTITY
}

// Header is one Kafka record header of a control record.
type Header struct {
	Key, Value string
}

// Headers returns the marker's headers, HeaderHeartbeat first.
func (t Truncate) Headers() []Header {
	var opts []string
	if t.Cascade {
		opts = append(opts, TruncateCascade)
	}
	if t.RestartIdentity {
		opts = append(opts, TruncateRestartIdentity)
	}
	return []Header{
		{HeaderHeartbeat, t.At.UTC().Format(time.RFC3339Nano)},
		{HeaderLSN, t.LSN.String()},
		{HeaderTable, t.Source.Schema + "." + t.Source.Table},
		{HeaderTruncate, t.CommitTime.UTC().Format(time.RFC3339Nano)},
		{HeaderTruncateOptions, strings.Join(opts, ",")},
	}
}

// ParseTruncate reads a truncate marker from header values (as returned by
// get). ok is false when the record is not a truncate marker; err wraps
// ErrInvalid when it is one but malformed.
func ParseTruncate(get func(key string) (string, bool)) (t Truncate, ok bool, err error) {
	commit, ok := get(HeaderTruncate)
	if !ok {
		return t, false, nil
	}
	hb, isHB, err := ParseHeartbeat(get)
	if !isHB {
		return t, true, fmt.Errorf("%w: truncate marker without %s header", ErrInvalid, HeaderHeartbeat)
	}
	if err != nil {
		return t, true, fmt.Errorf("truncate marker: %w", err)
	}
	t.Source, t.LSN, t.At = hb.Source, hb.LSN, hb.At
	if t.LSN == 0 {
		return t, true, fmt.Errorf("%w: truncate marker of %s.%s has no WAL position", ErrInvalid, t.Source.Schema, t.Source.Table)
	}
	if t.CommitTime, err = time.Parse(time.RFC3339Nano, commit); err != nil {
		return t, true, fmt.Errorf("%w: truncate commit time: %v", ErrInvalid, err)
	}
	opts, _ := get(HeaderTruncateOptions)
	for _, o := range strings.Split(opts, ",") {
		switch o {
		case "":
		case TruncateCascade:
			t.Cascade = true
		case TruncateRestartIdentity:
			t.RestartIdentity = true
		default:
			return t, true, fmt.Errorf("%w: truncate option %q (want %s or %s)", ErrInvalid, o, TruncateCascade, TruncateRestartIdentity)
		}
	}
	return t, true, nil
}
