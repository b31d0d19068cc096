package capture

import (
	"context"
	"sync"

	"github.com/walhouse/walhouse/record"
)

// txAck counts the records of one transaction that Kafka has not yet
// acknowledged.
type txAck struct {
	end     record.LSN // the transaction's end LSN, set at commit
	pending int
	closed  bool // commit seen: no more records will be added
}

// ackTracker computes the position that may be confirmed to the slot: the
// end LSN of the newest transaction that, together with every transaction
// before it, has all its records acknowledged by Kafka. It is the only place
// that decides what is durable, and it only ever moves forward.
//
// The reader goroutine calls begin, add, commit and idle; Kafka's callbacks
// call ack. All methods are safe for concurrent use.
type ackTracker struct {
	mu        sync.Mutex
	queue     []*txAck // open or unacknowledged transactions, oldest first
	durable   record.LSN
	failure   error
	pendingB  int
	spaceFree *sync.Cond
}

func newAckTracker(start record.LSN) *ackTracker {
	t := &ackTracker{durable: start}
	t.spaceFree = sync.NewCond(&t.mu)
	return t
}

// begin opens a transaction.
func (t *ackTracker) begin() *txAck {
	tx := &txAck{}
	t.mu.Lock()
	t.queue = append(t.queue, tx)
	t.mu.Unlock()
	return tx
}

// add counts one record of tx, of size bytes, about to be produced. It
// blocks while more than maxBytes are unacknowledged, so a slow broker
// pauses reading instead of growing memory; it returns the first produce
// failure, if any.
func (t *ackTracker) add(tx *txAck, size, maxBytes int) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	for t.pendingB > 0 && t.pendingB+size > maxBytes && t.failure == nil {
		t.spaceFree.Wait()
	}
	tx.pending++
	t.pendingB += size
	return t.failure
}

// ack records Kafka's answer for one record of tx.
func (t *ackTracker) ack(tx *txAck, size int, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	tx.pending--
	t.pendingB -= size
	if err != nil && t.failure == nil {
		t.failure = err
	}
	t.advance()
	t.spaceFree.Broadcast()
}

// commit closes tx at its end LSN.
func (t *ackTracker) commit(tx *txAck, end record.LSN) {
	t.mu.Lock()
	defer t.mu.Unlock()
	tx.end = end
	tx.closed = true
	t.advance()
}

// idle moves the durable position to lsn when nothing is open or pending:
// PostgreSQL has sent every transaction that committed before lsn, and all
// of them are acknowledged, so an idle slot does not pin WAL.
func (t *ackTracker) idle(lsn record.LSN) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.queue) == 0 && t.failure == nil && lsn > t.durable {
		t.durable = lsn
	}
}

func (t *ackTracker) advance() {
	if t.failure != nil {
		return // never confirm past a record that failed
	}
	n := 0
	for _, tx := range t.queue {
		if !tx.closed || tx.pending > 0 {
			break
		}
		if tx.end > t.durable {
			t.durable = tx.end
		}
		n++
	}
	if n > 0 {
		copy(t.queue, t.queue[n:])
		for i := len(t.queue) - n; i < len(t.queue); i++ {
			t.queue[i] = nil
		}
		t.queue = t.queue[:len(t.queue)-n]
	}
}

// waitPending blocks until no record is waiting for Kafka, or ctx is done.
func (t *ackTracker) waitPending(ctx context.Context) {
	stop := context.AfterFunc(ctx, func() {
		t.mu.Lock()
		t.spaceFree.Broadcast()
		t.mu.Unlock()
	})
	defer stop()
	t.mu.Lock()
	defer t.mu.Unlock()
	for t.pendingB > 0 && t.failure == nil && ctx.Err() == nil {
		t.spaceFree.Wait()
	}
}

// pending returns the bytes produced but not yet acknowledged by Kafka.
func (t *ackTracker) pending() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.pendingB
}

// state returns the durable position and the first produce failure.
func (t *ackTracker) state() (record.LSN, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.durable, t.failure
}
