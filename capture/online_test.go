package capture

import (
	"context"
	"errors"
	"testing"
	"time"
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
