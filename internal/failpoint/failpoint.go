package failpoint

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Name is a point of capture or the sink where a fault can be injected.
type Name string

// The named points. Each says where it is and what a crash there leaves
// behind, which is what the fault tests prove walhouse recovers from.
const (
	// CaptureProduced is hit when Kafka acknowledged a row change and
	// before the slot is confirmed past it: a crash there makes capture
	// re-publish the unconfirmed tail from an older LSN.
	CaptureProduced Name = "capture.produced"
	// CaptureCopied is hit mid-copy, when a chunk of a table's copy is in
	// Kafka and before the chunk is recorded as done: a crash there copies
	// the chunk again.
	CaptureCopied Name = "capture.copied"
	// CaptureRewriteCopied is hit when the copy after a DDL rewrite is in
	// Kafka and before its done markers are sent: a crash there leaves
	// the plan complete with the sweep due, and the next start sends them.
	CaptureRewriteCopied Name = "capture.rewrite_copied"
	// SinkDeduped is hit after the Layer 2 lookup of a batch and before its
	// insert: the eventIds are known new, nothing is loaded or claimed.
	SinkDeduped Name = "sink.deduped"
	// SinkInserted is an error point: the insert of a batch succeeded and
	// its answer is lost, so the sink retries the same insert (same
	// deduplication token).
	SinkInserted Name = "sink.inserted"
	// SinkReadBack is an error point: the ClickHouse writer's read-back
	// of unchanged TOAST values sends a query ClickHouse refuses (a
	// parameter it cannot parse), as it would refuse a query walhouse
	// builds wrong; the records that needed it are dead-lettered and the
	// rest of the insert loads.
	SinkReadBack Name = "sink.readback"
	// SinkClaimed is hit after the loaded eventIds were claimed in Layer 2
	// and before the offsets are committed.
	SinkClaimed Name = "sink.claimed"
	// SinkLoaded is hit after every chunk of a flush was inserted (and
	// claimed) and before the offset commit.
	SinkLoaded Name = "sink.loaded"
	// SinkRevoked is hit during a rebalance, when partitions are taken
	// from the sink (or lost) and before it forgets them.
	SinkRevoked Name = "sink.revoked"
	// SinkTruncating and SinkTruncated are hit before and after the sink
	// applies a TRUNCATE marker.
	SinkTruncating Name = "sink.truncating"
	SinkTruncated  Name = "sink.truncated"
	// RelayoutCopied is hit when a relayout's new table holds the old
	// one's rows and the view forwards the inserts into the old one to
	// it, before the swap: a crash there leaves the old table in place,
	// the view and the new table, which the next relayout drops.
	RelayoutCopied Name = "relayout.copied"
	// RelayoutSwapped is hit right after a relayout's swap, before the
	// view is dropped: a crash there leaves the new table in place and the
	// old one under its building name, which the next relayout finishes.
	RelayoutSwapped Name = "relayout.swapped"
)

// canFail reports whether n is an error point, called through Err.
func canFail(n Name) bool { return n == SinkInserted || n == SinkReadBack }

// Names returns every point, crash points first, in a stable order.
func Names() []Name {
	return []Name{CaptureProduced, CaptureCopied, CaptureRewriteCopied, SinkDeduped, SinkClaimed, SinkLoaded, SinkRevoked, SinkTruncating, SinkTruncated, SinkInserted, SinkReadBack, RelayoutCopied, RelayoutSwapped}
}

// ErrInjected is the error an error point returns when told to fail.
var ErrInjected = errors.New("failpoint: injected failure")

// CrashStatus is the exit status of a crash, the one a shell reports for a
// process killed by SIGKILL.
const CrashStatus = 137

// action is what one point does.
type action struct {
	crash bool
	at    int           // crash: the hit that crashes (1-based); error: failures left, -1 for always
	pause time.Duration // pause: how long every hit is held

	mu   sync.Mutex
	hits int
}

// Set is the points a process was told to trigger. The nil *Set turns every
// point off. A Set is safe for concurrent use.
type Set struct {
	points map[Name]*action
	// exit ends the process; os.Exit unless a test replaces it.
	exit func(code int)
	log  io.Writer
}

// Parse parses a specification (see the package documentation). An empty
// one returns nil: every point off. Every problem is reported at once.
func Parse(spec string) (*Set, error) {
	spec = strings.TrimSpace(spec)
	if spec == "" {
		return nil, nil
	}
	s := &Set{points: map[Name]*action{}, exit: os.Exit, log: os.Stderr}
	var errs []error
	for _, item := range strings.Split(spec, ",") {
		name, act, ok := strings.Cut(strings.TrimSpace(item), "=")
		n := Name(name)
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("failpoint %q: want name=action", item))
			continue
		case !slices.Contains(Names(), n):
			errs = append(errs, fmt.Errorf("failpoint %q: unknown point; known: %v", name, Names()))
			continue
		case s.points[n] != nil:
			errs = append(errs, fmt.Errorf("failpoint %q: given twice", name))
			continue
		}
		a, err := parseAction(act, canFail(n))
		if err != nil {
			errs = append(errs, fmt.Errorf("failpoint %s: %w", name, err))
			continue
		}
		s.points[n] = a
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return s, nil
}

// parseAction parses crash, crash@N, pause:D, error or error:N; errors
// only where the point can fail.
func parseAction(s string, canFail bool) (*action, error) {
	count := func(v string) (int, error) {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return 0, fmt.Errorf("action %q: the count must be a positive integer", s)
		}
		return n, nil
	}
	switch verb, arg, _ := strings.Cut(s, "@"); {
	case verb == "crash" && arg == "":
		return &action{crash: true, at: 1}, nil
	case verb == "crash":
		n, err := count(arg)
		return &action{crash: true, at: n}, err
	}
	if d, ok := strings.CutPrefix(s, "pause:"); ok {
		p, err := time.ParseDuration(d)
		if err != nil || p <= 0 {
			return nil, fmt.Errorf("action %q: the pause must be a positive duration, e.g. pause:3s", s)
		}
		return &action{pause: p}, nil
	}
	if !canFail {
		return nil, fmt.Errorf("action %q: a crash point takes crash, crash@N or pause:D", s)
	}
	switch verb, arg, hasArg := strings.Cut(s, ":"); {
	case verb == "error" && !hasArg:
		return &action{at: -1}, nil
	case verb == "error":
		n, err := count(arg)
		return &action{at: n}, err
	}
	return nil, fmt.Errorf("action %q: want crash, crash@N, pause:D, error or error:N", s)
}

// At is a crash point: it ends the process when name is set to crash at
// this hit. Otherwise, and always on a nil Set, it returns at once.
func (s *Set) At(name Name) {
	if s == nil {
		return
	}
	s.hit(name)
}

// Err is an error point: it returns ErrInjected (naming the point) while
// name is set to fail, ends the process when it is set to crash at this
// hit, and returns nil otherwise, always on a nil Set.
func (s *Set) Err(name Name) error {
	if s == nil {
		return nil
	}
	return s.hit(name)
}

func (s *Set) hit(name Name) error {
	a := s.points[name]
	if a == nil {
		return nil
	}
	if a.pause > 0 {
		fmt.Fprintf(s.log, "walhouse: pausing %v at %s (WALHOUSE_FAILPOINTS)\n", a.pause, name)
		time.Sleep(a.pause)
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.hits++
	switch {
	case a.crash && a.hits == a.at:
		fmt.Fprintf(s.log, "walhouse: crashing at %s (hit %d, WALHOUSE_FAILPOINTS)\n", name, a.hits)
		s.exit(CrashStatus)
	case a.crash:
	case a.at != 0:
		if a.at > 0 {
			a.at--
		}
		return fmt.Errorf("%w at %s (hit %d)", ErrInjected, name, a.hits)
	}
	return nil
}
