package testenv

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// BuildBinary builds cmd/walhouse into dir and returns its path.
func BuildBinary(ctx context.Context, dir string) (string, error) {
	root, err := repoRoot()
	if err != nil {
		return "", fmt.Errorf("find the repository root: %w", err)
	}
	out := filepath.Join(dir, "walhouse")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "./cmd/walhouse")
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/walhouse: %w\n%s", err, b)
	}
	return out, nil
}

// Proc is a walhouse subprocess started by a test.
type Proc struct {
	Name string
	cmd  *exec.Cmd
	out  *SyncBuffer
	done chan struct{}
	err  error
}

// SyncBuffer is an output (a process's, a logger's) that a test reads
// while it is being written.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns everything written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Start runs bin with args. Its output is kept and logged if the test
// fails; it is stopped (SIGTERM, then SIGKILL) when the test ends.
func Start(t testing.TB, name, bin string, args ...string) *Proc {
	t.Helper()
	p := &Proc{Name: name, out: &SyncBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Stdout = p.out
	p.cmd.Stderr = p.out
	p.cmd.Env = append(os.Environ(), "WALHOUSE_LOG_LEVEL=debug")
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.Stop()
		if t.Failed() {
			t.Logf("output of %s:\n%s", name, p.Output())
		}
	})
	return p
}

// Output returns what the process printed so far.
func (p *Proc) Output() string { return p.out.String() }

// Exited reports whether the process has ended, and its error.
func (p *Proc) Exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// Wait waits for the process to end by itself.
func (p *Proc) Wait(timeout time.Duration) error {
	select {
	case <-p.done:
		return p.err
	case <-time.After(timeout):
		return fmt.Errorf("%s did not exit within %v", p.Name, timeout)
	}
}

// Stop ends the process gracefully (SIGTERM), killing it after 15s.
func (p *Proc) Stop() { Terminate(p.cmd.Process, p.done, 15*time.Second) }

// Terminate ends a process gracefully: SIGTERM, then SIGKILL when it has
// not ended after grace. done is closed once the process was waited for;
// Terminate returns after that.
func Terminate(proc *os.Process, done <-chan struct{}, grace time.Duration) {
	select {
	case <-done:
		return
	default:
	}
	_ = proc.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(grace):
		_ = proc.Kill()
		<-done
	}
}

// PeakRSS returns the most resident memory the running process has used
// so far (VmHWM, Linux only), for tests that bound memory.
func (p *Proc) PeakRSS() (int64, error) {
	n, err := PeakRSS(p.cmd.Process.Pid)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", p.Name, err)
	}
	return n, nil
}

// RSS returns the resident memory of the running process now, in bytes
// (VmRSS, Linux only), for tests that sample memory over a phase.
func (p *Proc) RSS() (int64, error) {
	n, err := RSS(p.cmd.Process.Pid)
	if err != nil {
		return 0, fmt.Errorf("%s: read the resident memory: %w", p.Name, err)
	}
	return n, nil
}

// Signal sends sig to the process, as an operator or a supervisor would.
func (p *Proc) Signal(sig os.Signal) error { return p.cmd.Process.Signal(sig) }

// Kill ends the process with SIGKILL, as a crash would, and waits for it.
func (p *Proc) Kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}
