package record

import (
	"fmt"
	"strconv"
	"time"

	"github.com/walhouse/walhouse/internal/textcut"
)

// Headers of a record in the dead-letter topic (`<prefix>-dlq`). Capture and
// the sink both write there: the sink the Kafka records it can never load
// (their key and value unchanged, so a replay produces exactly what failed),
// capture the changes that cannot become a record at all (a row without a
// tenant, one over the size bound). Every dead letter has HeaderDLTopic,
// HeaderDLError, HeaderDLFirstSeen and HeaderDLAttempts; the others are set
// where they apply.
const (
	// HeaderDLTopic is the table topic the record was read from or, for
	// capture's dead letters, would have gone to; replays go there.
	HeaderDLTopic = "walhouse-original-topic"
	// HeaderDLPartition and HeaderDLOffset locate the original Kafka
	// record; both are -1 for capture's dead letters, which never were one.
	HeaderDLPartition = "walhouse-original-partition"
	HeaderDLOffset    = "walhouse-original-offset"
	// HeaderDLError is the reason in words, with what to do.
	HeaderDLError     = "walhouse-error"
	HeaderDLFirstSeen = "walhouse-first-seen" // RFC 3339
	HeaderDLAttempts  = "walhouse-attempts"
	// HeaderDLOrigin says who set the record aside: "capture" or "sink"
	// (absent on dead letters of walhouse versions before it: the sink).
	HeaderDLOrigin = "walhouse-origin"
	// HeaderDLReason is a short, stable reason code (see the Reason*
	// constants), the label of the dead-letter metrics.
	HeaderDLReason = "walhouse-reason"
	// HeaderDLCommitLSN is the commit LSN of the change's transaction.
	HeaderDLCommitLSN = "walhouse-commit-lsn"
	// HeaderDLTable is the source table, "schema.table".
	HeaderDLTable = "walhouse-table"
	// HeaderDLPrimaryKey is the row's primary key as a JSON object of
	// column name to text value (null for a missing value).
	HeaderDLPrimaryKey = "walhouse-primary-key"
	// HeaderDLValueDropped holds the size of a value the dead letter goes
	// without (DeadLetter.WithoutValue): it cannot be replayed.
	HeaderDLValueDropped = "walhouse-value-dropped"
)

// MaxDeadLetterError bounds the error text a dead letter carries: an error
// may quote a whole value (ClickHouse's exceptions do), and the dead letter
// must fit in its topic next to the original key and value.
const MaxDeadLetterError = 16 << 10

// DeadLetter is a record of the dead-letter topic: a Kafka record the sink
// can never load (its key and value unchanged, so a replay produces exactly
// what failed), or a change capture could not turn into a record. Headers
// encodes it and ParseDeadLetter reads it; both stages, the Kafka adapter
// and `walhouse dlq` use them and nothing else.
type DeadLetter struct {
	// Topic is the table topic the record was read from or, for capture's
	// dead letters, would have gone to; Partition and Offset locate the
	// original record (-1 for capture's, which never were one).
	Topic     string
	Partition int32
	Offset    int64
	Key       []byte
	Value     []byte
	Err       error
	FirstSeen time.Time
	Attempts  int
	// Rows is the row count of a whole row batch set aside (its
	// HeaderRows), 0 for a single record: a replay must send the header
	// with the value.
	Rows int
	// Origin is "capture" or "sink": who set the record aside.
	Origin string
	// Reason is a short reason code (Reason* or the sink's own), empty
	// when none was recorded.
	Reason string
	// Table, PrimaryKey and CommitLSN describe a change capture set aside
	// (HeaderDLTable, HeaderDLPrimaryKey, HeaderDLCommitLSN).
	Table, PrimaryKey string
	CommitLSN         LSN
	// ValueDropped is the size of a value the dead letter goes without
	// (WithoutValue); 0 when it has its value.
	ValueDropped int
}

// WithoutValue returns l without its value, whose size HeaderDLValueDropped
// then says: the one policy for a dead letter too large for its topic, so
// that setting a record aside never stops a stage. Such a dead letter says
// which record it was but cannot be replayed.
func (l DeadLetter) WithoutValue() DeadLetter {
	if len(l.Value) > 0 {
		l.ValueDropped, l.Value = len(l.Value), nil
	}
	return l
}

// Headers returns the dead letter's headers, the form ParseDeadLetter
// reads. The error text is cut to MaxDeadLetterError.
func (l DeadLetter) Headers() []Header {
	errText := ""
	if l.Err != nil {
		errText = textcut.Shorten(l.Err.Error(), MaxDeadLetterError)
	}
	h := []Header{
		{HeaderDLTopic, l.Topic},
		{HeaderDLPartition, strconv.Itoa(int(l.Partition))},
		{HeaderDLOffset, strconv.FormatInt(l.Offset, 10)},
		{HeaderDLError, errText},
		{HeaderDLFirstSeen, l.FirstSeen.UTC().Format(time.RFC3339Nano)},
		{HeaderDLAttempts, strconv.Itoa(l.Attempts)},
		{HeaderDLOrigin, l.Origin},
	}
	if l.Reason != "" {
		h = append(h, Header{HeaderDLReason, l.Reason})
	}
	if l.CommitLSN != 0 {
		h = append(h, Header{HeaderDLCommitLSN, l.CommitLSN.String()})
	}
	if l.Table != "" {
		h = append(h, Header{HeaderDLTable, l.Table}, Header{HeaderDLPrimaryKey, l.PrimaryKey})
	}
	if l.Rows > 0 {
		h = append(h, Header{HeaderRows, strconv.Itoa(l.Rows)})
	}
	if l.ValueDropped > 0 {
		h = append(h, Header{HeaderDLValueDropped, strconv.Itoa(l.ValueDropped)})
	}
	return h
}

// ParseDeadLetter reads a dead letter from a record of the dead-letter
// topic: its key, value and headers. The topic is read, not trusted: a
// malformed header is an error, and a record without HeaderDLTopic was
// not written by walhouse.
func ParseDeadLetter(key, value []byte, headers []Header) (DeadLetter, error) {
	l := DeadLetter{Key: key, Value: value}
	var errText string
	for _, h := range headers {
		v := h.Value
		var err error
		switch h.Key {
		case HeaderDLTopic:
			l.Topic = v
		case HeaderDLPartition:
			var p int64
			p, err = strconv.ParseInt(v, 10, 32)
			l.Partition = int32(p)
		case HeaderDLOffset:
			l.Offset, err = strconv.ParseInt(v, 10, 64)
		case HeaderDLError:
			errText = v
		case HeaderDLFirstSeen:
			l.FirstSeen, err = time.Parse(time.RFC3339Nano, v)
		case HeaderDLAttempts:
			l.Attempts, err = strconv.Atoi(v)
		case HeaderDLValueDropped:
			l.ValueDropped, err = strconv.Atoi(v)
		case HeaderRows:
			l.Rows = RowsOf(v)
		case HeaderDLOrigin:
			l.Origin = v
		case HeaderDLReason:
			l.Reason = v
		case HeaderDLTable:
			l.Table = v
		case HeaderDLPrimaryKey:
			l.PrimaryKey = v
		case HeaderDLCommitLSN:
			l.CommitLSN, err = ParseLSN(v)
		}
		if err != nil {
			return l, fmt.Errorf("header %s: %w", h.Key, err)
		}
	}
	if l.Origin == "" {
		l.Origin = "sink" // written before walhouse named the origin
	}
	if l.Topic == "" {
		return l, fmt.Errorf("no %s header: not written by walhouse", HeaderDLTopic)
	}
	l.Err = deadLetterError(errText)
	return l, nil
}

// deadLetterError is the error text of a parsed dead letter.
type deadLetterError string

func (e deadLetterError) Error() string { return string(e) }

// Reason codes of capture's dead letters.
const (
	// ReasonNoTenant: the tenant column is NULL, so the row belongs to no
	// tenant walhouse could serve it to.
	ReasonNoTenant = "no_tenant"
	// ReasonInvalid: the change does not form a valid record.
	ReasonInvalid = "invalid_record"
	// ReasonTooLarge: the encoded record exceeds the configured bound.
	ReasonTooLarge = "too_large"
)
