package record

import "fmt"

// Bounds on the key plus value of one record walhouse produces (capture's
// --max-record-bytes): capture refuses larger rows, and every topic,
// producer and consumer of the pipeline is sized from the bound (package
// kafka, MaxMessageBytes), so a record Kafka took from capture can also be
// read and dead-lettered by the sink.
const (
	// DefaultMaxBytes is the default bound: a row with a value of tens of
	// MiB (jsonb, text, bytea; a bytea's hex text is twice its size) must
	// pass.
	DefaultMaxBytes = 64 << 20
	// MinMaxBytes is the smallest bound walhouse accepts: Kafka's own
	// default message size, which row batches (128 KiB) and ordinary rows
	// fit with room to spare.
	MinMaxBytes = 1 << 20
	// MaxMaxBytes is the largest bound: a request of one record must stay
	// within what a broker reads (socket.request.max.bytes, an int32) and
	// PostgreSQL sends no message over 1 GiB anyway.
	MaxMaxBytes = 1 << 30
)

// ValidateMaxBytes checks a record bound given by a user.
func ValidateMaxBytes(n int) error {
	if n < MinMaxBytes || n > MaxMaxBytes {
		return fmt.Errorf("max record bytes %d: want %d (1 MiB) to %d (1 GiB)", n, MinMaxBytes, MaxMaxBytes)
	}
	return nil
}
