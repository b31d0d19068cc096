package sink

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walhouse/walhouse/record"
)

// Headers the sink puts on a dead-lettered record (record.HeaderDL*). The
// record's key and value are the original ones, so a replay produces
// exactly what failed.
const (
	HeaderTopic     = record.HeaderDLTopic
	HeaderPartition = record.HeaderDLPartition
	HeaderOffset    = record.HeaderDLOffset
	HeaderError     = record.HeaderDLError
	HeaderFirstSeen = record.HeaderDLFirstSeen
	HeaderAttempts  = record.HeaderDLAttempts
	// HeaderValueDropped holds the size of a value the dead-letter topic
	// could not take (see kafka.DeadLetters); the dead letter then has no
	// value and cannot be replayed.
	HeaderValueDropped = "walhouse-value-dropped"
	// A whole row batch set aside also keeps its record.HeaderRows.
)

// The sink's own reasons (DeadLetter.Reason, record.HeaderDLReason) for
// what it refuses before loading; other dead letters of the sink have none.
const (
	// ReasonOverBudget: decoding the record would take more memory than
	// any record capture writes (record.ErrOverBudget).
	ReasonOverBudget = "over_budget"
	// ReasonFuturePosition: a record, heartbeat or truncate marker at a
	// WAL position or time PostgreSQL cannot have reached (sink/future.go).
	ReasonFuturePosition = "future_position"
)

// maxLoggedError bounds the error text of a dead letter in the sink's log;
// the dead-letter header has its own bound (kafka.DeadLetters).
const maxLoggedError = 2 << 10

// reasonOf returns the reason code of a cause, "" when it has none.
func reasonOf(cause error) string {
	switch {
	case errors.Is(cause, record.ErrOverBudget):
		return ReasonOverBudget
	case errors.Is(cause, errFuturePosition):
		return ReasonFuturePosition
	}
	return ""
}

// ParseDeadLetter reads the metadata of a record from the dead-letter topic.
func ParseDeadLetter(r *kgo.Record) (DeadLetter, error) {
	l := DeadLetter{Key: r.Key, Value: r.Value}
	var errText string
	for _, h := range r.Headers {
		v := string(h.Value)
		var err error
		switch h.Key {
		case HeaderTopic:
			l.Topic = v
		case HeaderPartition:
			var p int
			p, err = strconv.Atoi(v)
			l.Partition = int32(p)
		case HeaderOffset:
			l.Offset, err = strconv.ParseInt(v, 10, 64)
		case HeaderError:
			errText = v
		case HeaderFirstSeen:
			l.FirstSeen, err = time.Parse(time.RFC3339Nano, v)
		case HeaderAttempts:
			l.Attempts, err = strconv.Atoi(v)
		case HeaderValueDropped:
			l.ValueDropped, err = strconv.Atoi(v)
		case record.HeaderRows:
			l.Rows = record.RowsOf(v)
		case record.HeaderDLOrigin:
			l.Origin = v
		case record.HeaderDLReason:
			l.Reason = v
		case record.HeaderDLTable:
			l.Table = v
		case record.HeaderDLPrimaryKey:
			l.PrimaryKey = v
		case record.HeaderDLCommitLSN:
			l.CommitLSN, err = record.ParseLSN(v)
		}
		if err != nil {
			return l, fmt.Errorf("dead letter at offset %d: header %s: %w", r.Offset, h.Key, err)
		}
	}
	if l.Origin == "" {
		l.Origin = "sink" // written before walhouse named the origin
	}
	if l.Topic == "" {
		return l, fmt.Errorf("record at offset %d has no %s header: not written by walhouse sink", r.Offset, HeaderTopic)
	}
	l.Err = deadLetterError(errText)
	return l, nil
}

type deadLetterError string

func (e deadLetterError) Error() string { return string(e) }
