package testenv

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Process is a child process of a benchmark (walhouse or a PostgreSQL tool)
// whose output (stdout and stderr, merged) is watched line by line. Unlike
// Proc it needs no testing.TB: benchmarks are programs, not tests.
type Process struct {
	name    string
	cmd     *exec.Cmd
	started time.Time
	done    chan struct{}
	err     error // set before done is closed

	mu      sync.Mutex
	tail    []string // last lines of output
	match   func(line string) bool
	matched chan struct{}
	matchAt time.Time
}

// ProcessRequest says which process StartProcess runs.
type ProcessRequest struct {
	Name string   // for messages, e.g. "walhouse capture"
	Bin  string   // the executable
	Args []string // its arguments
	// Match, when set, is asked about each output line until it accepts
	// one; Matched is closed then.
	Match func(line string) bool
}

const tailLines = 40

// StartProcess runs the requested process with WALHOUSE_LOG_LEVEL=info.
// When ctx ends, the process gets SIGTERM (and SIGKILL 15s later).
func StartProcess(ctx context.Context, req ProcessRequest) (*Process, error) {
	p := &Process{name: req.Name, done: make(chan struct{}), match: req.Match, matched: make(chan struct{})}
	p.cmd = exec.CommandContext(ctx, req.Bin, req.Args...)
	p.cmd.Env = append(os.Environ(), "WALHOUSE_LOG_LEVEL=info")
	p.cmd.Cancel = func() error { return p.cmd.Process.Signal(syscall.SIGTERM) }
	p.cmd.WaitDelay = 15 * time.Second
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", req.Name, err)
	}
	p.cmd.Stdout, p.cmd.Stderr = w, w
	p.started = time.Now()
	err = p.cmd.Start()
	w.Close() // the child holds its own copy
	if err != nil {
		r.Close()
		return nil, fmt.Errorf("start %s: %w", req.Name, err)
	}
	go p.watch(r)
	return p, nil
}

// watch reads the output until the process closes it, then waits for it.
func (p *Process) watch(r io.ReadCloser) {
	defer r.Close()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		p.line(sc.Text(), time.Now())
	}
	_, _ = io.Copy(io.Discard, r) // after an overlong line, let the process go on writing
	p.err = p.cmd.Wait()
	close(p.done)
}

func (p *Process) line(l string, at time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.tail) == tailLines {
		p.tail = p.tail[1:]
	}
	p.tail = append(p.tail, l)
	if p.match != nil && p.match(l) {
		p.match = nil
		p.matchAt = at
		close(p.matched)
	}
}

// Name returns the name the process was started with.
func (p *Process) Name() string { return p.name }

// Pid returns the process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Started returns when the process was started.
func (p *Process) Started() time.Time { return p.started }

// Done is closed once the process has exited and was waited for.
func (p *Process) Done() <-chan struct{} { return p.done }

// Matched is closed at the first output line the request's Match accepted.
func (p *Process) Matched() <-chan struct{} { return p.matched }

// MatchedAt returns when that line was read (zero before).
func (p *Process) MatchedAt() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.matchAt
}

// Output returns the last lines the process wrote.
func (p *Process) Output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.tail, "\n")
}

// Failed describes an unexpected exit, with the end of the output.
func (p *Process) Failed() error {
	return fmt.Errorf("%s exited early (%v); its last output:\n%s", p.name, p.err, p.Output())
}

// Wait waits for the process to exit by itself.
func (p *Process) Wait(ctx context.Context) error {
	select {
	case <-p.done:
		if p.err != nil {
			return fmt.Errorf("%s: %w; its last output:\n%s", p.name, p.err, p.Output())
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// LogTo writes the end of the output to stderr when verbose is set.
func (p *Process) LogTo(verbose bool) {
	if verbose {
		fmt.Fprintf(os.Stderr, "--- last output of %s ---\n%s\n", p.name, p.Output())
	}
}

// Stop ends the process gracefully (SIGTERM), killing it after timeout.
func (p *Process) Stop(timeout time.Duration) { Terminate(p.cmd.Process, p.done, timeout) }

// CPUSeconds returns the CPU time (user + system) the process used so far.
func (p *Process) CPUSeconds() float64 {
	select {
	case <-p.done:
		return (p.cmd.ProcessState.UserTime() + p.cmd.ProcessState.SystemTime()).Seconds()
	default:
	}
	own, _, _, err := ProcessCPU(p.Pid())
	if err != nil {
		return 0
	}
	return own
}

// PeakRSS returns the process's peak resident set size (VmHWM) in bytes.
// It must be read while the process runs.
func (p *Process) PeakRSS() (int64, error) {
	n, err := PeakRSS(p.Pid())
	if err != nil {
		return 0, fmt.Errorf("%s: %w", p.name, err)
	}
	return n, nil
}
