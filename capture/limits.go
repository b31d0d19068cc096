package capture

import (
	"errors"
	"fmt"
)

// ErrRowTooLarge reports a row whose encoded record (key plus value) is
// larger than the record bound (WithMaxRecordBytes, --max-record-bytes).
// Such a record is never produced: Kafka would refuse it, and the refusal
// would stop capture at that row on every restart.
var ErrRowTooLarge = errors.New("row too large for a Kafka record")

// WithMaxRecordBytes bounds the key plus value of one record capture
// produces (default record.DefaultMaxBytes, 64 MiB; at least 1 MiB, at most 1 GiB). The topics
// capture creates get a max.message.bytes that holds such a record, and
// existing ones are raised to it; the producer, the sink's consumer and
// its dead-letter producer must allow the same bound (see package kafka,
// RecordLimitOpts). A row whose record is larger fails with
// ErrRowTooLarge.
func WithMaxRecordBytes(n int) Option { return func(c *config) { c.maxRecordBytes = n } }

// checkRecordSize returns an error wrapping ErrRowTooLarge when a record
// of size bytes (key plus value, encoded) exceeds bound.
func checkRecordSize(size, bound int) error {
	if size <= bound {
		return nil
	}
	return fmt.Errorf("%w: its record takes %d bytes, over the bound of %d; raise --max-record-bytes (and the topics' max.message.bytes follows) to load rows this large", ErrRowTooLarge, size, bound)
}
