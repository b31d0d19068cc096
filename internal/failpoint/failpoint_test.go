package failpoint

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		spec    string
		wantErr string // "" for a valid specification
	}{
		{spec: ""},
		{spec: "  "},
		{spec: "sink.loaded=crash"},
		{spec: "capture.produced=crash@500, sink.inserted=error:3"},
		{spec: "sink.inserted=error"},
		{spec: "sink.inserted=crash@2"},
		{spec: "sink.loaded", wantErr: "want name=action"},
		{spec: "sink.nowhere=crash", wantErr: "unknown point"},
		{spec: "sink.loaded=crash,sink.loaded=crash@2", wantErr: "given twice"},
		{spec: "sink.loaded=error:1", wantErr: "a crash point takes crash, crash@N or pause:D"},
		{spec: "relayout.copied=pause:2s"},
		{spec: "sink.inserted=pause:10ms"},
		{spec: "relayout.copied=pause:0s", wantErr: "positive duration"},
		{spec: "relayout.copied=pause:soon", wantErr: "positive duration"},
		{spec: "sink.loaded=crash@0", wantErr: "positive integer"},
		{spec: "sink.inserted=error:x", wantErr: "positive integer"},
		{spec: "sink.inserted=explode", wantErr: "want crash, crash@N, pause:D, error or error:N"},
		// Every problem at once.
		{spec: "a=crash,sink.loaded=boom", wantErr: "unknown point"},
	} {
		s, err := Parse(tc.spec)
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("Parse(%q): %v", tc.spec, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("Parse(%q) = %v, want an error with %q", tc.spec, err, tc.wantErr)
		case strings.TrimSpace(tc.spec) == "" && s != nil:
			t.Errorf("Parse(%q) = %v, want nil (every point off)", tc.spec, s)
		}
	}
	if _, err := Parse("a=crash,sink.loaded=boom"); err == nil || !strings.Contains(err.Error(), "sink.loaded") {
		t.Errorf("Parse reports only the first problem: %v", err)
	}
}

// run hits name n times on the Set of spec and returns the hit at which
// the process would have exited (0: none) and the errors returned.
func run(t *testing.T, spec string, name Name, n int) (exitedAt int, errs []error, log string) {
	t.Helper()
	s, err := Parse(spec)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	hit := 0
	if s != nil {
		s.log = &buf
		s.exit = func(code int) {
			if code != CrashStatus {
				t.Errorf("exit status %d, want %d", code, CrashStatus)
			}
			if exitedAt == 0 {
				exitedAt = hit
			}
		}
	}
	for hit = 1; hit <= n; hit++ {
		errs = append(errs, s.Err(name))
	}
	return exitedAt, errs, buf.String()
}

func TestHits(t *testing.T) {
	for _, tc := range []struct {
		spec     string
		name     Name
		exitedAt int
		failed   []int // hits that return ErrInjected
	}{
		{spec: "", name: SinkLoaded},
		{spec: "sink.loaded=crash", name: SinkLoaded, exitedAt: 1},
		{spec: "sink.loaded=crash@3", name: SinkLoaded, exitedAt: 3},
		{spec: "sink.loaded=crash@3", name: SinkClaimed},
		{spec: "sink.inserted=error:2", name: SinkInserted, failed: []int{1, 2}},
		{spec: "sink.inserted=error", name: SinkInserted, failed: []int{1, 2, 3, 4, 5}},
		{spec: "sink.inserted=crash@4", name: SinkInserted, exitedAt: 4},
	} {
		exitedAt, errs, log := run(t, tc.spec, tc.name, 5)
		if exitedAt != tc.exitedAt {
			t.Errorf("%s, %s: exited at hit %d, want %d", tc.spec, tc.name, exitedAt, tc.exitedAt)
		}
		if exitedAt > 0 && !strings.Contains(log, "crashing at "+string(tc.name)) {
			t.Errorf("%s: the crash logged %q, want it to name the point", tc.spec, log)
		}
		var failed []int
		for i, err := range errs {
			if err != nil {
				if !errors.Is(err, ErrInjected) || !strings.Contains(err.Error(), string(tc.name)) {
					t.Errorf("%s: hit %d: %v, want ErrInjected naming the point", tc.spec, i+1, err)
				}
				failed = append(failed, i+1)
			}
		}
		if len(failed) != len(tc.failed) || (len(failed) > 0 && failed[len(failed)-1] != tc.failed[len(tc.failed)-1]) {
			t.Errorf("%s: failed hits %v, want %v", tc.spec, failed, tc.failed)
		}
	}
}

// The nil Set, what production runs with, does nothing at any point.
func TestNilSetIsOff(t *testing.T) {
	var s *Set
	for _, n := range Names() {
		s.At(n)
		if err := s.Err(n); err != nil {
			t.Errorf("nil Set: Err(%s) = %v", n, err)
		}
	}
}

// Off costs a nil check: no allocation.
func BenchmarkOff(b *testing.B) {
	var s *Set
	for b.Loop() {
		s.At(SinkLoaded)
	}
}

func TestPauseHoldsAndPasses(t *testing.T) {
	exitedAt, errs, log := run(t, "sink.inserted=pause:1ms", SinkInserted, 2)
	if exitedAt != 0 || errs[0] != nil || errs[1] != nil {
		t.Errorf("a pause point exited at hit %d or failed: %v", exitedAt, errs)
	}
	if strings.Count(log, "pausing 1ms at sink.inserted") != 2 {
		t.Errorf("log %q: want a pause per hit", log)
	}
}
