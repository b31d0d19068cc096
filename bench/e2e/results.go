package main

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
)

// report is everything one run measured, as written to the JSON file.
type report struct {
	Command           string `json:"command"`
	Started           string `json:"started"`
	Quick             bool   `json:"quick"`
	CPUs              int    `json:"cpus"`
	GoVersion         string `json:"go_version"`
	LoadAverageBefore string `json:"load_average_before"`
	LoadAverageAfter  string `json:"load_average_after"`
	// BrokerTopics and BrokerPartitions are what the Kafka brokers held
	// when the run started: thousands of them (tests' leftovers) cost the
	// broker CPU of its own, counted in its column.
	BrokerTopics     int          `json:"broker_topics"`
	BrokerPartitions int          `json:"broker_partitions"`
	Loads            []loadResult `json:"loads"`
	Steady           []stepResult `json:"steady"`
	FirstRows        []firstRow   `json:"first_rows"`
	Summary          summary      `json:"summary"`
}

// summary holds the figures the targets are about.
type summary struct {
	// LoadRatio is walhouse's initial load rows/s over the engine's pull,
	// per table (target ≥ 0.8).
	LoadRatio map[string]float64 `json:"load_ratio"`
	// MaterializedRatio and MaterializedCPURatio are walhouse's initial
	// load rows/s and CPU seconds over MaterializedPostgreSQL's, per table
	// it loaded (targets ≥ 1 and ≤ 2).
	MaterializedRatio    map[string]float64 `json:"load_ratio_to_materialized,omitempty"`
	MaterializedCPURatio map[string]float64 `json:"load_cpu_ratio_to_materialized,omitempty"`
	// MaxRateP99UnderOneSecond is the highest offered rows/s whose step
	// drained with p99 ≤ 1 s (0: none).
	MaxRateP99UnderOneSecond int `json:"max_rate_p99_under_1s"`
	// MaxRateTokenP99UnderOneSecond is the highest offered rows/s whose
	// step drained with a token wait p99 ≤ 1 s and no stale token read
	// (0: none).
	MaxRateTokenP99UnderOneSecond int `json:"max_rate_token_p99_under_1s"`
	// FirstRowSeconds is the slowest first row of an added table.
	FirstRowSeconds float64 `json:"first_row_seconds"`
	// RedisShare is Redis's CPU over the whole load's CPU (every process),
	// narrow table, Layer 2 on.
	RedisShare float64 `json:"redis_cpu_share"`
	// Layer2Share is (CPU with Layer 2 − CPU without) over CPU with, all
	// processes, narrow table; negative when noise exceeds the cost.
	Layer2Share float64 `json:"layer2_cpu_share"`
	// StreamedLayer2Share is, per steady step with profiles, Layer 2's
	// part of the pipeline's CPU for streamed changes (see layer2Share).
	StreamedLayer2Share map[string]float64 `json:"streamed_layer2_cpu_share,omitempty"`
}

func (r *report) summarize() {
	s := summary{LoadRatio: map[string]float64{}}
	for _, l := range r.Loads {
		s.LoadRatio[l.Table] = l.Ratio
		if l.MaterializedRatio > 0 {
			if s.MaterializedRatio == nil {
				s.MaterializedRatio, s.MaterializedCPURatio = map[string]float64{}, map[string]float64{}
			}
			s.MaterializedRatio[l.Table], s.MaterializedCPURatio[l.Table] = l.MaterializedRatio, l.MaterializedCPURatio
		}
		if l.Table != "narrow" {
			continue
		}
		wh, _ := l.run(runWalhouse)
		on := totalCPU(wh.Usage)
		if on > 0 {
			s.RedisShare = cpuOf(wh.Usage, "redis") / on
		}
		if off, ok := l.run(runNoLayer2); ok && on > 0 {
			s.Layer2Share = (on - totalCPU(off.Usage)) / on
		}
	}
	for _, st := range r.Steady {
		if share, ok := st.layer2Share(); ok {
			if s.StreamedLayer2Share == nil {
				s.StreamedLayer2Share = map[string]float64{}
			}
			s.StreamedLayer2Share[strconv.Itoa(st.OfferedRowsPerSecond)] = share
		}
		if st.Drained && st.P99 <= 1 {
			s.MaxRateP99UnderOneSecond = max(s.MaxRateP99UnderOneSecond, st.OfferedRowsPerSecond)
		}
		if st.Drained && st.TokenReads > 0 && st.TokenStale == 0 && st.TokenFailed == 0 && st.TokenWaitP99 <= 1 {
			s.MaxRateTokenP99UnderOneSecond = max(s.MaxRateTokenP99UnderOneSecond, st.OfferedRowsPerSecond)
		}
	}
	for _, f := range r.FirstRows {
		s.FirstRowSeconds = max(s.FirstRowSeconds, f.VisibleAfter)
	}
	r.Summary = s
}

// processOrder is the order of the usage columns.
func processOrder() []string {
	return []string{"capture", "sink", "pgbench", "postgres", "kafka", "clickhouse", "redis"}
}

func usageHeader() string { return strings.Join(processOrder(), "\t") + "\t" }

// usageCPU returns u's CPU seconds in processOrder, tab-separated ("-" for
// a process the phase did not run).
func usageCPU(u []usage) string {
	return usageColumn(u, func(x usage) string { return strconv.FormatFloat(x.CPUSeconds, 'f', 1, 64) })
}

// usageRSS is usageCPU for peak memory in MB.
func usageRSS(u []usage) string {
	return usageColumn(u, func(x usage) string { return strconv.FormatFloat(x.PeakRSSMB, 'f', 0, 64) })
}

// usageColumn writes field of each process's usage in processOrder,
// tab-separated ("-" for a process the phase did not run).
func usageColumn(u []usage, field func(usage) string) string {
	var b strings.Builder
	for _, name := range processOrder() {
		v := "-"
		for _, x := range u {
			if x.Process == name {
				v = field(x)
			}
		}
		b.WriteString(v + "	")
	}
	return b.String()
}

// phase is a measured phase and what each process used in it.
type phase struct {
	name  string
	usage []usage
}

// phases lists every measured phase, for the usage tables.
func (r *report) phases() []phase {
	var out []phase
	for _, l := range r.Loads {
		for _, run := range l.Runs {
			out = append(out, phase{fmt.Sprintf("load %s: %s", l.Table, run.Name), run.Usage})
		}
	}
	for _, s := range r.Steady {
		out = append(out, phase{fmt.Sprintf("steady %d rows/s", s.OfferedRowsPerSecond), s.Usage})
	}
	return out
}

// printInserts prints how often each steady step inserted into the
// engine and how many parts it wrote into the table.
func (r *report) printInserts(w io.Writer) {
	fmt.Fprintln(w, "\ninserts into the engine per steady step and its drain: every insert is a part (per partition of the table) to merge")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "offered rows/s\tseconds\tengine inserts/s (the table's and the sink's watermarks)\tparts written into the table/s\trows a part\t")
	for _, s := range r.Steady {
		if s.InsertSeconds <= 0 {
			continue
		}
		perPart := 0.0
		if s.TableParts > 0 {
			perPart = float64(s.Visible) / float64(s.TableParts)
		}
		fmt.Fprintf(tw, "%d\t%.1f\t%.1f\t%.1f\t%.0f\t\n", s.OfferedRowsPerSecond, s.InsertSeconds, float64(s.EngineInserts)/s.InsertSeconds, float64(s.TableParts)/s.InsertSeconds, perPart)
	}
	tw.Flush()
}

// printLag prints the lag sampler's figures of each steady step, walhouse
// and MaterializedPostgreSQL side by side.
func (r *report) printLag(w io.Writer) {
	if len(r.Steady) == 0 || len(r.Steady[0].Lag) == 0 {
		return
	}
	fmt.Fprintf(w, "\nlag: the newest row visible, sampled every %v while the rate was offered (send time of the query − the row's created_at), the same for each system\n", lagInterval)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "offered rows/s\tsystem\tsamples\tp50 s\tp99 s\tmax s\tvisible after the drain\t")
	for _, s := range r.Steady {
		for _, l := range s.Lag {
			visible := s.Visible
			if l.System == runMaterialized {
				visible = s.MaterializedVisible
			}
			fmt.Fprintf(tw, "%d\t%s\t%d\t%.3f\t%.3f\t%.3f\t%d of %d\t\n", s.OfferedRowsPerSecond, l.System, l.Samples, l.P50, l.P99, l.Max, visible, s.Rows)
		}
	}
	tw.Flush()
}

func (r *report) print(w io.Writer) {
	if len(r.Steady) == 0 {
		r.printTargets(w)
		return
	}
	fmt.Fprintf(w, "\nsteady: pgbench, %d-row transactions over %d tenants; commit → visible is _synced_at − _commit_ts;\n"+
		"behind: the most rows committed but not in Kafka yet (capture) and in Kafka but not visible yet (sink), sampled every second;\n"+
		"token: %d writers each write a row through Layer 1, then read it through the query API with its consistency token (wait %v),\n"+
		"one after another: the wait from the write's commit until the read returned, and the reads whose wait ended without the write\n", txRows, tenants, tokenProbers, tokenWait)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "offered rows/s\tcommitted rows/s\trows\tvisible\tdrained after s\tp50 s\tp99 s\tmax s\ttoken p50 s\ttoken p99 s\tof it waiting p50/p99 s\tstale/reads\tbehind: capture\tsink\tCPU s: total\t"+usageHeader())
	for _, s := range r.Steady {
		drain := fmt.Sprintf("%.1f", s.DrainSeconds)
		if !s.Drained {
			drain = "> " + drain
		}
		fmt.Fprintf(tw, "%d\t%.0f\t%d\t%d\t%s\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f/%.3f\t%d/%d\t%d\t%d\t%.1f\t%s\n", s.OfferedRowsPerSecond, s.AchievedRowsPerSecond, s.Rows, s.Visible, drain, s.P50, s.P99, s.Max, s.TokenWaitP50, s.TokenWaitP99, s.TokenServerP50, s.TokenServerP99, s.TokenStale, s.TokenReads, s.MaxCaptureBacklog, s.MaxSinkBacklog, totalCPU(s.Usage), usageCPU(s.Usage))
	}
	tw.Flush()
	r.printInserts(w)
	for _, s := range r.Steady {
		if s.TokenFailed > 0 {
			fmt.Fprintf(w, "  at %d rows/s, %d token probe(s) failed (not in the token figures); the first: %s\n", s.OfferedRowsPerSecond, s.TokenFailed, s.TokenError)
		}
	}
	r.printLag(w)
	printProfiles(w, r.Steady)

	if len(r.FirstRows) > 0 {
		fmt.Fprintf(w, "\nfirst row of a table added to the publication while the pipeline runs\n")
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "table\tvisible after s\t_synced_at − _commit_ts s\t")
		for _, f := range r.FirstRows {
			fmt.Fprintf(tw, "%s\t%.2f\t%.2f\t\n", f.Table, f.VisibleAfter, f.CommitToSynced)
		}
		tw.Flush()
	}

	fmt.Fprintf(w, "\npeak memory (MB) per phase; PostgreSQL's is the summed Pss of its processes\n")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "phase\t"+usageHeader())
	for _, p := range r.phases() {
		fmt.Fprintf(tw, "%s\t%s\n", p.name, usageRSS(p.usage))
	}
	tw.Flush()

	r.printTargets(w)
}

// printTargets prints the figures the targets are about.
func (r *report) printTargets(w io.Writer) {
	printLoadProfiles(w, r.Loads)
	s := r.Summary
	fmt.Fprintf(w, "\nagainst the targets (load average %s before, %s after; a shared machine: read ratios, not absolutes)\n", r.LoadAverageBefore, r.LoadAverageAfter)
	for _, l := range r.Loads {
		fmt.Fprintf(w, "  initial load, %s: %.2f× the engine's pull (target ≥ 0.8×)\n", l.Table, l.Ratio)
		if l.MaterializedRatio > 0 {
			fmt.Fprintf(w, "  initial load, %s: %.2f× MaterializedPostgreSQL's rows/s (target ≥ 1×) at %.2f× its CPU (target ≤ 2×)\n", l.Table, l.MaterializedRatio, l.MaterializedCPURatio)
		}
	}
	if len(r.Steady) == 0 {
		fmt.Fprintf(w, "  Layer 2: Redis %.1f%% of the narrow load's CPU; all processes %.1f%% more CPU than with Layer 2 off (target ≤ 10%%)\n", 100*s.RedisShare, 100*s.Layer2Share)
		return
	}
	if s.MaxRateP99UnderOneSecond > 0 {
		fmt.Fprintf(w, "  highest offered rate with p99 ≤ 1 s: %d rows/s (target: 60000)\n", s.MaxRateP99UnderOneSecond)
	} else {
		fmt.Fprintf(w, "  highest offered rate with p99 ≤ 1 s: none of the rates measured (target: 60000)\n")
	}
	if s.MaxRateTokenP99UnderOneSecond > 0 {
		fmt.Fprintf(w, "  highest offered rate with a token wait p99 ≤ 1 s and no stale token read: %d rows/s (target: p99 ≤ 1 s wherever the pipeline keeps up)\n", s.MaxRateTokenP99UnderOneSecond)
	} else {
		fmt.Fprintf(w, "  highest offered rate with a token wait p99 ≤ 1 s and no stale token read: none of the rates measured (target: p99 ≤ 1 s wherever the pipeline keeps up)\n")
	}
	if len(r.FirstRows) > 0 {
		fmt.Fprintf(w, "  first row of a new table: %.2f s at worst (target ≤ 2 s)\n", s.FirstRowSeconds)
	}
	fmt.Fprintf(w, "  Layer 2: Redis %.1f%% of the narrow load's CPU; all processes %.1f%% more CPU than with Layer 2 off (target ≤ 10%%)\n", 100*s.RedisShare, 100*s.Layer2Share)
	for _, st := range r.Steady {
		if share, ok := st.layer2Share(); ok {
			fmt.Fprintf(w, "  Layer 2 for streamed changes at %d rows/s: %.1f%% of the pipeline's CPU (the sink's share by its profile, plus Redis; target ≤ 10%%)\n", st.OfferedRowsPerSecond, 100*share)
		}
	}
}

// write writes the report as JSON, its tables as CSV and the chart as PNG
// under dir, in files named <name>*.
func (r *report) write(dir, name string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var files []string
	j, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, name+".json")
	if err := os.WriteFile(path, append(j, '\n'), 0o644); err != nil {
		return nil, err
	}
	files = append(files, path)

	load := [][]string{{"table", "columns", "avg_row_bytes", "rows", "run", "seconds", "rows_per_second", "ratio_to_engine", "first_row_seconds", "cpu_seconds_total"}}
	for _, l := range r.Loads {
		for _, run := range l.Runs {
			load = append(load, []string{l.Table, itoa(l.Columns), ftoa(l.RowBytes, 0), itoa(int(l.Rows)), run.Name,
				ftoa(run.Seconds, 3), ftoa(run.RowsPerSecond, 0), ftoa(run.RowsPerSecond/l.engineRowsPerSecond(), 3), ftoa(run.FirstRowSeconds, 2), ftoa(totalCPU(run.Usage), 1)})
		}
	}
	steady := [][]string{{"offered_rows_per_second", "committed_rows_per_second", "rows", "visible", "drained", "drain_seconds", "p50_seconds", "p99_seconds", "max_seconds",
		"token_wait_p50_seconds", "token_wait_p99_seconds", "token_wait_max_seconds", "token_server_wait_p50_seconds", "token_server_wait_p99_seconds", "token_reads", "token_stale", "token_failed", "max_capture_backlog_rows", "max_sink_backlog_rows", "cpu_seconds_total",
		"lag_p50_seconds", "lag_p99_seconds", "materialized_lag_p50_seconds", "materialized_lag_p99_seconds", "materialized_visible",
		"engine_inserts", "table_parts", "insert_seconds"}}
	for _, s := range r.Steady {
		steady = append(steady, []string{itoa(s.OfferedRowsPerSecond), ftoa(s.AchievedRowsPerSecond, 0), itoa(int(s.Rows)), itoa(int(s.Visible)),
			strconv.FormatBool(s.Drained), ftoa(s.DrainSeconds, 2), ftoa(s.P50, 3), ftoa(s.P99, 3), ftoa(s.Max, 3),
			ftoa(s.TokenWaitP50, 3), ftoa(s.TokenWaitP99, 3), ftoa(s.TokenWaitMax, 3), ftoa(s.TokenServerP50, 3), ftoa(s.TokenServerP99, 3), itoa(s.TokenReads), itoa(s.TokenStale), itoa(s.TokenFailed),
			itoa(int(s.MaxCaptureBacklog)), itoa(int(s.MaxSinkBacklog)), ftoa(totalCPU(s.Usage), 1),
			lagCSV(s.Lag, runWalhouse, 0), lagCSV(s.Lag, runWalhouse, 1), lagCSV(s.Lag, runMaterialized, 0), lagCSV(s.Lag, runMaterialized, 1), itoa(int(s.MaterializedVisible)),
			itoa(int(s.EngineInserts)), itoa(int(s.TableParts)), ftoa(s.InsertSeconds, 1)})
	}
	first := [][]string{{"table", "visible_after_seconds", "commit_to_synced_seconds"}}
	for _, f := range r.FirstRows {
		first = append(first, []string{f.Table, ftoa(f.VisibleAfter, 3), ftoa(f.CommitToSynced, 3)})
	}
	use := [][]string{{"phase", "process", "cpu_seconds", "peak_rss_mb"}}
	for _, p := range r.phases() {
		for _, u := range p.usage {
			use = append(use, []string{p.name, u.Process, ftoa(u.CPUSeconds, 2), ftoa(u.PeakRSSMB, 0)})
		}
	}
	for _, t := range []struct {
		suffix string
		rows   [][]string
	}{{"-load", load}, {"-steady", steady}, {"-first-row", first}, {"-usage", use}} {
		path := filepath.Join(dir, name+t.suffix+".csv")
		if err := writeCSV(path, t.rows); err != nil {
			return files, err
		}
		files = append(files, path)
	}
	path = filepath.Join(dir, name+".png")
	if err := r.chart(path); err != nil {
		return files, fmt.Errorf("draw the chart: %w", err)
	}
	return append(files, path), nil
}

// lagCSV returns system's lag p50 (which 0) or p99 (1) in lags, "" when
// it was not sampled.
func lagCSV(lags []lagResult, system string, which int) string {
	for _, l := range lags {
		if l.System == system {
			return ftoa([]float64{l.P50, l.P99}[which], 3)
		}
	}
	return ""
}

func writeCSV(path string, rows [][]string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	if err := w.WriteAll(rows); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func itoa(n int) string               { return strconv.Itoa(n) }
func ftoa(f float64, prec int) string { return strconv.FormatFloat(f, 'f', prec, 64) }
