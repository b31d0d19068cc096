package capture

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// fakeCopies stands in for the table copies of onlineSnapshots: each copy
// reports its job and then blocks until released or cancelled.
type fakeCopies struct {
	started chan onlineJob
	release chan error
}

func newFakeOnline(t *testing.T) (*onlineSnapshots, *fakeCopies) {
	t.Helper()
	f := &fakeCopies{started: make(chan onlineJob, 8), release: make(chan error)}
	o := newOnlineSnapshots(nil, "src")
	o.copyFn = func(ctx context.Context, job onlineJob) error {
		f.started <- job
		select {
		case err := <-f.release:
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	go o.run(ctx)
	t.Cleanup(func() { cancel(); <-o.done })
	return o, f
}

func (f *fakeCopies) next(t *testing.T) onlineJob {
	t.Helper()
	select {
	case job := <-f.started:
		return job
	case <-time.After(5 * time.Second):
		t.Fatal("no copy started")
		return onlineJob{}
	}
}

func TestOnlineSnapshotsCopyInOrderAndFinish(t *testing.T) {
	o, f := newFakeOnline(t)
	plan := &snapshotPlan{Table: "public.a"}
	o.add("public.a", 1, plan)
	o.add("public.b", 2, nil)
	o.add("public.a", 3, nil) // already queued: ignored
	if job := f.next(t); job.table != "public.a" || job.plan != plan {
		t.Fatalf("first copy %+v, want public.a with its saved plan", job)
	}
	if !o.copying("public.a") || !o.copying("public.b") {
		t.Fatal("queued tables must count as being copied")
	}
	f.release <- nil
	if job := f.next(t); job.table != "public.b" || job.plan != nil || job.cp != 2 {
		t.Fatalf("second copy %+v, want public.b to plan at 2", job)
	}
	if o.copying("public.a") {
		t.Error("public.a still counts as being copied after its copy finished")
	}
	f.release <- nil
	waitFor(t, func() bool { return !o.copying("public.b") })
	if err := o.failure(); err != nil {
		t.Fatalf("failure() = %v", err)
	}
}

func TestOnlineSnapshotsRestartCopiesAgainWithANewPlan(t *testing.T) {
	o, f := newFakeOnline(t)
	o.add("public.a", 1, &snapshotPlan{Table: "public.a"})
	o.add("public.b", 2, nil)
	f.next(t)
	o.restart("public.b") // not running: nothing to do
	o.restart("public.a") // returns once the running copy stopped
	if job := f.next(t); job.table != "public.a" || job.plan != nil {
		t.Fatalf("after restart: copy %+v, want public.a again, with a new plan", job)
	}
	if !o.copying("public.a") {
		t.Error("a restarted table must still count as being copied")
	}
	f.release <- nil
	if job := f.next(t); job.table != "public.b" {
		t.Fatalf("then copy %+v, want public.b", job)
	}
	f.release <- nil
	waitFor(t, func() bool { return !o.copying("public.a") && !o.copying("public.b") })
}

func TestOnlineSnapshotsFailureStops(t *testing.T) {
	o, f := newFakeOnline(t)
	o.add("public.a", 1, nil)
	o.add("public.b", 1, nil)
	f.next(t)
	boom := errors.New("boom")
	f.release <- boom
	waitFor(t, func() bool { return o.failure() != nil })
	if err := o.failure(); !errors.Is(err, boom) {
		t.Fatalf("failure() = %v, want boom", err)
	}
	select {
	case job := <-f.started:
		t.Fatalf("copy of %s started after a failure", job.table)
	case <-o.done:
	case <-time.After(5 * time.Second):
		t.Fatal("run did not return after a failure")
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestOnlineSnapshotsTableChangedUnderItsCopy: what a user does to a table
// while it is copied never stops the copies: a table found uncapturable is
// handed to the stream to leave out, one with a column gone is copied
// again as it is now, one gone ends its copy; anything else stops them.
func TestOnlineSnapshotsTableChangedUnderItsCopy(t *testing.T) {
	o, f := newFakeOnline(t)
	o.c = &Capturer{log: slog.New(slog.DiscardHandler)}
	o.add("public.nokey", 1, &snapshotPlan{Table: "public.nokey"})
	o.add("public.renamed", 2, &snapshotPlan{Table: "public.renamed"})
	o.add("public.dropped", 3, nil)
	f.next(t)
	f.release <- fmt.Errorf("snapshot: %w", refusal(reasonNoKey, "no key"))
	if job := f.next(t); job.table != "public.renamed" {
		t.Fatalf("second copy %+v, want public.renamed", job)
	}
	f.release <- fmt.Errorf("chunk 3: %w", &pgconn.PgError{Code: pgUndefinedColumn})
	if job := f.next(t); job.table != "public.dropped" {
		t.Fatalf("third copy %+v, want public.dropped", job)
	}
	f.release <- fmt.Errorf("size: %w", &pgconn.PgError{Code: pgUndefinedTable})
	if job := f.next(t); job.table != "public.renamed" || job.plan != nil || job.cp != 2 {
		t.Fatalf("fourth copy %+v, want public.renamed again with a new plan at 2", job)
	}
	refused := o.takeRefused()
	if len(refused) != 1 || !errors.Is(refused["public.nokey"], errUncapturable) {
		t.Errorf("takeRefused() = %v, want public.nokey, uncapturable", refused)
	}
	if o.copying("public.nokey") || o.copying("public.dropped") || !o.copying("public.renamed") {
		t.Error("only public.renamed should still count as being copied")
	}
	if err := o.failure(); err != nil {
		t.Fatalf("failure() = %v", err)
	}
	f.release <- errors.New("kafka is down")
	waitFor(t, func() bool { return o.failure() != nil })
}

// TestOnlineSnapshotsDrop: a table left out loses its queued or running
// copy, so that joining again queues a new one.
func TestOnlineSnapshotsDrop(t *testing.T) {
	o, f := newFakeOnline(t)
	o.add("public.a", 1, &snapshotPlan{Table: "public.a"})
	o.add("public.b", 2, nil)
	f.next(t)
	o.drop("public.b") // queued
	o.drop("public.a") // running: returns once it stopped
	if o.copying("public.a") || o.copying("public.b") {
		t.Fatal("dropped tables still count as being copied")
	}
	o.add("public.a", 5, nil)
	if job := f.next(t); job.table != "public.a" || job.plan != nil || job.cp != 5 {
		t.Fatalf("copy after the drop %+v, want a new one of public.a at 5", job)
	}
	if err := o.failure(); err != nil {
		t.Fatalf("failure() = %v", err)
	}
}

// TestOnlineSnapshotsRewriteReplacesCopies holds a rewrite to what it asks
// of the copies: supersede stops a running copy of the table, which still
// counts as being copied; a rewrite's copy (at its position, rewrite set)
// replaces a queued one in its place, stops a running one and runs next,
// or is queued; a TRUNCATE's restart of a rewrite's copy keeps it one.
func TestOnlineSnapshotsRewriteReplacesCopies(t *testing.T) {
	o, f := newFakeOnline(t)
	o.add("public.a", 1, &snapshotPlan{Table: "public.a"})
	o.add("public.b", 2, nil)
	if job := f.next(t); job.table != "public.a" || job.rewrite {
		t.Fatalf("first copy %+v, want public.a's plain copy", job)
	}
	stopped := o.supersede("public.a")
	if stopped == nil {
		t.Fatal("supersede of the table being copied returned no channel to wait on")
	}
	<-stopped
	if !o.copying("public.a") {
		t.Fatal("a superseded table must still count as being copied")
	}
	if o.supersede("public.c") != nil {
		t.Fatal("supersede of a table not being copied must not wait")
	}
	o.rewrite("public.a", 10, false, "")
	if job := f.next(t); job.table != "public.b" || job.rewrite {
		t.Fatalf("copy %+v, want public.b's plain copy, queued before", job)
	}
	f.release <- nil
	if job := f.next(t); job.table != "public.a" || !job.rewrite || job.cp != 10 || job.plan != nil {
		t.Fatalf("after the rewrite %+v, want public.a's rewrite copy at 10, to plan", job)
	}
	o.rewrite("public.a", 13, true, "") // while its copy runs: that one stops, this one runs next
	if job := f.next(t); job.table != "public.a" || !job.rewrite || job.cp != 13 || !job.waitWriters {
		t.Fatalf("after a second rewrite %+v, want public.a's rewrite copy at 13, waiting for writers", job)
	}
	o.add("public.b", 2, nil)
	o.rewrite("public.b", 11, false, "")
	o.restart("public.a")
	if job := f.next(t); job.table != "public.a" || !job.rewrite || job.cp != 13 || !job.waitWriters {
		t.Fatalf("restarted copy %+v, want public.a's rewrite copy at 13 again, waiting for writers", job)
	}
	f.release <- nil
	if job := f.next(t); job.table != "public.b" || !job.rewrite || job.cp != 11 {
		t.Fatalf("queued copy %+v, want public.b replaced by its rewrite copy at 11", job)
	}
	f.release <- nil
	o.rewrite("public.c", 12, false, "")
	if job := f.next(t); job.table != "public.c" || !job.rewrite || job.cp != 12 || !o.copying("public.c") {
		t.Fatalf("copy %+v, want public.c's rewrite copy at 12, counted as copying", job)
	}
	f.release <- nil
	waitFor(t, func() bool { return !o.copying("public.c") })
}

// TestOnlineSnapshotsRewriteWaitsBehindOthers: a rewrite's copy whose
// table's writers are still open after its turn (a transaction left idle)
// goes to the back of the queue instead of holding up the other tables'
// copies, and waits for the same writers at its next turn.
func TestOnlineSnapshotsRewriteWaitsBehindOthers(t *testing.T) {
	o, f := newFakeOnline(t)
	o.c = &Capturer{log: slog.New(slog.DiscardHandler)}
	o.rewrite("public.a", 10, true, "")
	o.add("public.b", 2, nil)
	if job := f.next(t); job.table != "public.a" || !job.rewrite || job.writers != nil {
		t.Fatalf("first copy %+v, want public.a's rewrite copy, its writers not listed yet", job)
	}
	f.release <- &writersOpenError{table: "public.a", remaining: []string{"3/17"}}
	if job := f.next(t); job.table != "public.b" {
		t.Fatalf("copy %+v, want public.b's, queued behind public.a's, to go first", job)
	}
	f.release <- nil
	job := f.next(t)
	if job.table != "public.a" || !job.rewrite || job.cp != 10 || !job.waitWriters || len(job.writers) != 1 || job.writers[0] != "3/17" {
		t.Fatalf("copy %+v, want public.a's rewrite copy at 10 again, waiting for transaction 3/17 only", job)
	}
	if !o.copying("public.a") || o.copying("public.b") {
		t.Error("public.a must still count as being copied, public.b no longer")
	}
	if err := o.failure(); err != nil {
		t.Fatalf("failure() = %v, want none: open writers are no failure", err)
	}
	f.release <- nil
	waitFor(t, func() bool { return !o.copying("public.a") })
}

// TestOnlineSnapshotsSupersedeHoldsQueuedCopy: between supersede and the
// rewrite's copy being queued (the stream saves the pending plan
// meanwhile), a copy of the table that was queued does not start: it
// would save its own plan over the pending one.
func TestOnlineSnapshotsSupersedeHoldsQueuedCopy(t *testing.T) {
	o, f := newFakeOnline(t)
	o.add("public.b", 2, &snapshotPlan{Table: "public.b"})
	o.add("public.a", 1, &snapshotPlan{Table: "public.a"})
	if job := f.next(t); job.table != "public.b" {
		t.Fatalf("first copy %+v, want public.b", job)
	}
	if o.supersede("public.a") != nil {
		t.Fatal("supersede of a table whose copy is only queued must not wait")
	}
	f.release <- nil // public.b done: public.a's queued copy must not start now
	waitFor(t, func() bool { return !o.copying("public.b") })
	if !o.copying("public.a") {
		t.Fatal("a superseded table must still count as being copied")
	}
	o.rewrite("public.a", 10, false, "")
	if job := f.next(t); job.table != "public.a" || !job.rewrite || job.cp != 10 || job.plan != nil {
		t.Fatalf("copy %+v, want public.a's rewrite copy at 10 only", job)
	}
	f.release <- nil
	waitFor(t, func() bool { return !o.copying("public.a") })
	select {
	case job := <-f.started:
		t.Fatalf("unexpected copy %+v after the rewrite's", job)
	default:
	}
}
