package main

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

	"github.com/walhouse/walhouse/internal/testenv"
)

// process is a child process (walhouse or a PostgreSQL tool) whose stderr is
// watched line by line.
type process struct {
	name    string
	cmd     *exec.Cmd
	started time.Time
	done    chan struct{}
	err     error // set before done is closed

	mu       sync.Mutex
	tail     []string // last lines of output
	match    func(line string) bool
	matched  chan struct{}
	matchAt  time.Time
	matchMsg string
}

const tailLines = 40

// startProcess runs bin with args. When match is not nil, matched is closed
// at the first output line it accepts.
func startProcess(ctx context.Context, name, bin string, args []string, match func(string) bool) (*process, error) {
	p := &process{name: name, done: make(chan struct{}), match: match, matched: make(chan struct{})}
	p.cmd = exec.CommandContext(ctx, bin, args...)
	p.cmd.Env = append(os.Environ(), "WALHOUSE_LOG_LEVEL=info")
	p.cmd.Cancel = func() error { return p.cmd.Process.Signal(syscall.SIGTERM) }
	p.cmd.WaitDelay = 15 * time.Second
	out, err := p.cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	p.cmd.Stdout = nil // /dev/null
	p.started = time.Now()
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go p.watch(out)
	return p, nil
}

// watch reads the output until the process closes it, then waits for it.
func (p *process) watch(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		p.line(sc.Text(), time.Now())
	}
	p.err = p.cmd.Wait()
	close(p.done)
}

func (p *process) line(l string, at time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.tail) == tailLines {
		p.tail = p.tail[1:]
	}
	p.tail = append(p.tail, l)
	if p.match != nil && p.match(l) {
		p.match = nil
		p.matchAt, p.matchMsg = at, l
		close(p.matched)
	}
}

// output returns the last lines the process wrote.
func (p *process) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.tail, "\n")
}

// failed describes an unexpected exit, with the end of the output.
func (p *process) failed() error {
	return fmt.Errorf("%s exited early (%v); its last output:\n%s", p.name, p.err, p.output())
}

// wait waits for the process to exit by itself.
func (p *process) wait(ctx context.Context) error {
	select {
	case <-p.done:
		if p.err != nil {
			return fmt.Errorf("%s: %w; its last output:\n%s", p.name, p.err, p.output())
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// logTo writes the end of the output to stderr when verbose is set.
func (p *process) logTo(verbose bool) {
	if verbose {
		fmt.Fprintf(os.Stderr, "--- last output of %s ---\n%s\n", p.name, p.output())
	}
}

// stop ends the process gracefully (SIGTERM), killing it after timeout.
func (p *process) stop(timeout time.Duration) { testenv.Terminate(p.cmd.Process, p.done, timeout) }

// cpuSeconds returns the CPU time (user + system) the process used so far.
func (p *process) cpuSeconds() float64 {
	select {
	case <-p.done:
		return (p.cmd.ProcessState.UserTime() + p.cmd.ProcessState.SystemTime()).Seconds()
	default:
	}
	own, _, _, err := procCPU(p.cmd.Process.Pid)
	if err != nil {
		return 0
	}
	return own
}

// peakRSS returns the process's peak resident set size (VmHWM) in bytes.
// It must be read while the process runs.
func (p *process) peakRSS() (int64, error) {
	n, err := testenv.PeakRSS(p.cmd.Process.Pid)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", p.name, err)
	}
	return n, nil
}
