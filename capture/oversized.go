package capture

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/walhouse/walhouse/capture/pgoutput"
	"github.com/walhouse/walhouse/record"
)

// oversized handles the stand-in of a pgoutput message that was larger
// than the replication connection's bound and was dropped unread
// (receive_bound.go): a logical message is skipped and counted, a row
// change becomes a too_large dead letter (without its key, which was not
// read), anything else stops capture (PostgreSQL sends no such message of
// that size).
func (t *translator) oversized(ctx context.Context, lsn record.LSN, msg []byte) error {
	if len(msg) < 1+4+1 {
		return fmt.Errorf("pgoutput stand-in at %s: %w", lsn, pgoutput.ErrShort)
	}
	size, head := int(binary.BigEndian.Uint32(msg[1:5])), msg[5:]
	bound := t.cfg.maxRecordBytes + receiveSlack
	switch head[0] {
	case pgoutput.MessageTypeMessage:
		t.ignored.oversized.message(lsn, logicalPrefix(head), size, bound)
		return nil
	case pgoutput.MessageTypeInsert, pgoutput.MessageTypeUpdate, pgoutput.MessageTypeDelete:
		if !t.inTx {
			return fmt.Errorf("pgoutput: %c message outside a transaction at %s", head[0], lsn)
		}
		if len(head) < 1+4 {
			return fmt.Errorf("pgoutput stand-in at %s: %w", lsn, pgoutput.ErrShort)
		}
		relID := binary.BigEndian.Uint32(head[1:5])
		rel, ok, err := t.relation(ctx, lsn, relID)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("pgoutput: change for unknown relation %d at %s", relID, lsn)
		}
		if rel.skip {
			rel.skipped()
			return nil
		}
		t.ordinal++ // as for any change set aside: the eventIds after it stay as they were
		t.ignored.oversized.change()
		return t.out.badRow(t.bad(rel, nil, record.ReasonTooLarge, fmt.Errorf(
			"%w: PostgreSQL sent the change at %s as a message of %d bytes, over the %d bytes capture reads (--max-record-bytes + 1 MiB), so its record would be over the bound too (an update under REPLICA IDENTITY FULL also carries the old row); capture dropped it unread, so its key is not known; raise --max-record-bytes and change or re-copy the row to load it",
			ErrRowTooLarge, lsn, size, bound)))
	default:
		return fmt.Errorf("pgoutput: a %q message of %d bytes at %s is over the %d bytes capture reads (--max-record-bytes + 1 MiB); raise --max-record-bytes", head[0], size, lsn, bound)
	}
}

// logicalPrefix returns the prefix of a logical message from its first
// bytes (kind, flags, LSN, prefix), as far as they hold it.
func logicalPrefix(head []byte) string {
	if len(head) <= 1+1+8 {
		return ""
	}
	p := head[1+1+8:]
	for i, c := range p {
		if c == 0 {
			return string(p[:i])
		}
	}
	return string(p) + "…"
}

// oversizedMessages counts the messages over the read bound that capture
// dropped unread: logical messages (skipped), row changes and copied rows
// (dead-lettered as too_large, counted there as well).
type oversizedMessages struct {
	counter *quietCounter // by kind ("logical_message", "change", "copied_row") and reason
	log     *slog.Logger
}

func newOversizedMessages(log *slog.Logger) *oversizedMessages {
	return &oversizedMessages{
		counter: newQuietCounter(prometheus.CounterOpts{
			Name: "walhouse_capture_oversized_messages_total",
			Help: "Messages from PostgreSQL over --max-record-bytes + 1 MiB that capture dropped unread, by kind: logical messages (pg_logical_emit_message) are skipped, row changes and copied rows go to the dead letters as too_large.",
		}, "kind"),
		log: log,
	}
}

// message counts a logical message dropped unread and logs it at most
// once a minute.
func (o *oversizedMessages) message(lsn record.LSN, prefix string, size, bound int) {
	if ok, more := o.counter.note("logical_message", record.ReasonTooLarge); ok {
		o.log.Error("skipped a logical message over the bound capture reads, unread: pg_logical_emit_message is open to every role; revoke it from PUBLIC (docs/security.md, Logical messages) and find who calls it",
			"lsn", lsn, "prefix", prefix, "bytes", size, "bound", bound, "more_since_last_log", more)
	}
}

// change counts a row change dropped unread; its dead letter says the
// rest.
func (o *oversizedMessages) change() {
	o.counter.WithLabelValues("change", record.ReasonTooLarge).Inc()
}

// copiedRow counts a row of a copy dropped unread; its dead letter says
// the rest.
func (o *oversizedMessages) copiedRow() {
	o.counter.WithLabelValues("copied_row", record.ReasonTooLarge).Inc()
}
