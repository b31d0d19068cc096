package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/walhouse/walhouse/harness/testenv"
)

// The engine's side of a walhouse load. libchdb is stripped, and the
// embedded engine keeps no query_log, so its CPU is split two ways: by
// shared object with perf (-perf), which tells the HTTP front (Go, the
// walhouse binary) from the engine (libchdb.so) and the kernel; and by the
// engine's own counters (system.events, global to the process), whose
// differences over the load say how long inserts, the sorting and merging
// of each inserted block, and background merges took. The engine process is
// shared: whatever else uses it in the meantime is counted too.

// engineEvents are the system.events counters whose differences a load
// reports.
var engineEvents = []string{
	"InsertQuery", "InsertedRows", "InsertQueryTimeMicroseconds",
	"SelectQuery", "SelectQueryTimeMicroseconds", "SelectedRows", "SelectedParts",
	"MergeTreeDataWriterBlocks", "MergeTreeDataWriterSortingBlocksMicroseconds", "MergeTreeDataWriterMergingBlocksMicroseconds",
	"Merge", "MergedRows", "MergeExecuteMilliseconds",
	"UserTimeMicroseconds", "SystemTimeMicroseconds",
}

// engineProfile is the engine process's side of one load.
type engineProfile struct {
	// CPUSeconds is the engine process's CPU over the load.
	CPUSeconds float64 `json:"cpu_seconds"`
	// Events are the differences of engineEvents over the load.
	Events map[string]int64 `json:"events"`
	// Objects are its CPU seconds by shared object (perf's share of its
	// samples times CPUSeconds), most first; empty without -perf.
	Objects []stageCPU `json:"objects,omitempty"`
	File    string     `json:"file,omitempty"` // perf's data, under -out
}

// engineRecorder follows the engine during one load.
type engineRecorder struct {
	b      *bench
	cpu0   float64
	events map[string]int64
	perf   *exec.Cmd
	file   string
}

// startEngineProfile reads the engine's counters and, with -perf, starts
// perf on its process. step names perf's file.
func (b *bench) startEngineProfile(ctx context.Context, step string) *engineRecorder {
	r := &engineRecorder{b: b, cpu0: testenv.ServiceCPU(b.o.localDir, testenv.ClickHouse)}
	var err error
	if r.events, err = b.engineEvents(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "  the engine's counters: %v\n", err)
	}
	if b.o.perf == "" {
		return r
	}
	pid, err := testenv.ServicePID(b.o.localDir, testenv.ClickHouse)
	if err != nil {
		fmt.Fprintf(os.Stderr, "  perf of the engine: %v\n", err)
		return r
	}
	dir := b.tmp
	if b.o.out != "" {
		dir = filepath.Join(b.o.out, b.o.name+"-profiles")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			fmt.Fprintf(os.Stderr, "  perf of the engine: %v\n", err)
			return r
		}
	}
	r.file = filepath.Join(dir, step+"-clickhouse.perf.data")
	// perf stops at SIGINT (finish), not at ctx's end: it must write its file.
	r.perf = exec.Command(b.o.perf, "record", "-q", "-F", "499", "-p", strconv.Itoa(pid), "-o", r.file) //nolint:gosec // the -perf flag
	r.perf.Stdout, r.perf.Stderr = io.Discard, io.Discard
	if err := r.perf.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "  perf of the engine: %v\n", err)
		r.perf = nil
	}
	return r
}

// finish stops perf and returns the engine's side of the load.
func (r *engineRecorder) finish(ctx context.Context) *engineProfile {
	ep := &engineProfile{CPUSeconds: testenv.ServiceCPU(r.b.o.localDir, testenv.ClickHouse) - r.cpu0}
	if after, err := r.b.engineEvents(ctx); err == nil && r.events != nil {
		ep.Events = map[string]int64{}
		for _, e := range engineEvents {
			ep.Events[e] = after[e] - r.events[e]
		}
	}
	if r.perf == nil {
		return ep
	}
	_ = r.perf.Process.Signal(os.Interrupt)
	waited := make(chan error, 1)
	go func() { waited <- r.perf.Wait() }()
	select {
	case <-waited:
	case <-time.After(30 * time.Second):
		_ = r.perf.Process.Kill()
		<-waited
	}
	shares, err := perfShares(ctx, r.b.o.perf, r.file)
	if err != nil {
		fmt.Fprintf(os.Stderr, "  perf report of the engine: %v\n", err)
		return ep
	}
	for _, s := range shares {
		ep.Objects = append(ep.Objects, stageCPU{Stage: s.Stage, Seconds: s.Seconds * ep.CPUSeconds})
	}
	if r.b.o.out != "" {
		ep.File = r.file
	}
	return ep
}

// engineEvents reads system.events.
func (b *bench) engineEvents(ctx context.Context) (map[string]int64, error) {
	rows, err := b.ch.Query(ctx, "SELECT event, toInt64(value) FROM system.events")
	if err != nil {
		return nil, fmt.Errorf("read system.events: %w", err)
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var name string
		var v int64
		if err := rows.Scan(&name, &v); err != nil {
			return nil, err
		}
		out[name] = v
	}
	return out, rows.Err()
}

// perfLineRE is one line of `perf report --sort dso`: a share and a name.
var perfLineRE = regexp.MustCompile(`^\s*([0-9.]+)%\s+(\S.*?)\s*$`)

// perfShares returns each shared object's fraction of perf's samples in
// file, most first.
func perfShares(ctx context.Context, perf, file string) ([]stageCPU, error) {
	out, err := exec.CommandContext(ctx, perf, "report", "-i", file, "--stdio", "--no-children", "--sort", "dso", "-q", "-g", "none").Output() //nolint:gosec // the -perf flag
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			err = fmt.Errorf("%w: %s", err, strings.TrimSpace(string(ee.Stderr)))
		}
		return nil, err
	}
	return parsePerfShares(string(out)), nil
}

// parsePerfShares reads `perf report --sort dso -q` output.
func parsePerfShares(out string) []stageCPU {
	var shares []stageCPU
	for _, line := range strings.Split(out, "\n") {
		m := perfLineRE.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		pct, err := strconv.ParseFloat(m[1], 64)
		if err != nil {
			continue
		}
		name := m[2]
		if name == filepath.Base(name) && strings.HasPrefix(name, "walhouse") {
			name = "walhouse (HTTP front, Go)"
		}
		shares = append(shares, stageCPU{Stage: name, Seconds: pct / 100})
	}
	return shares
}

// print writes the engine's side of a load on one line each.
func (ep *engineProfile) print(w io.Writer, label string) {
	if ep == nil {
		return
	}
	fmt.Fprintf(w, "  %s: engine process %.2f CPU s", label, ep.CPUSeconds)
	if len(ep.Objects) > 0 {
		parts := make([]string, 0, len(ep.Objects))
		for _, o := range ep.Objects {
			if ep.CPUSeconds > 0 && o.Seconds/ep.CPUSeconds < 0.005 {
				continue
			}
			parts = append(parts, fmt.Sprintf("%s %.2f", o.Stage, o.Seconds))
		}
		fmt.Fprintf(w, " (perf: %s)", strings.Join(parts, ", "))
	}
	fmt.Fprintln(w)
	if e := ep.Events; e != nil {
		fmt.Fprintf(w, "    engine counters: %d inserts of %d rows in %.2f s (sorting blocks %.2f s, merging blocks %.2f s; %d parts written); %d selects in %.2f s reading %d rows of %d parts; %d merges of %d rows in %.2f s; query threads' CPU %.2f s user + %.2f s system\n",
			e["InsertQuery"], e["InsertedRows"], float64(e["InsertQueryTimeMicroseconds"])/1e6,
			float64(e["MergeTreeDataWriterSortingBlocksMicroseconds"])/1e6, float64(e["MergeTreeDataWriterMergingBlocksMicroseconds"])/1e6, e["MergeTreeDataWriterBlocks"],
			e["SelectQuery"], float64(e["SelectQueryTimeMicroseconds"])/1e6, e["SelectedRows"], e["SelectedParts"],
			e["Merge"], e["MergedRows"], float64(e["MergeExecuteMilliseconds"])/1e3,
			float64(e["UserTimeMicroseconds"])/1e6, float64(e["SystemTimeMicroseconds"])/1e6)
	}
}
