package capture

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/walhouse/walhouse/record"
)

func TestAckTrackerConfirmsOnlyAcknowledgedPrefix(t *testing.T) {
	tr := newAckTracker(100)
	a := tr.begin()
	mustAdd(t, tr, a)
	mustAdd(t, tr, a)
	tr.commit(a, 200)
	b := tr.begin()
	mustAdd(t, tr, b)
	tr.commit(b, 300)

	check := func(want record.LSN) {
		t.Helper()
		if got, _ := tr.state(); got != want {
			t.Fatalf("durable = %v, want %v", got, want)
		}
	}
	check(100)
	tr.ack(b, 1, nil) // later transaction acknowledged first
	check(100)
	tr.ack(a, 1, nil)
	check(100) // a still has one record in flight
	tr.ack(a, 1, nil)
	check(300)
	tr.idle(250) // never backwards
	check(300)
	tr.idle(400)
	check(400)
}

func TestAckTrackerOpenTransactionBlocksIdle(t *testing.T) {
	tr := newAckTracker(100)
	tx := tr.begin()
	tr.idle(500)
	if got, _ := tr.state(); got != 100 {
		t.Fatalf("idle advanced past an open transaction: %v", got)
	}
	tr.commit(tx, 150) // a transaction with no records
	if got, _ := tr.state(); got != 150 {
		t.Fatalf("durable = %v, want 150", got)
	}
}

func TestAckTrackerFailureStopsAdvancing(t *testing.T) {
	tr := newAckTracker(100)
	a := tr.begin()
	mustAdd(t, tr, a)
	tr.commit(a, 200)
	boom := errors.New("broker said no")
	tr.ack(a, 1, boom)
	got, err := tr.state()
	if got != 100 || !errors.Is(err, boom) {
		t.Fatalf("state = %v, %v; want 100 and the failure", got, err)
	}
	if err := tr.add(tr.begin(), 1, 1<<20); !errors.Is(err, boom) {
		t.Fatalf("add after failure = %v", err)
	}
}

func TestAckTrackerBoundsPendingBytes(t *testing.T) {
	tr := newAckTracker(1)
	tx := tr.begin()
	if err := tr.add(tx, 60, 100); err != nil {
		t.Fatal(err)
	}
	added := make(chan error, 1)
	go func() { added <- tr.add(tx, 60, 100) }()
	select {
	case <-added:
		t.Fatal("add did not wait for space")
	case <-time.After(50 * time.Millisecond):
	}
	tr.ack(tx, 60, nil)
	if err := <-added; err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	tr.waitPending(ctx) // one record still pending: returns at the deadline
	if ctx.Err() == nil {
		t.Fatal("waitPending returned with a record pending")
	}
}

func mustAdd(t *testing.T, tr *ackTracker, tx *txAck) {
	t.Helper()
	if err := tr.add(tx, 1, 1<<20); err != nil {
		t.Fatal(err)
	}
}
