package sink

import (
	"errors"

	"github.com/walhouse/walhouse/record"
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
// the dead-letter header has its own bound (record.MaxDeadLetterError).
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
