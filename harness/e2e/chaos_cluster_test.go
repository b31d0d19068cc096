package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walhouse/walhouse/harness/testenv"
)

// Faults on a three-broker Kafka cluster (`make chaos-cluster`,
// docs/reliability.md "On a Kafka cluster"): each scenario is a chaos
// pipeline (chaos_test.go) whose Kafka is the cluster of
// deploy/local/kafka-cluster.sh, with a steady many-tenant workload while
// brokers are killed, stopped and restarted, and ends in the matrix's
// exact comparison (chaos.verify). It also measures how long capture and
// the sink stood still.

// clusterScenario is one row of the cluster's table.
type clusterScenario struct {
	name string
	run  func(c *clusterChaos)
}

func clusterScenarios() []clusterScenario {
	return []clusterScenario{
		{"leader of the busiest partition killed (kill -9), back after 20 s", (*clusterChaos).killLeader},
		{"leader of capture's re-copy topic killed (kill -9), back after 20 s", (*clusterChaos).killRecopyLeader},
		{"the sink group's coordinator killed (kill -9), down for 60 s", (*clusterChaos).killCoordinator},
		{"rolling restart of the three brokers", (*clusterChaos).rollingRestart},
		{"one broker down for 70 s, then back", (*clusterChaos).brokerDownLong},
		{"active controller killed (kill -9)", (*clusterChaos).killController},
		{"two brokers down at once for 30 s", (*clusterChaos).twoDown},
		{"a sink group of two while leaders move", (*clusterChaos).twoSinksLeadersMove},
	}
}

// clusterResult is one line of the cluster's table: the matrix's counts
// and the stalls.
type clusterResult struct {
	chaosResult
	captureStall, sinkStall time.Duration
	resumed                 string // the time both stages took to move again after the brokers were started ("" where no quorum was lost)
	exits                   int    // capture or sink processes that exited during the faults
}

// TestChaosCluster runs the cluster's scenarios; it needs the cluster
// (WALHOUSE_KAFKA_CLUSTER, which make chaos-cluster sets) and skips
// without it, so make test does not run it.
func TestChaosCluster(t *testing.T) {
	brokers := testenv.RequireKafkaCluster(t)
	testenv.RequireLocal(t, "it kills and starts the brokers with deploy/local/kafka-cluster.sh")
	if got := testenv.Load().Kafka; got != strings.Join(brokers, ",") {
		t.Fatalf("WALHOUSE_KAFKA_BROKERS=%s is not the cluster %s: run it with WALHOUSE_KAFKA_BROKERS=$%s (make chaos-cluster does)", got, strings.Join(brokers, ","), testenv.KafkaClusterEnv)
	}
	cfg := chaosSettings(t)
	var results []clusterResult
	for _, sc := range clusterScenarios() {
		res := clusterResult{chaosResult: chaosResult{scenario: sc.name, layers: "2, 3, token"}}
		t.Run(sc.name, func(t *testing.T) {
			res.ran = true
			c := newClusterChaos(t, cfg, brokers)
			start := time.Now()
			defer func() {
				res.took = time.Since(start)
				res.captureStall, res.sinkStall = c.mon.stalls()
				res.pass = !t.Failed() && res.mismatches == 0 && res.dupsOptimized == 0 && res.deadLetters == 0 && res.doubles == 0
				if !res.pass && !t.Failed() {
					t.Errorf("FAIL: %+v", res)
				}
			}()
			sc.run(c)
			res.exits = c.exits()
			res.resumed = c.resumed
			c.mon.stop()
			c.logWarnings()
			t.Logf("timeline:\n%s", strings.Join(c.mon.timeline, "\n"))
			c.verify(&res.chaosResult)
		})
		if res.ran {
			results = append(results, res)
			if err := writeChaosFile("cluster-progress.md", renderCluster(cfg, results)); err != nil {
				t.Error(err)
			}
		}
	}
	table := renderCluster(cfg, results)
	fmt.Println(table)
	if err := writeChaosFile("cluster-table.md", table); err != nil {
		t.Error(err)
	}
}

// renderCluster renders the cluster's results as a Markdown table.
func renderCluster(cfg chaosConfig, results []clusterResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Kafka cluster faults, %s: three brokers (RF 3, min.insync.replicas=2), a steady workload of %d row changes/s over %d tenants.\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 UTC"), clusterRate, cfg.tenants)
	b.WriteString("| scenario | faults | capture stalled | sink stalled | both moving again after | process exits | rows in PostgreSQL | rows in ClickHouse FINAL | mismatches | doubled versions before OPTIMIZE | duplicates without FINAL after OPTIMIZE | re-published changes | dead letters | time | result |\n")
	b.WriteString("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|\n")
	passed := 0
	for _, r := range results {
		verdict := "FAIL"
		if r.pass {
			verdict = "PASS"
			passed++
		}
		fmt.Fprintf(&b, "| %s | %d | %s | %s | %s | %d | %d | %d | %d | %d | %d | %d | %d | %s | %s |\n", r.scenario, r.faults,
			r.captureStall.Round(100*time.Millisecond), r.sinkStall.Round(100*time.Millisecond), cmpOr(r.resumed, "–"), r.exits,
			r.pgRows, r.chRows, r.mismatches, r.doubles, r.dupsOptimized, r.republished, r.deadLetters, r.took.Round(time.Second), verdict)
	}
	fmt.Fprintf(&b, "\n%d of %d scenarios passed.\n", passed, len(results))
	return b.String()
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// clusterRate is the workload's row changes per second.
const clusterRate = 400

// clusterChaos is a chaos pipeline on the cluster, with its steady
// workload and the stall monitor.
type clusterChaos struct {
	*chaos
	brokers []string
	load    *chaosWriter
	feed    chan struct{} // closed to stop feeding the workload
	fed     sync.WaitGroup
	mon     *stallMonitor
	resumed string
}

func newClusterChaos(t *testing.T, cfg chaosConfig, brokers []string) *clusterChaos {
	c := &clusterChaos{chaos: newChaos(t, cfg), brokers: brokers}
	// Whatever a scenario does, the cluster runs whole again after it.
	t.Cleanup(func() { c.cluster("start") })
	c.cluster("start")
	c.waitInSync()
	// The settings docs/scale-out.md asks for, checked by capture and
	// the sink themselves: a topic that cannot keep an acknowledged
	// record stops them at start.
	c.capArgs = append(c.capArgs, "--replication-factor", "3", "--min-insync-replicas", "2", "--topic-durability", "refuse")
	c.sinkFlags = append(c.sinkFlags, "--topic-durability", "refuse")
	return c
}

// cluster runs deploy/local/kafka-cluster.sh with args and returns its
// output.
func (c *clusterChaos) cluster(args ...string) string {
	c.t.Helper()
	if c.mon != nil && (args[0] == "kill" || args[0] == "stop" || args[0] == "start-node") {
		c.mon.note("kafka-cluster.sh %s", strings.Join(args, " "))
		defer c.mon.note("kafka-cluster.sh %s done", strings.Join(args, " "))
	}
	script := filepath.Join("..", "..", "deploy", "local", "kafka-cluster.sh")
	cmd := exec.Command(script, args...)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		c.t.Fatalf("kafka-cluster.sh %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// begin starts capture, the sinks and the steady workload, waits until
// rows flow, and starts the stall monitor.
func (c *clusterChaos) begin(sinks int) {
	c.t.Helper()
	c.startCapture("")
	for range sinks {
		c.startSink("")
	}
	c.load = c.startWorkload(1<<40, true)
	c.feed = make(chan struct{})
	c.fed.Add(1)
	go func() {
		defer c.fed.Done()
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-c.feed:
				return
			case <-tick.C:
				c.load.allow(clusterRate / 10)
			}
		}
	}()
	c.load.waitChanges(c.t, 2*clusterRate)
	c.mon = c.watch()
	c.hold(10 * time.Second)
}

// end stops the workload, after a last stretch of writing.
func (c *clusterChaos) end() {
	c.t.Helper()
	c.hold(15 * time.Second)
	close(c.feed)
	c.fed.Wait()
	c.load.cancel()
	<-c.load.done
	if c.load.err != nil {
		c.t.Fatal(c.load.err)
	}
}

// hold lets the workload write for d: a fault's length, not a wait for
// a condition.
func (c *clusterChaos) hold(d time.Duration) { time.Sleep(d) }

// down kills cluster node n (kill -9), counts the fault, and starts the
// node again after d.
func (c *clusterChaos) down(n string, d time.Duration) {
	c.cluster("kill", n)
	c.faults++
	c.hold(d)
	c.cluster("start-node", n)
}

// exits counts capture and sink processes that have exited.
func (c *clusterChaos) exits() int {
	n := 0
	if done, _ := c.capture.Exited(); done {
		n++
	}
	for _, s := range c.sinks {
		if done, _ := s.proc.Exited(); done {
			n++
		}
	}
	return n
}

// logWarnings logs the warnings and errors capture and the sinks logged
// during the faults (at most 30 lines each), for the reasons of a stall.
func (c *clusterChaos) logWarnings() {
	procs := []*testenv.Proc{c.capture}
	for _, s := range c.sinks {
		procs = append(procs, s.proc)
	}
	for _, p := range procs {
		var lines []string
		for _, l := range strings.Split(p.Output(), "\n") {
			if strings.Contains(l, "level=WARN") || strings.Contains(l, "level=ERROR") {
				lines = append(lines, l)
			}
		}
		if len(lines) > 30 {
			lines = append(lines[:30], fmt.Sprintf("… and %d more", len(lines)-30))
		}
		if len(lines) > 0 {
			c.t.Logf("%s warned:\n%s", p.Name, strings.Join(lines, "\n"))
		}
	}
}

// admin returns an admin client of the cluster, closed with the test.
func (c *clusterChaos) admin() *kadm.Client {
	c.t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.brokers...))
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}

// waitInSync waits until every partition of every topic has all its
// replicas in sync, as a rolling restart does before the next broker.
func (c *clusterChaos) waitInSync() {
	c.t.Helper()
	adm := c.admin()
	err := testenv.Eventually(context.Background(), 3*time.Minute, func(ctx context.Context) error {
		td, err := adm.ListTopics(ctx)
		if err == nil {
			err = td.Error()
		}
		if err != nil {
			return err
		}
		for _, tp := range td.Sorted() {
			for _, p := range tp.Partitions.Sorted() {
				if len(p.ISR) < len(p.Replicas) || p.Leader < 0 {
					return fmt.Errorf("%s/%d: in sync %v of %v, leader %d", tp.Topic, p.Partition, p.ISR, p.Replicas, p.Leader)
				}
			}
		}
		return nil
	})
	if err != nil {
		c.t.Fatal(err)
	}
}

// busiestLeader returns the broker leading the partition of the
// workload's topic that holds the most records.
func (c *clusterChaos) busiestLeader() (partition, leader int32) {
	c.t.Helper()
	adm := c.admin()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ends, err := adm.ListEndOffsets(ctx, c.sinkTable.topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		c.t.Fatal(err)
	}
	var most int64 = -1
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > most {
			most, partition = o.Offset, o.Partition
		}
	})
	td, err := adm.ListTopics(ctx, c.sinkTable.topic)
	if err == nil {
		err = td.Error()
	}
	if err != nil {
		c.t.Fatal(err)
	}
	return partition, td[c.sinkTable.topic].Partitions[partition].Leader
}

func node(id int32) string { return strconv.Itoa(int(id)) }

// killLeader kills the leader of the busiest partition with SIGKILL and
// starts it again 20 s later.
func (c *clusterChaos) killLeader() {
	c.begin(1)
	p, leader := c.busiestLeader()
	c.t.Logf("partition %d of %s is led by broker %d: kill -9", p, c.sinkTable.topic, leader)
	c.down(node(leader), 20*time.Second)
	c.end()
}

// killRecopyLeader kills the leader of the pipeline's re-copy topic,
// which capture's stream reads every few seconds, and starts it again
// 20 s later.
func (c *clusterChaos) killRecopyLeader() {
	c.begin(1)
	topic := c.prefix + "-recopy"
	td, err := c.admin().ListTopics(context.Background(), topic)
	if err == nil {
		err = td.Error()
	}
	if err != nil {
		c.t.Fatal(err)
	}
	leader := td[topic].Partitions[0].Leader
	c.t.Logf("%s is led by broker %d: kill -9", topic, leader)
	c.down(node(leader), 20*time.Second)
	c.end()
}

// killCoordinator kills the broker that coordinates the sinks' group and
// keeps it down for a minute: the group must move to another coordinator
// and the sink load on without it.
func (c *clusterChaos) killCoordinator() {
	c.begin(1)
	gs, err := c.admin().DescribeGroups(context.Background(), c.group)
	if err == nil {
		err = gs.Error()
	}
	if err != nil {
		c.t.Fatal(err)
	}
	id := gs[c.group].Coordinator.NodeID
	c.t.Logf("group %s is coordinated by broker %d: kill -9", c.group, id)
	c.down(node(id), 60*time.Second)
	c.end()
}

// rollingRestart stops (SIGTERM) and starts each broker in turn, waiting
// for every replica to be in sync before the next, as an upgrade does.
func (c *clusterChaos) rollingRestart() {
	c.begin(1)
	for _, n := range []string{"1", "2", "3"} {
		c.cluster("stop", n)
		c.faults++
		c.cluster("start-node", n)
		c.waitInSync()
		c.hold(5 * time.Second)
	}
	c.end()
}

// brokerDownLong kills one broker for longer than a minute: the other two
// keep min.insync.replicas, and the pipeline must not notice more than a
// leader move.
func (c *clusterChaos) brokerDownLong() {
	c.begin(1)
	_, leader := c.busiestLeader()
	c.down(node(leader), 70*time.Second)
	c.end()
}

// killController kills the active controller of the KRaft quorum with
// SIGKILL and starts it again 15 s later.
func (c *clusterChaos) killController() {
	c.begin(1)
	id := c.cluster("controller")
	if id == "" {
		c.t.Fatal("kafka-cluster.sh controller named no active controller")
	}
	c.t.Logf("active controller: node %s: kill -9", id)
	c.down(id, 15*time.Second)
	c.end()
}

// twoDown kills two brokers at once: the controller quorum and
// min.insync.replicas are both lost, so writes stop; nothing may be lost,
// and capture and the sink must move again on their own once the brokers
// are back (no process restarted meanwhile).
func (c *clusterChaos) twoDown() {
	c.begin(1)
	c.cluster("kill", "1", "2")
	c.faults += 2
	c.hold(30 * time.Second)
	back := time.Now()
	// Both at once: either alone is no quorum, and start-node waits for
	// a node to be in the cluster.
	var wg sync.WaitGroup
	for _, n := range []string{"1", "2"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			script := filepath.Join("..", "..", "deploy", "local", "kafka-cluster.sh")
			if out, err := exec.Command(script, "start-node", n).CombinedOutput(); err != nil {
				c.t.Errorf("kafka-cluster.sh start-node %s: %v\n%s", n, err, out)
			}
		}()
	}
	wg.Wait()
	ready := time.Since(back)
	capAt, sinkAt := c.mon.movedAfter(c.t, back, 5*time.Minute)
	c.resumed = fmt.Sprintf("capture %s, sink %s (the brokers took %s to start)", capAt.Sub(back).Round(100*time.Millisecond), sinkAt.Sub(back).Round(100*time.Millisecond), ready.Round(100*time.Millisecond))
	if n := c.exits(); n > 0 {
		c.t.Errorf("%d of capture and the sink exited instead of waiting for the brokers", n)
	}
	c.end()
}

// twoSinksLeadersMove runs two sinks of one group while brokers are
// killed and started in turn, so the partitions' leaders, and the group's
// coordinator, move under them.
func (c *clusterChaos) twoSinksLeadersMove() {
	c.begin(2)
	for range 2 {
		_, leader := c.busiestLeader()
		c.down(node(leader), 15*time.Second)
		c.waitInSync()
		c.hold(5 * time.Second)
	}
	c.end()
}

// stallMonitor samples capture's confirmed position and the group's
// committed offsets every 250 ms and keeps, for each, the longest time it
// did not move while there was something to move past.
type stallMonitor struct {
	mu                sync.Mutex
	capMoved, sinkMov []time.Time // when each moved (or had nothing to do)
	capMax, sinkMax   time.Duration
	// timeline: the group's state and coordinator, and the faults, as
	// they changed, for the reasons of a stall.
	timeline   []string
	quit, done chan struct{}
}

// note adds an event to the timeline.
func (m *stallMonitor) note(format string, a ...any) {
	m.mu.Lock()
	m.timeline = append(m.timeline, time.Now().UTC().Format("15:04:05.0")+" "+fmt.Sprintf(format, a...))
	m.mu.Unlock()
}

func (c *clusterChaos) watch() *stallMonitor {
	c.t.Helper()
	m := &stallMonitor{quit: make(chan struct{}), done: make(chan struct{})}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, c.env.PG)
	if err != nil {
		c.t.Fatal(err)
	}
	// A fresh client after every failed sample: a client's cached view of
	// the group's coordinator must not make the sink look stalled.
	newClient := func() (*kgo.Client, *kadm.Client) {
		cl, err := kgo.NewClient(kgo.SeedBrokers(c.brokers...), kgo.RequestRetries(0))
		if err != nil {
			c.t.Fatal(err)
		}
		return cl, kadm.NewClient(cl)
	}
	cl, adm := newClient()
	slot, group, topic := c.slot, c.group, c.sinkTable.topic
	go func() {
		defer close(m.done)
		defer func() { cl.Close() }()
		defer conn.Close(context.Background())
		var lastCap, lastGroup string
		var lastSink int64 = -1
		capSince, sinkSince := time.Now(), time.Now()
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-m.quit:
				return
			case <-tick.C:
			}
			now := time.Now()
			qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			var confirmed, current string
			if err := conn.QueryRow(qctx, "SELECT confirmed_flush_lsn::text, pg_current_wal_lsn()::text FROM pg_replication_slots WHERE slot_name = $1", slot).Scan(&confirmed, &current); err == nil {
				if confirmed != lastCap || confirmed == current {
					lastCap, capSince = confirmed, now
					m.moved(&m.capMoved, now)
				}
			}
			committed, sum, ends := int64(0), false, int64(0)
			if offs, err := adm.FetchOffsets(qctx, group); err == nil && offs.Error() == nil {
				if endsOf, err := adm.ListEndOffsets(qctx, topic); err == nil && endsOf.Error() == nil {
					sum = true
					endsOf.Each(func(o kadm.ListedOffset) {
						ends += o.Offset
						if at, ok := offs.Lookup(o.Topic, o.Partition); ok {
							committed += at.At
						}
					})
				}
			}
			state := "unknown"
			gs, err := adm.DescribeGroups(qctx, group)
			if err == nil {
				if g, ok := gs[group]; ok && g.Err == nil {
					state = fmt.Sprintf("%s, %d members, coordinator %d", g.State, len(g.Members), g.Coordinator.NodeID)
				} else if ok {
					state = fmt.Sprintf("unknown (%v)", g.Err)
				}
			} else {
				state = fmt.Sprintf("unknown (%v)", err)
			}
			if !sum || strings.HasPrefix(state, "unknown") {
				cl.Close()
				cl, adm = newClient()
			}
			if state != lastGroup {
				m.note("group: %s", state)
				lastGroup = state
			}
			cancel()
			if sum && (committed != lastSink || committed >= ends) {
				lastSink, sinkSince = committed, now
				m.moved(&m.sinkMov, now)
			}
			m.mu.Lock()
			if d := now.Sub(sinkSince); d > m.sinkMax && d >= 5*time.Second && m.sinkMax < 5*time.Second {
				m.timeline = append(m.timeline, now.UTC().Format("15:04:05.0")+" sink: no commit for 5 s")
			}
			m.capMax = max(m.capMax, now.Sub(capSince))
			m.sinkMax = max(m.sinkMax, now.Sub(sinkSince))
			m.mu.Unlock()
		}
	}()
	c.t.Cleanup(m.stop)
	return m
}

func (m *stallMonitor) moved(at *[]time.Time, now time.Time) {
	m.mu.Lock()
	*at = append(*at, now)
	m.mu.Unlock()
}

// stop ends the sampling; stalls stay readable.
func (m *stallMonitor) stop() {
	select {
	case <-m.quit:
	default:
		close(m.quit)
	}
	<-m.done
}

// stalls returns the longest stall of capture and of the sink.
func (m *stallMonitor) stalls() (capture, sink time.Duration) {
	if m == nil {
		return 0, 0
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.capMax, m.sinkMax
}

// movedAfter waits until capture and the sink have both moved after t,
// and returns when each first did.
func (m *stallMonitor) movedAfter(tt *testing.T, t time.Time, timeout time.Duration) (capture, sink time.Time) {
	tt.Helper()
	first := func(at []time.Time) (time.Time, bool) {
		i := slices.IndexFunc(at, func(x time.Time) bool { return x.After(t) })
		if i < 0 {
			return time.Time{}, false
		}
		return at[i], true
	}
	err := testenv.Eventually(context.Background(), timeout, func(context.Context) error {
		m.mu.Lock()
		defer m.mu.Unlock()
		var ok1, ok2 bool
		capture, ok1 = first(m.capMoved)
		sink, ok2 = first(m.sinkMov)
		if !ok1 || !ok2 {
			return fmt.Errorf("since the brokers came back: capture moved %v, the sink moved %v", ok1, ok2)
		}
		return nil
	})
	if err != nil {
		tt.Fatal(err)
	}
	return capture, sink
}
