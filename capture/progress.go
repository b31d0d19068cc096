package capture

import (
	"context"
	"errors"
	"time"
)

// logProgress writes one progress line and returns the rows produced so
// far, for the next line's rate.
func (c *Capturer) logProgress(lastRows int64, since time.Duration) int64 {
	st := c.Stats()
	var held uint64
	if st.ServerWALEnd > st.Confirmed {
		held = uint64(st.ServerWALEnd - st.Confirmed)
	}
	c.log.Info("progress", "rows", st.Rows, "rows_per_s", float64(st.Rows-lastRows)/since.Seconds(),
		"received_lsn", st.Received, "confirmed_lsn", st.Confirmed, "slot_lag_bytes", held,
		"producer_backlog_bytes", st.PendingBytes, "dead_letters", st.DeadLetters)
	return st.Rows
}

// logStop says why Run returned and where it left the slot: a clean stop
// (the context ended) at info, anything else at error.
func (c *Capturer) logStop(err error) {
	st := c.Stats()
	attrs := []any{"rows", st.Rows, "confirmed_lsn", st.Confirmed, "dead_letters", st.DeadLetters}
	if err == nil || errors.Is(err, context.Canceled) {
		c.log.Info("stopped; every confirmed position is durable in Kafka", attrs...)
		return
	}
	c.log.Error("stopped", append(attrs, "err", err)...)
}
