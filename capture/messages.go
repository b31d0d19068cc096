package capture

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// walhouse writes two kinds of logical messages into the WAL: heartbeats
// (capture, every 10 s) and DDL notices (the event trigger, after every
// ALTER TABLE). Any login may call pg_logical_emit_message with any prefix,
// so a message is trusted only if it carries a MAC under a key that only
// capture's role and the event trigger's SECURITY DEFINER function can read:
// a forged heartbeat could move lastSyncAt into the future, a forged DDL
// notice could rename ClickHouse columns. A message without a valid MAC, or
// malformed, is noise: logged (at most once a minute per prefix and
// reason), counted and skipped. docs/security.md has the threat model.
//
// The key is 32 random bytes in walhouse.message_key, a table of the
// superuser who installed the event trigger, readable by nobody else
// (capture reads it as that superuser). A capture that cannot read it (not a
// superuser, so no event trigger either) signs its heartbeats with a key of
// its own process; heartbeats of an earlier process read again after a
// restart then fail the check and are skipped, which only delays lastSyncAt.
//
// The MAC is hex(SHA-256(key ‖ SHA-256(content))): PostgreSQL has sha256()
// built in (HMAC needs pgcrypto, which many servers lack), and with a
// fixed-length key and a fixed-length digest after it the construction
// admits no length extension.

// messageKeyLen is the length of the message key in bytes.
const messageKeyLen = 32

// macLen is the length of a message MAC in hex digits.
const macLen = 2 * sha256.Size

// messageKey signs and verifies walhouse's logical messages.
type messageKey []byte

// newProcessKey returns a random key for a capture that cannot read the
// shared one.
func newProcessKey() (messageKey, error) {
	k := make(messageKey, messageKeyLen)
	if _, err := rand.Read(k); err != nil {
		return nil, fmt.Errorf("make a message key: %w", err)
	}
	return k, nil
}

// mac returns the hex MAC of content.
func (k messageKey) mac(content []byte) []byte {
	inner := sha256.Sum256(content)
	h := sha256.New()
	h.Write(k)
	h.Write(inner[:])
	return hex.AppendEncode(make([]byte, 0, macLen), h.Sum(nil))
}

// sign returns "<mac> <content>", the form of a signed message.
func (k messageKey) sign(content []byte) []byte {
	out := append(k.mac(content), ' ')
	return append(out, content...)
}

// verify returns the content of a signed message, or ok false when the
// message is not signed with k.
func (k messageKey) verify(msg []byte) (content []byte, ok bool) {
	if len(k) == 0 || len(msg) < macLen+1 || msg[macLen] != ' ' {
		return nil, false
	}
	content = msg[macLen+1:]
	return content, hmac.Equal(msg[:macLen], k.mac(content))
}

// heartbeatContent returns the signed content of a heartbeat taken at t:
// Unix microseconds.
func (k messageKey) heartbeatContent(t time.Time) []byte {
	return k.sign(strconv.AppendInt(nil, t.UnixMicro(), 10))
}

// heartbeatTime reads a signed heartbeat.
func (k messageKey) heartbeatTime(msg []byte) (time.Time, error) {
	content, ok := k.verify(msg)
	if !ok {
		return time.Time{}, errUnauthenticated
	}
	micros, err := strconv.ParseInt(string(content), 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("%w: heartbeat time %q", errMalformed, content)
	}
	return time.UnixMicro(micros).UTC(), nil
}

// Reasons a logical message is skipped.
var (
	errUnauthenticated = errors.New("no valid MAC")
	errMalformed       = errors.New("malformed")
	errMisplaced       = errors.New("misplaced")
)

// ignoredMessages counts and logs the walhouse-prefixed messages capture
// skipped.
type ignoredMessages struct {
	counter *quietCounter // by prefix and reason
	log     *slog.Logger
	// oversized counts the messages of any prefix, and the changes, that
	// were over the replication connection's bound (oversized.go).
	oversized *oversizedMessages
}

func newIgnoredMessages(log *slog.Logger) *ignoredMessages {
	return &ignoredMessages{
		oversized: newOversizedMessages(log),
		counter: newQuietCounter(prometheus.CounterOpts{
			Name: "walhouse_capture_ignored_messages_total",
			Help: "Logical messages with walhouse's prefixes that capture skipped because they were not authenticated, malformed or misplaced (written by a role other than walhouse's), by prefix and reason.",
		}, "prefix"),
		log: log,
	}
}

// note counts a skipped message and logs it at most once a minute per
// prefix and reason.
func (m *ignoredMessages) note(prefix string, lsn fmt.Stringer, err error) {
	reason := "malformed"
	switch {
	case errors.Is(err, errUnauthenticated):
		reason = "unauthenticated"
	case errors.Is(err, errMisplaced):
		reason = "misplaced"
	}
	if ok, more := m.counter.note(prefix, reason); ok {
		m.log.Warn("skipped a logical message with walhouse's prefix that walhouse did not write (pg_logical_emit_message is open to every role); if this repeats, find who calls it",
			"prefix", prefix, "lsn", lsn, "reason", reason, "err", err, "more_since_last_log", more)
	}
}
