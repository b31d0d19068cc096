package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/google/pprof/profile"
)

// With -profile, capture and sink serve Go's profiling endpoints
// (WALHOUSE_PPROF=1, pipeline.HTTP.Pprof) on a --metrics-addr of their
// own, and every steady step takes a CPU profile of each over the step's
// offered load. The profiles are split into stages (stageRules), which
// shows where a step's CPU goes without opening pprof; the raw profiles
// are written next to the report for `go tool pprof`.

// stageCPU is the CPU seconds one stage of a process took in a profile.
type stageCPU struct {
	Stage   string  `json:"stage"`
	Seconds float64 `json:"seconds"`
}

// processProfile is one process's CPU profile of one step, by stage.
type processProfile struct {
	Process string     `json:"process"`
	Seconds float64    `json:"seconds"` // all samples
	Stages  []stageCPU `json:"stages"`
	File    string     `json:"file,omitempty"` // the raw profile, under -out
}

// stageRule names a stage by the functions that belong to it. A sample
// is charged to the stage of the innermost frame that matches a specific
// rule, else of the innermost frame that matches a package-wide one: an
// allocation counts where it was made, a helper of the decoder as
// decoding, and the payload hash (a record function) inside Layer 2's
// filter as Layer 2.
type stageRule struct {
	stage   string
	funcs   []string // substrings of the fully qualified function name
	pkgWide bool     // a package-wide rule, for frames no specific rule claims
}

// stageRules are the stages of capture and sink, in the order tried.
func stageRules() []stageRule {
	return []stageRule{
		{stage: "layer 2 (dedup)", funcs: []string{"walhouse/sink.(*Sink).filter", "walhouse/sink.(*Sink).remember", "walhouse/dedup.", "walhouse/record.PayloadHash", "redis/go-redis"}},
		{stage: "decode", funcs: []string{"walhouse/record.(*Decoder)", "walhouse/record.Decode", "walhouse/record.(*decoder)"}},
		{stage: "clickhouse insert", funcs: []string{"walhouse/clickhouse.", "ClickHouse/clickhouse-go", "ClickHouse/ch-go", "walhouse/schema."}},
		{stage: "kafka client", funcs: []string{"twmb/franz-go"}},
		{stage: "postgres protocol", funcs: []string{"jackc/pgx", "jackc/pglogrepl"}},
		{stage: "gc", funcs: []string{"runtime.gcBgMarkWorker", "runtime.bgsweep", "runtime.bgscavenge", "runtime.gcAssist"}},
		{stage: "scheduler, syscalls", funcs: []string{"runtime.schedule", "runtime.findRunnable", "runtime.netpoll", "syscall.", "internal/runtime/syscall", "runtime.mcall"}},
		{stage: "encode, eventId", funcs: []string{"walhouse/record."}, pkgWide: true},
		{stage: "capture: translate", funcs: []string{"walhouse/capture."}, pkgWide: true},
		{stage: "sink: loop", funcs: []string{"walhouse/sink."}, pkgWide: true},
	}
}

// stageOf returns the stage of a sample's stack (see stageRule).
func stageOf(rules []stageRule, sample *profile.Sample) string {
	fallback := ""
	for _, loc := range sample.Location { // innermost first
		// Inlined calls come first in a location's lines.
		for _, line := range loc.Line {
			if line.Function == nil {
				continue
			}
			for _, r := range rules {
				if !slices.ContainsFunc(r.funcs, func(f string) bool { return strings.Contains(line.Function.Name, f) }) {
					continue
				}
				if !r.pkgWide {
					return r.stage
				}
				if fallback == "" {
					fallback = r.stage
				}
			}
		}
	}
	if fallback != "" {
		return fallback
	}
	return "other"
}

// byStage splits a CPU profile's samples into stages, most CPU first.
func byStage(p *profile.Profile) (total float64, stages []stageCPU) {
	idx := -1
	for i, st := range p.SampleType {
		if st.Type == "cpu" && st.Unit == "nanoseconds" {
			idx = i
		}
	}
	if idx < 0 {
		return 0, nil
	}
	rules := stageRules()
	sums := map[string]float64{}
	for _, s := range p.Sample {
		sec := float64(s.Value[idx]) / 1e9
		sums[stageOf(rules, s)] += sec
		total += sec
	}
	for name, sec := range sums {
		stages = append(stages, stageCPU{Stage: name, Seconds: sec})
	}
	slices.SortFunc(stages, func(a, b stageCPU) int {
		if a.Seconds != b.Seconds {
			if a.Seconds > b.Seconds {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Stage, b.Stage)
	})
	return total, stages
}

// stageSeconds returns the seconds of stage in pp (0 when absent).
func (pp processProfile) stageSeconds(stage string) float64 {
	for _, s := range pp.Stages {
		if s.Stage == stage {
			return s.Seconds
		}
	}
	return 0
}

// profiler takes CPU profiles of capture and sink over a step.
type profiler struct {
	addrs map[string]string // process name → its --metrics-addr
	dir   string            // where raw profiles go ("" for nowhere)
}

// freeAddr returns a loopback address with a port free right now, for a
// process's --metrics-addr.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("find a free port for a profile endpoint: %w", err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// start takes a profile of each process for d, in the background; wait
// returns them, named after step.
func (pr *profiler) start(ctx context.Context, d time.Duration, step string) (wait func() []processProfile) {
	names := slices.Sorted(maps.Keys(pr.addrs))
	results := make([]chan profileResult, len(names))
	for i, name := range names {
		results[i] = make(chan profileResult, 1)
		go func() {
			pp, err := pr.take(ctx, name, d, step)
			results[i] <- profileResult{pp, err}
		}()
	}
	return func() []processProfile { return collectProfiles(step, names, results) }
}

// profileResult is one process's profile, or why it could not be taken.
type profileResult struct {
	pp  processProfile
	err error
}

// collectProfiles waits for the profile of each of names and returns those
// taken, saying on stderr why the others were not.
func collectProfiles(step string, names []string, results []chan profileResult) []processProfile {
	var out []processProfile
	for i, name := range names {
		r := <-results[i]
		if r.err != nil {
			fmt.Fprintf(os.Stderr, "  profile of %s during %s: %v\n", name, step, r.err)
			continue
		}
		out = append(out, r.pp)
	}
	return out
}

// take fetches one CPU profile of d from the process name.
func (pr *profiler) take(ctx context.Context, name string, d time.Duration, step string) (processProfile, error) {
	raw, err := pr.fetch(ctx, name, d)
	if err != nil {
		return processProfile{Process: name}, err
	}
	p, err := profile.Parse(bytes.NewReader(raw))
	if err != nil {
		return processProfile{Process: name}, fmt.Errorf("parse the profile: %w", err)
	}
	return pr.split(name, step, p)
}

// fetch returns one raw CPU profile of d from the process name.
func (pr *profiler) fetch(ctx context.Context, name string, d time.Duration) ([]byte, error) {
	secs := max(1, int(d.Seconds()))
	ctx, cancel := context.WithTimeout(ctx, d+30*time.Second)
	defer cancel()
	url := fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", pr.addrs[name], secs)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s: %s", url, resp.Status, bytes.TrimSpace(raw))
	}
	return raw, nil
}

// split divides p by stage and writes it under pr.dir.
func (pr *profiler) split(name, step string, p *profile.Profile) (processProfile, error) {
	pp := processProfile{Process: name}
	pp.Seconds, pp.Stages = byStage(p)
	if pr.dir != "" {
		if err := os.MkdirAll(pr.dir, 0o755); err != nil {
			return pp, err
		}
		pp.File = filepath.Join(pr.dir, step+"-"+name+".pprof")
		f, err := os.Create(pp.File)
		if err != nil {
			return pp, err
		}
		if err := p.Write(f); err != nil {
			f.Close()
			return pp, err
		}
		if err := f.Close(); err != nil {
			return pp, err
		}
	}
	return pp, nil
}

// chunks takes profiles of loopChunk from the process name, back to back,
// until done is closed. A failure to connect is retried (the process may
// not serve its endpoint yet); it is returned when no profile was taken.
func (pr *profiler) chunks(ctx context.Context, name string, done <-chan struct{}) ([]*profile.Profile, error) {
	var chunks []*profile.Profile
	var last error
	for {
		raw, err := pr.fetch(ctx, name, loopChunk)
		if err == nil {
			var p *profile.Profile
			if p, err = profile.Parse(bytes.NewReader(raw)); err == nil {
				chunks = append(chunks, p)
			}
		}
		if err != nil {
			last = err
			select {
			case <-time.After(100 * time.Millisecond):
			case <-ctx.Done():
			}
		}
		select {
		case <-done:
			return chunks, last
		case <-ctx.Done():
			return chunks, ctx.Err()
		default:
		}
	}
}

// loopChunk is the length of each profile startLoop takes: the most it
// adds to the phase it profiles, waiting for the last one.
const loopChunk = time.Second

// startLoop profiles each process in chunks of loopChunk, back to back,
// until the returned function is called, which merges each process's
// chunks into one profile (named after step) and returns them: for a phase
// whose length is not known in advance, such as a load.
func (pr *profiler) startLoop(ctx context.Context, step string) (stop func() []processProfile) {
	done := make(chan struct{})
	names := slices.Sorted(maps.Keys(pr.addrs))
	results := make([]chan profileResult, len(names))
	for i, name := range names {
		results[i] = make(chan profileResult, 1)
		go func() {
			chunks, err := pr.chunks(ctx, name, done)
			if len(chunks) == 0 {
				results[i] <- profileResult{err: errors.Join(errors.New("no profile taken"), err)}
				return
			}
			merged, err := profile.Merge(chunks)
			if err != nil {
				results[i] <- profileResult{err: fmt.Errorf("merge %d profiles: %w", len(chunks), err)}
				return
			}
			pp, err := pr.split(name, step, merged)
			results[i] <- profileResult{pp, err}
		}()
	}
	return func() []processProfile {
		close(done)
		return collectProfiles(step, names, results)
	}
}

// layer2Share returns Layer 2's part of the pipeline's CPU in a step with
// a sink profile: the sink's CPU times the part of its profile spent in
// Layer 2, plus Redis, over capture + sink + Kafka + ClickHouse + Redis
// (PostgreSQL and pgbench are the source's work, not the pipeline's).
func (r stepResult) layer2Share() (float64, bool) {
	for _, pp := range r.Profiles {
		if pp.Process != "sink" || pp.Seconds == 0 {
			continue
		}
		sinkLayer2 := cpuOf(r.Usage, "sink") * pp.stageSeconds("layer 2 (dedup)") / pp.Seconds
		var pipeline float64
		for _, name := range []string{"capture", "sink", "kafka", "clickhouse", "redis"} {
			pipeline += cpuOf(r.Usage, name)
		}
		if pipeline == 0 {
			return 0, false
		}
		return (sinkLayer2 + cpuOf(r.Usage, "redis")) / pipeline, true
	}
	return 0, false
}

// printLoadProfiles prints where capture's and the sink's CPU went in each
// walhouse load that has profiles.
func printLoadProfiles(w io.Writer, loads []loadResult) {
	header := false
	for _, l := range loads {
		for _, run := range l.Runs {
			for _, pp := range run.Profiles {
				if !header {
					fmt.Fprintf(w, "\nwhere capture's and the sink's CPU went in the initial loads (CPU profiles over each load; seconds, then share of the process)\n")
					header = true
				}
				fmt.Fprintf(w, "  %-6s %-22s %-7s %5.2f s: %s\n", l.Table, run.Name, pp.Process, pp.Seconds, pp.stageList())
			}
		}
	}
}

// stageList lists pp's stages of at least 0.5% of its samples.
func (pp processProfile) stageList() string {
	parts := make([]string, 0, len(pp.Stages))
	for _, s := range pp.Stages {
		if s.Seconds/pp.Seconds < 0.005 {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %.2f (%.0f%%)", s.Stage, s.Seconds, 100*s.Seconds/pp.Seconds))
	}
	return strings.Join(parts, ", ")
}

// printProfiles prints where capture's and the sink's CPU went in each
// steady step that has profiles.
func printProfiles(w io.Writer, steps []stepResult) {
	header := false
	for _, st := range steps {
		for _, pp := range st.Profiles {
			if !header {
				fmt.Fprintf(w, "\nwhere capture's and the sink's CPU went (CPU profiles over each step's offered load; seconds, then share of the process)\n")
				header = true
			}
			fmt.Fprintf(w, "  %6d rows/s  %-7s %5.2f s: %s\n", st.OfferedRowsPerSecond, pp.Process, pp.Seconds, pp.stageList())
		}
	}
}
