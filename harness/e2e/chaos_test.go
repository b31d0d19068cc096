package e2e

import (
	"cmp"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/walhouse/walhouse/harness/testenv"
)

// The chaos matrix (`make chaos`, docs/reliability.md): every scenario of
// chaosScenarios runs on a pipeline of its own against the local services,
// injects its faults while a workload writes, lets capture and the sinks
// recover (restarted as a supervisor would), and ends with an exact
// comparison: per tenant, a checksum of the sorted rows of PostgreSQL and
// of ClickHouse FINAL, with a row-level diff where they differ. The table
// of results goes to stdout, .local/chaos/table.md and, for a full run,
// docs/reliability.md.

// chaosConfig is a run's size, from the environment (make chaos sets it).
type chaosConfig struct {
	quick   bool  // CHAOS_QUICK=1: a short run, for CI
	kills   int   // CHAOS_N: kill -9 of capture and sinks in the randomized run
	rows    int64 // CHAOS_ROWS: row changes of the randomized run's workload
	each    int64 // CHAOS_SCENARIO_ROWS: row changes of every other scenario's workload
	tenants int   // CHAOS_TENANTS: tenants of the workloads
}

func chaosSettings(t *testing.T) chaosConfig {
	t.Helper()
	c := chaosConfig{quick: os.Getenv("CHAOS_QUICK") == "1", kills: 100, rows: 1_000_000, each: 20_000, tenants: 50}
	if c.quick {
		c.kills, c.rows, c.each, c.tenants = 6, 20_000, 3_000, 20
	}
	for _, v := range []struct {
		name string
		into *int64
	}{{"CHAOS_ROWS", &c.rows}, {"CHAOS_SCENARIO_ROWS", &c.each}} {
		if s := os.Getenv(v.name); s != "" {
			n, err := strconv.ParseInt(strings.ReplaceAll(s, "_", ""), 10, 64)
			if err != nil || n < 100 {
				t.Fatalf("%s=%q: want a number of row changes, at least 100", v.name, s)
			}
			*v.into = n
		}
	}
	for _, v := range []struct {
		name string
		into *int
	}{{"CHAOS_N", &c.kills}, {"CHAOS_TENANTS", &c.tenants}} {
		if s := os.Getenv(v.name); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n < 1 {
				t.Fatalf("%s=%q: want a positive number", v.name, s)
			}
			*v.into = n
		}
	}
	return c
}

// chaosScenario is one row of the matrix.
type chaosScenario struct {
	name string
	// layers says which of the three dedup layers the scenario proves
	// (docs/guarantees.md): 1 the write side (idempotency keys), 2 the
	// sink's eventId store, 3 ReplacingMergeTree with FINAL; "token" is
	// the insert deduplication token of a repeated batch.
	layers string
	// seed is the acceptance test of seed 003 §6 (or the line) it
	// covers.
	seed string
	// noDoubles: no row version may be in ClickHouse twice even without
	// FINAL (Layer 2 or the insert token prevent it); elsewhere doubles
	// are allowed until a merge and only FINAL must be exact.
	noDoubles bool
	run       func(c *chaos)
}

// chaosScenarios is the matrix. A scenario of Layer 1 (an application's
// retried HTTP write, package idempotency) is one more entry whose run
// writes through that package's middleware; "all three at once" then adds
// its retries to allAtOnce.
func chaosScenarios() []chaosScenario {
	return []chaosScenario{
		{name: "client HTTP retry of the same write", layers: "1", seed: "issue 17: HTTP retry by client", noDoubles: true, run: (*chaos).httpRetry},
		{name: "sink kill -9 + rebalance onto a second sink", layers: "2, token", seed: "issue 17: consumer crash + rebalance", noDoubles: true, run: (*chaos).sinkKillRebalance},
		{name: "crash at capture.produced: re-publish from an older LSN", layers: "3, 2", seed: "issue 17: connector re-publish; §6.1, §6.2: after produce, before slot confirm", noDoubles: true, run: (*chaos).capturePublishesAgain},
		{name: "capture re-publishes, Layer 2 off", layers: "3", seed: "issue 17: connector re-publish", run: (*chaos).capturePublishesAgainWithoutLayer2},
		{name: "all at once: HTTP retries + re-publish + sink kill + rebalance + duplicates", layers: "1, 2, 3, token", seed: "issue 17: all three at once", noDoubles: true, run: (*chaos).allAtOnce},
		{name: "duplicate publish + offsets rolled back", layers: "2", seed: "§6.1", noDoubles: true, run: (*chaos).duplicatePublish},
		{name: "crash at capture.copied (mid-copy)", layers: "3", seed: "§6.2: mid-copy", run: (*chaos).crashMidCopy},
		{name: "crash at sink.deduped", layers: "2", seed: "§6.2: after the dedup check, before insert", noDoubles: true, run: crashAt("sink.deduped", true)},
		{name: "crash at sink.claimed", layers: "2, token", seed: "§6.2/6.3: after claim, before offset commit", noDoubles: true, run: crashAt("sink.claimed", true)},
		{name: "crash at sink.loaded, Layer 2 off", layers: "token", seed: "§6.3: after insert, before offset commit", noDoubles: true, run: crashAt("sink.loaded", false)},
		{name: "crash at sink.revoked (during a rebalance)", layers: "2, token", seed: "§6.3: during a rebalance", noDoubles: true, run: (*chaos).crashDuringRebalance},
		{name: "out-of-order versions, Layer 2 off", layers: "3", seed: "§6.4", run: (*chaos).outOfOrder},
		{name: "same eventId to two sinks at once", layers: "2, 3", seed: "§6.5", run: (*chaos).twoSinksAtOnce},
		{name: "retry after a failure (answer lost 3 times)", layers: "token", seed: "§6.6", noDoubles: true, run: (*chaos).retryAfterFailure},
		{name: "key normalisation edge cases", layers: "2, 3", seed: "§6.7", noDoubles: true, run: (*chaos).keyNormalisation},
		{name: "dedup store (Redis) outage", layers: "3 (fail open)", seed: "§6.8", run: outage("redis", 10*time.Second)},
		{name: "ClickHouse outage", layers: "token", seed: "issue 17", noDoubles: true, run: outage("clickhouse", 20*time.Second)},
		{name: "Kafka broker restart", layers: "3, 2", seed: "issue 17", noDoubles: true, run: outage("kafka", 10*time.Second)},
		{name: "PostgreSQL restart", layers: "3, 2", seed: "issue 17", noDoubles: true, run: outage("postgres", 5*time.Second)},
		{name: "walhouse verify: divergence behind walhouse's back, repaired", layers: "verify", seed: "issue 24 part 5", run: (*chaos).divergence},
		{name: "randomized kill -9 of capture and sinks", layers: "2, 3, token", seed: "issue 17", noDoubles: true, run: (*chaos).randomKills},
	}
}

// chaosResult is one line of the table.
type chaosResult struct {
	scenario, layers string
	ran              bool
	faults           int   // faults injected: kills, crashes, outages, duplicated records
	pgRows, chRows   int   // rows in PostgreSQL and in ClickHouse FINAL
	mismatches       int   // rows in one and not the other (values compared exactly)
	doubles          int64 // row versions in ClickHouse more than once, without FINAL, before OPTIMIZE
	dupsOptimized    int64 // rows more than once without FINAL after OPTIMIZE … FINAL
	republished      int   // row changes Kafka holds more than once (same eventId)
	deadLetters      int
	took             time.Duration
	pass             bool
}

// TestChaos runs the matrix; only `make chaos` and `make chaos-quick`
// (WALHOUSE_CHAOS=1) run it: it takes minutes to an hour and stops and
// starts the local services.
func TestChaos(t *testing.T) {
	if os.Getenv("WALHOUSE_CHAOS") != "1" {
		t.Skip("the chaos matrix runs with make chaos or make chaos-quick (WALHOUSE_CHAOS=1)")
	}
	testenv.RequireLocal(t, "it stops and starts the services with deploy/local/services.sh")
	cfg := chaosSettings(t)
	checkServicePorts(t, testenv.Load())
	var results []chaosResult
	for _, sc := range chaosScenarios() {
		res := chaosResult{scenario: sc.name, layers: sc.layers}
		t.Run(sc.name, func(t *testing.T) {
			res.ran = true
			c := newChaos(t, cfg)
			start := time.Now()
			defer func() {
				res.took = time.Since(start)
				res.pass = !t.Failed() && res.mismatches == 0 && res.dupsOptimized == 0 && res.deadLetters == 0 && (!sc.noDoubles || res.doubles == 0)
				if !res.pass && !t.Failed() {
					t.Errorf("FAIL: %+v", res)
				}
			}()
			sc.run(c)
			c.verify(&res)
		})
		if res.ran {
			results = append(results, res)
			// go test shows a passing test's output only at its end: a
			// long run's progress is in this file meanwhile.
			if err := writeChaosFile("progress.md", renderChaos(cfg, results)); err != nil {
				t.Error(err)
			}
		}
	}
	table := renderChaos(cfg, results)
	fmt.Println(table)
	if err := writeChaosReport(cfg, table); err != nil {
		t.Error(err)
	}
}

// renderChaos renders the results as a Markdown table.
func renderChaos(cfg chaosConfig, results []chaosResult) string {
	var b strings.Builder
	kind := "full run"
	if cfg.quick {
		kind = "quick run (CHAOS_QUICK=1)"
	}
	fmt.Fprintf(&b, "Chaos matrix, %s, %s: %d kills and %d row changes in the randomized run, %d row changes per other scenario, %d tenants.\n\n",
		kind, time.Now().UTC().Format("2006-01-02 15:04 UTC"), cfg.kills, cfg.rows, cfg.each, cfg.tenants)
	b.WriteString("| scenario | layers | faults | rows in PostgreSQL | rows in ClickHouse FINAL | mismatches | doubled versions before OPTIMIZE | duplicates without FINAL after OPTIMIZE | re-published changes | dead letters | time | result |\n")
	b.WriteString("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|\n")
	passed := 0
	for _, r := range results {
		verdict := "FAIL"
		if r.pass {
			verdict = "PASS"
			passed++
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %d | %d | %d | %d | %d | %d | %d | %s | %s |\n", r.scenario, r.layers, r.faults, r.pgRows, r.chRows,
			r.mismatches, r.doubles, r.dupsOptimized, r.republished, r.deadLetters, r.took.Round(time.Second), verdict)
	}
	fmt.Fprintf(&b, "\n%d of %d scenarios passed.\n", passed, len(results))
	return b.String()
}

// writeChaosFile writes one of the run's files into .local/chaos.
func writeChaosFile(name, text string) error {
	dir := filepath.Join("..", "..", ".local", "chaos")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644)
}

// The generated part of docs/reliability.md lies between these lines.
const (
	chaosBegin = "<!-- chaos table: generated by make chaos, do not edit -->"
	chaosEnd   = "<!-- end of chaos table -->"
)

// writeChaosReport writes the table to .local/chaos/table.md and, for a
// full run, into docs/reliability.md between its markers.
func writeChaosReport(cfg chaosConfig, table string) error {
	if err := writeChaosFile("table.md", table); err != nil {
		return err
	}
	if cfg.quick {
		return nil
	}
	doc := filepath.Join("..", "..", "docs", "reliability.md")
	old, err := os.ReadFile(doc)
	if err != nil {
		return err
	}
	before, rest, ok1 := strings.Cut(string(old), chaosBegin)
	_, after, ok2 := strings.Cut(rest, chaosEnd)
	if !ok1 || !ok2 {
		return fmt.Errorf("%s lacks the lines %q and %q around the table", doc, chaosBegin, chaosEnd)
	}
	return os.WriteFile(doc, []byte(before+chaosBegin+"\n"+table+chaosEnd+after), 0o644)
}

// chaos is one scenario's pipeline with its processes: one capture and the
// sinks of the pipeline's group, each restarted by supervise when it dies.
type chaos struct {
	*pipeline
	cfg        chaosConfig
	tables     []chaosTable
	sinkTable  sinkTable // the workload's table (tables[0])
	capArgs    []string  // the arguments of capture
	sinkFlags  []string  // the flags every sink of the group gets
	capture    *testenv.Proc
	sinks      []*chaosSink
	faults     int
	held       bool          // merges of the tables stopped (holdMerges)
	deadlineBy time.Duration // how long convergence may take
}

// chaosSink is a sink of the pipeline's group and its member id, by which
// it is removed from the group once killed.
type chaosSink struct {
	proc   *testenv.Proc
	member string
	extra  []string
}

// chaosTable is a compared table: its queries return every row's values as
// text, the tenant first.
type chaosTable struct {
	name, topic      string
	pgQuery, chQuery string
	key              string // its primary key columns in ClickHouse
}

func newChaos(t *testing.T, cfg chaosConfig) *chaos {
	p := newPipeline(t)
	p.dropTopicsAtEnd()
	tb := p.newSinkTable()
	c := &chaos{pipeline: p, cfg: cfg, sinkTable: tb, deadlineBy: 3*time.Minute + time.Duration(cfg.rows/2000)*time.Second}
	c.tables = []chaosTable{{name: tb.name, topic: tb.topic, pgQuery: tb.pgQuery, chQuery: tb.chQuery, key: "tenant_id, id"}}
	c.capArgs = p.captureArgs([]string{tb.name})
	c.sinkFlags = p.layer2Flags()
	return c
}

// holdMerges waits until the sink has created the scenario's tables in
// ClickHouse and stops their background merges until verify: a row
// version inserted twice must still be there to be counted, and a merge of
// ReplacingMergeTree would remove the evidence. Call it once the first
// rows are in.
func (c *chaos) holdMerges() {
	c.t.Helper()
	err := testenv.Eventually(context.Background(), 2*time.Minute, func(ctx context.Context) error {
		for _, tb := range c.tables {
			// Fresh names of hex digits and underscores: nothing to escape.
			var n uint64
			q := fmt.Sprintf("SELECT count() FROM system.tables WHERE database = '%s' AND name = '%s'", c.database, tb.name)
			if err := c.ch.QueryRow(ctx, q).Scan(&n); err != nil {
				return err
			}
			if n == 0 {
				return fmt.Errorf("the sink has not created %s yet", tb.name)
			}
		}
		return nil
	})
	if err != nil {
		c.t.Fatal(err)
	}
	c.stopMerges()
}

// stopMerges stops the background merges of the scenario's tables (a
// restart of ClickHouse starts them again). Each insert is a part until
// verify: the limits on a table's parts, which would delay and then refuse
// inserts, are lifted.
func (c *chaos) stopMerges() {
	c.t.Helper()
	for _, tb := range c.tables {
		table := fmt.Sprintf("`%s`.`%s`", c.database, tb.name)
		c.chExec("ALTER TABLE "+table+" MODIFY SETTING parts_to_delay_insert = 1000000, parts_to_throw_insert = 1000000", nil)
		c.chExec("SYSTEM STOP MERGES "+table, nil)
	}
}

// spawn starts walhouse with args, with WALHOUSE_FAILPOINTS=failpoints
// when not empty; it is killed when the scenario ends.
func (c *chaos) spawn(name, failpoints string, args []string) *testenv.Proc {
	c.t.Helper()
	if failpoints == "" {
		return killAtEnd(c.t, testenv.Start(c.t, name, walhouseBin, args...))
	}
	env, err := exec.LookPath("env")
	if err != nil {
		c.t.Fatal(err)
	}
	return killAtEnd(c.t, testenv.Start(c.t, name+" ("+failpoints+")", env, append([]string{"WALHOUSE_FAILPOINTS=" + failpoints, walhouseBin}, args...)...))
}

// startCapture starts capture and waits until it streams; with
// failpoints it does not wait, since it may crash first.
func (c *chaos) startCapture(failpoints string, extra ...string) {
	c.t.Helper()
	args := append(slices.Clone(c.capArgs), extra...)
	if failpoints == "" {
		c.capture = killAtEnd(c.t, c.runCapture(args))
		return
	}
	c.capture = c.spawn("capture", failpoints, args)
}

// killCapture kills capture with SIGKILL and waits until PostgreSQL has
// let go of its slot.
func (c *chaos) killCapture() {
	c.t.Helper()
	c.capture.Kill()
	c.faults++
	c.waitSlotReleased()
}

// startSink starts a sink of the group with the chaos flags, then extra,
// and learns its member id (unless it exits first).
func (c *chaos) startSink(failpoints string, extra ...string) *chaosSink {
	c.t.Helper()
	known := map[string]bool{}
	for _, m := range c.members() {
		known[m] = true
	}
	for _, s := range c.sinks {
		known[s.member] = true
	}
	s := &chaosSink{extra: extra}
	s.proc = c.spawn("sink", failpoints, c.sinkArgs(append(slices.Clone(c.sinkFlags), extra...)...))
	c.sinks = append(c.sinks, s)
	err := testenv.Eventually(context.Background(), 60*time.Second, func(context.Context) error {
		if done, _ := s.proc.Exited(); done {
			return nil // a failpoint ended it before it joined
		}
		for _, m := range c.members() {
			if !known[m] {
				s.member = m
				return nil
			}
		}
		return errors.New("the sink has not joined the group yet")
	})
	if err != nil {
		c.t.Fatalf("%v\n%s", err, s.proc.Output())
	}
	return s
}

// killSink kills a sink with SIGKILL and removes it from the group, so
// that its partitions move to the others at once rather than after its
// session timeout.
func (c *chaos) killSink(s *chaosSink) {
	c.t.Helper()
	s.proc.Kill()
	c.faults++
	c.leave(s)
}

func (c *chaos) leave(s *chaosSink) {
	c.t.Helper()
	if s.member != "" && slices.Contains(c.members(), s.member) {
		c.evict(s.member)
	}
	c.sinks = slices.DeleteFunc(c.sinks, func(o *chaosSink) bool { return o == s })
}

// supervise restarts, as a supervisor would, capture and every sink that
// has exited (crashed at a failpoint, killed, or stopped by an outage),
// without failpoints.
func (c *chaos) supervise() {
	c.t.Helper()
	if done, _ := c.capture.Exited(); done {
		c.waitSlotReleased()
		c.startCapture("")
	}
	for _, s := range slices.Clone(c.sinks) {
		if done, _ := s.proc.Exited(); done {
			c.leave(s)
			c.startSink("", s.extra...)
		}
	}
}

// waitCrash waits until proc has crashed at the failpoint.
func (c *chaos) waitCrash(proc *testenv.Proc, point string, timeout time.Duration) {
	c.t.Helper()
	if err := proc.Wait(timeout); err == nil || !strings.Contains(proc.Output(), "crashing at "+point) {
		c.t.Fatalf("%s did not crash at %s (exit: %v):\n%s", proc.Name, point, err, proc.Output())
	}
	c.faults++
}

// settle waits until ClickHouse FINAL equals PostgreSQL exactly, restarting
// dead processes meanwhile, and fails the scenario with the row-level diff
// when it does not within the deadline.
func (c *chaos) settle() {
	c.t.Helper()
	deadline := time.Now().Add(c.deadlineBy)
	for {
		c.supervise()
		if err := c.countsAgree(); err == nil {
			if _, d, err := c.compare(); err == nil && d == "" {
				c.caughtUp(c.group, deadline)
				return
			}
		}
		if time.Now().After(deadline) {
			_, d, err := c.compare()
			c.t.Fatalf("ClickHouse FINAL does not equal PostgreSQL after %v (%v):\n%s", c.deadlineBy, err, d)
		}
		// Each comparison reads every row: a large workload's sinks get
		// the CPU between them.
		time.Sleep(max(time.Second, time.Duration(c.cfg.rows/200_000)*time.Second))
	}
}

// caughtUp waits until group has committed every record its topics
// hold now: duplicates and stale versions change nothing at FINAL, so only
// the offsets tell that the sinks have seen them all (and that what verify
// counts without FINAL is final).
func (c *chaos) caughtUp(group string, deadline time.Time) {
	c.t.Helper()
	cl := c.shortKafka()
	defer cl.Close()
	adm := kadm.NewClient(cl)
	topics := make([]string, len(c.tables))
	for i, tb := range c.tables {
		topics[i] = tb.topic
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline.Add(time.Minute))
	defer cancel()
	ends, err := adm.ListEndOffsets(ctx, topics...)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		c.t.Fatalf("end offsets of %v: %v", topics, err)
	}
	err = testenv.Eventually(ctx, time.Until(deadline)+time.Minute, func(ctx context.Context) error {
		c.supervise()
		committed, err := adm.FetchOffsets(ctx, group)
		if err != nil {
			return err
		}
		var behind []string
		ends.Each(func(o kadm.ListedOffset) {
			if at, ok := committed.Lookup(o.Topic, o.Partition); !ok || at.At < o.Offset {
				behind = append(behind, fmt.Sprintf("%s/%d at %d of %d", o.Topic, o.Partition, at.At, o.Offset))
			}
		})
		if len(behind) > 0 {
			return fmt.Errorf("the group has not committed %v", behind)
		}
		return nil
	})
	if err != nil {
		c.t.Fatal(err)
	}
}

// countsAgree is settle's cheap precondition before the exact comparison:
// the row counts of every table agree.
func (c *chaos) countsAgree() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, tb := range c.tables {
		var want int64
		if err := c.pg.QueryRow(ctx, fmt.Sprintf("SELECT count(*) FROM (%s) AS q", tb.pgQuery)).Scan(&want); err != nil {
			return err
		}
		var got uint64
		q := fmt.Sprintf("SELECT count() FROM `%s`.`%s` FINAL WHERE _is_deleted = 0", c.database, tb.name)
		if err := c.ch.QueryRow(ctx, q).Scan(&got); err != nil {
			return err
		}
		if int64(got) != want {
			return fmt.Errorf("%s: ClickHouse has %d rows, PostgreSQL %d", tb.name, got, want)
		}
	}
	return nil
}

// chaosTally is what compare found.
type chaosTally struct {
	pgRows, chRows, mismatches, tenants int
}

// compare compares every table exactly: per tenant, a SHA-256 of the
// tenant's rows (every value as text, sorted) in PostgreSQL and in
// ClickHouse FINAL; where they differ, the rows in one and not the other.
// It returns the tally and the diff ("" when equal).
func (c *chaos) compare() (chaosTally, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var tl chaosTally
	var d strings.Builder
	for _, tb := range c.tables {
		want, err := pgCells(ctx, c.pg, tb.pgQuery)
		if err != nil {
			return tl, "", fmt.Errorf("query PostgreSQL: %w", err)
		}
		got, err := chCells(ctx, c.ch, tb.chQuery, nil)
		if err != nil {
			return tl, "", fmt.Errorf("query ClickHouse: %w", err)
		}
		tl.pgRows += len(want)
		tl.chRows += len(got)
		w, g := byTenant(want), byTenant(got)
		for tenant := range mergeKeys(w, g) {
			tl.tenants++
			if tenantSum(w[tenant]) == tenantSum(g[tenant]) {
				continue
			}
			n, only := rowsApart(w[tenant], g[tenant])
			tl.mismatches += n
			if d.Len() < 8000 {
				fmt.Fprintf(&d, "%s, tenant %q: %d rows differ\n%s", tb.name, tenant, n, only)
			}
		}
	}
	return tl, d.String(), nil
}

// byTenant groups rows by their first cell, each row's cells joined by
// " | " and each tenant's rows sorted bytewise, so that neither side's
// collation matters.
func byTenant(rows [][]string) map[string][]string {
	out := map[string][]string{}
	for _, r := range joinCells(rows) {
		tenant, _, _ := strings.Cut(r, " | ")
		out[tenant] = append(out[tenant], r)
	}
	for _, rs := range out {
		slices.Sort(rs)
	}
	return out
}

func mergeKeys(a, b map[string][]string) map[string]bool {
	out := map[string]bool{}
	for k := range a {
		out[k] = true
	}
	for k := range b {
		out[k] = true
	}
	return out
}

// tenantSum is the checksum of one tenant's sorted rows.
func tenantSum(rows []string) [sha256.Size]byte {
	return sha256.Sum256([]byte(strings.Join(rows, "\n")))
}

// rowsApart returns how many rows are in only one of want and got (each
// sorted) and the first of them, each marked pg or ch.
func rowsApart(want, got []string) (int, string) {
	count := map[string]int{}
	for _, r := range want {
		count[r]++
	}
	for _, r := range got {
		count[r]--
	}
	var b strings.Builder
	n := 0
	for _, r := range slices.Concat(want, got) {
		k := count[r]
		if k == 0 {
			continue
		}
		side := "only in PostgreSQL"
		if k < 0 {
			side = "only in ClickHouse"
		}
		n += max(k, -k)
		if b.Len() < 2000 {
			fmt.Fprintf(&b, "  %s: %s\n", side, r)
		}
		count[r] = 0
	}
	return n, b.String()
}

// verify fills res once the scenario's faults are over: it waits for the
// exact equality (settle), then counts what the faults left behind.
func (c *chaos) verify(res *chaosResult) {
	c.t.Helper()
	c.settle()
	tl, d, err := c.compare()
	if err != nil {
		c.t.Fatal(err)
	}
	res.pgRows, res.chRows, res.mismatches, res.faults = tl.pgRows, tl.chRows, tl.mismatches, c.faults
	if d != "" {
		c.t.Errorf("ClickHouse FINAL differs from PostgreSQL:\n%s", d)
	}
	for _, tb := range c.tables {
		res.doubles += c.chInt(fmt.Sprintf("SELECT count() - uniqExact(%s, _version) FROM `%s`.`%s`", tb.key, c.database, tb.name))
		c.chExec(fmt.Sprintf("SYSTEM START MERGES `%s`.`%s`", c.database, tb.name), nil)
		c.chExec(fmt.Sprintf("OPTIMIZE TABLE `%s`.`%s` FINAL", c.database, tb.name), nil)
		res.dupsOptimized += c.chInt(fmt.Sprintf("SELECT count() - uniqExact(%s) FROM `%s`.`%s`", tb.key, c.database, tb.name))
		records, distinct := c.redeliveries(tb.topic)
		res.republished += records - distinct
	}
	res.deadLetters = c.deadLetterCount()
	c.t.Logf("%s: %d tenants, %+v", c.t.Name(), tl.tenants, *res)
}

// deadLetterCount counts the records of the pipeline's dead-letter topic,
// where capture and the sinks set aside what they cannot load.
func (c *chaos) deadLetterCount() int {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rs, err := c.topicRecords(ctx, c.prefix+"-dlq")
	if errors.Is(err, kerr.UnknownTopicOrPartition) {
		return 0
	}
	if err != nil {
		c.t.Fatalf("read the dead letters: %v", err)
	}
	return len(rs)
}

// checkServicePorts fails t unless the port variables of services.sh
// (PG_PORT, …, or their defaults) name the ports the services run on:
// the outage scenarios stop and start them with services.sh, which would
// start them on other ports, perhaps someone else's.
func checkServicePorts(t *testing.T, env testenv.Env) {
	t.Helper()
	for _, s := range []struct{ variable, def, addr string }{
		{"PG_PORT", "55432", env.PG},
		{"KAFKA_PORT", "59092", env.Kafka},
		{"REDIS_PORT", "56379", env.Redis},
		{"CH_PORT", "58123", env.ClickHouse},
	} {
		want := cmp.Or(os.Getenv(s.variable), s.def)
		if u, err := url.Parse(s.addr); err == nil && u.Port() != "" {
			s.addr = u.Host
		}
		if _, port, _ := strings.Cut(strings.Split(s.addr, ",")[0], ":"); port != want {
			t.Fatalf("the services listen on %s but %s is %s: export the port variables the services were started with (%s=%s, see deploy/local/services.sh -h) before make chaos, which restarts them",
				s.addr, s.variable, want, s.variable, port)
		}
	}
}
