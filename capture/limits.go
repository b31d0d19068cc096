package capture

import (
	"errors"
	"fmt"

	"github.com/walhouse/walhouse/record"
)

// ErrRowTooLarge reports a row whose encoded record (key plus value) is
// larger than the record bound (WithMaxRecordBytes, --max-record-bytes).
// Such a record is never produced: Kafka would refuse it, and the refusal
// would stop capture at that row on every restart.
var ErrRowTooLarge = errors.New("row too large for a Kafka record")

// checkRecordSize returns an error wrapping ErrRowTooLarge when a record
// of size bytes (key plus value, encoded) exceeds bound.
func checkRecordSize(size, bound int) error {
	if size <= bound {
		return nil
	}
	return fmt.Errorf("%w: its record takes %d bytes, over the bound of %d; raise --max-record-bytes (and the topics' max.message.bytes follows) to load rows this large", ErrRowTooLarge, size, bound)
}

// exactSizeAbove is the share of the record bound from which capture
// computes a record's exact size before encoding it: a record whose values
// (with the tenant and old key) take less than bound/32 bytes encodes to
// at most about 25 times that (JSON escapes of six bytes, key values
// written four times), so at most about the bound. Below it, computing the
// size would cost more than the rare buffer growth.
const exactSizeAbove = 32

// preflight returns the exact encoded size of r (key plus value) when its
// values are large enough that its record may exceed bound, with an error
// wrapping ErrRowTooLarge when it does: such a record is never encoded,
// so a row of control characters whose escapes take six times its size
// costs no memory beyond the row itself. It returns 0 for smaller records,
// whose size is checked after encoding.
func preflight(enc *record.Encoder, r *record.Record, bound int) (int, error) {
	if rawSize(r) <= bound/exactSizeAbove {
		return 0, nil
	}
	size := enc.KeyValueSize(r)
	return size, checkRecordSize(size, bound)
}

// rawSize returns the bytes of r's texts, unescaped.
func rawSize(r *record.Record) int {
	return len(r.TenantID) + textBytes(r.Values) + textBytes(r.OldKey)
}

// textBytes returns the bytes of vals' texts, unescaped.
func textBytes(vals []record.Value) int {
	n := 0
	for _, v := range vals {
		n += len(v.Text)
	}
	return n
}
