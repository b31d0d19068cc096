package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/walhouse/walhouse/clickhouse"
	"github.com/walhouse/walhouse/harness/testenv"
	"github.com/walhouse/walhouse/schema"
)

// relayoutRun is a table loaded by capture and a sink that keep running,
// under a steady write load, with a configuration file that gives it
// another layout: the stage of walhouse relayout.
type relayoutRun struct {
	p                *pipeline
	table            string
	file             string // the configuration file with the new layout
	capture, sink    *testenv.Proc
	pgQuery, chQuery string
	stop             func() // ends the write load
}

// relayoutLive is the number of live rows of a relayoutRun's table: the
// workload changes rows, never their number.
const relayoutLive = 20_000 - 20_000/50

// newRelayoutRun loads the table, starts the write load (status and
// creation-time changes: moves under the new layout) and gives capture
// the new layout, in the operator's order: capture first, and the
// relayout once the sink loaded what the old capture wrote (rows it moved
// have no tombstone at the new key). The sink keeps running throughout.
func newRelayoutRun(t *testing.T) *relayoutRun {
	p := newPipeline(t)
	r := &relayoutRun{p: p}
	table, qt := p.table("relayoutcmd", `(tenant_id text, id int, status text NOT NULL, created_at timestamptz NOT NULL, amount int, PRIMARY KEY (tenant_id, id))`)
	r.table = table
	p.exec(fmt.Sprintf(`ALTER TABLE %s REPLICA IDENTITY FULL`, qt))
	p.exec(fmt.Sprintf(`INSERT INTO %s SELECT 't' || (i %% 7), i, (ARRAY['new', 'paid', 'sent'])[1 + i %% 3], '2026-01-01 00:00:00+00'::timestamptz + (i %% 90) * interval '1 day', i FROM generate_series(1, 20000) i`, qt))
	r.capture = p.runCapture(p.captureArgs([]string{table}))
	r.sink = p.sink()
	r.pgQuery = fmt.Sprintf(`SELECT tenant_id, id::text, status, (extract(epoch FROM created_at) * 1000000)::bigint::text, coalesce(amount::text, 'NULL') FROM %s AS t ORDER BY t.tenant_id, t.id`, qt)
	r.chQuery = fmt.Sprintf("SELECT tenant_id, toString(id), status, toString(toUnixTimestamp64Micro(created_at)), ifNull(toString(amount), 'NULL')"+
		" FROM `%s`.`%s` FINAL WHERE _is_deleted = 0 ORDER BY tenant_id, id", p.database, table)
	p.exec(fmt.Sprintf(`DELETE FROM %s WHERE id %% 50 = 0`, qt))
	p.converge(r.pgQuery, r.chQuery, r.capture, r.sink)

	r.stop = p.keepWriting(20*time.Millisecond, func(k int) string {
		return fmt.Sprintf(`UPDATE %s SET status = (ARRAY['new', 'paid', 'sent', 'held'])[1 + %d %% 4], created_at = created_at + interval '17 days', amount = amount + 1 WHERE id %% 97 = %d`, qt, k, k%97)
	})
	t.Cleanup(r.stop)
	r.file = filepath.Join(t.TempDir(), "walhouse.yaml")
	// Partitions by an immutable column, as docs/shaping-tables.md
	// advises: a move's tombstone and row then land in one part, which an
	// insert makes visible at once (an insert into two partitions is not
	// atomic, relayout or not).
	cfg := fmt.Sprintf("layout:\n  public.%s:\n    order_by: [tenant_id, status, created_at, id]\n    partition_by: cityHash64(tenant_id) %% 4\n"+
		"kafka:\n  brokers: [%s]\nclickhouse:\n  url: %s\n  database: %s\ntopics:\n  prefix: %s\n", table, p.env.Kafka, p.env.ClickHouse, p.database, p.prefix)
	if err := os.WriteFile(r.file, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	r.capture.Kill()
	p.caughtUp(p.group, p.prefix+".public."+table, r.sink)
	r.capture = p.runCapture(append([]string{"--config", r.file}, p.captureArgs([]string{table})...))
	// The sink loads what the new capture streams before the relayout.
	before := p.chInt(fmt.Sprintf("SELECT count() FROM `%s`.`%s`", p.database, table))
	if err := testenv.Eventually(context.Background(), 60*time.Second, func(context.Context) error {
		if n := p.chInt(fmt.Sprintf("SELECT count() FROM `%s`.`%s`", p.database, table)); n < before+1000 {
			return fmt.Errorf("%d rows, waiting for %d", n, before+1000)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return r
}

// sample samples FINAL of the run's table (sampleFinal).
func (r *relayoutRun) sample(t *testing.T) (done func()) {
	return sampleFinal(t, r.p, r.table, relayoutLive)
}

// sampleFinal samples FINAL of table until the returned function is
// called, which reports every wrong sample: each must hold every one of
// the live rows exactly once, and never an older version of a row than a
// sample before (every change of the relayout tests' workloads raises an
// amount, so their sum under FINAL never falls; a change loaded into the
// old table between the copy and the swap and missing from the new table
// would lower it).
func sampleFinal(t *testing.T, p *pipeline, table string, live uint64) (done func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var (
		wg      sync.WaitGroup
		samples int
		bad     []string
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		tbl := fmt.Sprintf("`%s`.`%s`", p.database, table)
		q := fmt.Sprintf("SELECT count(), uniqExact(tenant_id, id), toInt64(sum(ifNull(amount, 0))) FROM %s FINAL WHERE _is_deleted = 0", tbl)
		// The workloads delete only rows whose id is a multiple of 50: any
		// other row missing from FINAL is a row lost, and its versions say
		// how (which one won, from which part).
		lost := fmt.Sprintf("SELECT tenant_id, toString(id), toString(arraySort(groupArray(tuple(_version, _is_deleted, status, _part)))) FROM %[1]s"+
			" WHERE id %% 50 != 0 AND (tenant_id, id) NOT IN (SELECT tenant_id, id FROM %[1]s FINAL WHERE _is_deleted = 0) GROUP BY tenant_id, id LIMIT 3", tbl)
		described := false
		var last int64
		for ctx.Err() == nil {
			var n, distinct uint64
			var sum int64
			err := p.ch.QueryRow(ctx, q).Scan(&n, &distinct, &sum)
			now := time.Now().UTC().Format("15:04:05.000 ")
			switch {
			case ctx.Err() != nil:
			case err != nil:
				bad = append(bad, now+err.Error())
			case n != live || distinct != live:
				bad = append(bad, now+fmt.Sprintf("%d rows, %d distinct", n, distinct))
				if !described {
					described = true
					rows, err := chRows(ctx, p.ch, lost, nil)
					t.Logf("%s: rows deleted at FINAL that the workload never deletes, with their versions: %v %v", now, rows, err)
				}
			case sum < last:
				bad = append(bad, now+fmt.Sprintf("sum of amounts fell from %d to %d: changes seen before are gone", last, sum))
			default:
				last = sum
				samples++
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	return func() {
		t.Helper()
		cancel()
		wg.Wait()
		t.Logf("%d samples of FINAL during the relayout", samples)
		if len(bad) > 0 {
			t.Errorf("%d samples were wrong: %s", len(bad), strings.Join(bad, "; "))
		}
		if samples == 0 {
			t.Error("no sample of FINAL succeeded")
		}
	}
}

// relayout runs walhouse relayout on the table with extra arguments and
// environment env (NAME=value, may be empty) until it exits.
func (r *relayoutRun) relayout(t *testing.T, env string, extra ...string) (*testenv.Proc, error) {
	args := append([]string{"--config", r.file, "relayout", "public." + r.table}, extra...)
	var proc *testenv.Proc
	if env == "" {
		proc = testenv.Start(t, "relayout", walhouseBin, args...)
	} else {
		proc = testenv.Start(t, "relayout ("+env+")", "env", append([]string{env, walhouseBin}, args...)...)
	}
	return proc, proc.Wait(3 * time.Minute)
}

// finish ends the write load and checks that FINAL equals PostgreSQL,
// the table has the new shape and no forwarding view is left.
func (r *relayoutRun) finish(t *testing.T, done func()) {
	time.Sleep(2 * time.Second)
	r.stop()
	r.p.convergeWithin(3*time.Minute, r.pgQuery, r.chQuery, r.capture, r.sink)
	done()
	var sortingKey, partitionKey string
	q := fmt.Sprintf("SELECT sorting_key, partition_key FROM system.tables WHERE database = %s AND name = %s", schema.QuoteString(r.p.database), schema.QuoteString(r.table))
	if err := r.p.ch.QueryRow(context.Background(), q).Scan(&sortingKey, &partitionKey); err != nil {
		t.Fatal(err)
	}
	if sortingKey != "tenant_id, status, created_at, id" || partitionKey != "cityHash64(tenant_id) % 4" {
		t.Errorf("sorting key %q, partition key %q; want the new layout's", sortingKey, partitionKey)
	}
	left := fmt.Sprintf("SELECT count() FROM system.tables WHERE database = %s AND name IN (%s, %s)", schema.QuoteString(r.p.database),
		schema.QuoteString(clickhouse.RelayoutForwardName(r.table)), schema.QuoteString(clickhouse.RelayoutBuildName(r.table)))
	if n := r.p.chInt(left); n != 0 {
		t.Errorf("the forwarding view or the building table is still there")
	}
}

// TestIntegrationRelayoutCommand runs `walhouse relayout` as a process of
// its own while capture and a sink keep streaming and loading the table
// under a steady write load (docs/shaping-tables.md#changing-a-layout):
// the sink inserts into the old table between the copy and the swap (the
// command is held there, and right after the swap, by pause failpoints). A
// reader samples FINAL the whole time (relayoutRun.sample: every sample
// exact), the command exits 0 with the table in its new shape, and FINAL
// ends equal to PostgreSQL. A second run finds the layout in place and
// says so; a table walhouse does not know is refused.
func TestIntegrationRelayoutCommand(t *testing.T) {
	r := newRelayoutRun(t)
	done := r.sample(t)
	// Held between the copy and the swap, and right after the swap: the
	// sink inserts into the old table after the copy read it, and readers
	// read the new table a while before the catch-up after the swap.
	proc, err := r.relayout(t, "WALHOUSE_FAILPOINTS=relayout.copied=pause:3s,relayout.swapped=pause:2s")
	if err != nil {
		t.Fatalf("walhouse relayout: %v\n%s", err, proc.Output())
	}
	out := proc.Output()
	t.Logf("walhouse relayout:\n%s", out)
	if !strings.Contains(out, "relayouted from ORDER BY tenant_id, id, PARTITION BY (none) to ORDER BY tenant_id, status, created_at, id, PARTITION BY cityHash64(`tenant_id`) % 4") {
		t.Errorf("walhouse relayout did not say what it did:\n%s", out)
	}
	// The sink loaded into the old table between the copy and the swap:
	// the parts the catch-up found (merges of the old table are stopped).
	var caughtUp int
	if m := regexp.MustCompile(`(\d+) parts caught up`).FindStringSubmatch(out); m != nil {
		caughtUp, _ = strconv.Atoi(m[1])
	}
	if caughtUp == 0 {
		t.Errorf("no part of the old table was caught up: the sink did not load between the copy and the swap, the test proves nothing")
	}
	r.finish(t, done)

	again, err := r.relayout(t, "", "--drop-old")
	if err != nil {
		t.Fatalf("walhouse relayout again: %v\n%s", err, again.Output())
	}
	if !strings.Contains(again.Output(), "already in its layout") {
		t.Errorf("a second relayout did not say the table has its layout:\n%s", again.Output())
	}
	unknown := testenv.Start(t, "relayout unknown", walhouseBin, "--config", r.file, "relayout", "public.no_such_table_"+r.table)
	if err := unknown.Wait(time.Minute); err == nil || !strings.Contains(unknown.Output(), "unknown to walhouse") {
		t.Errorf("walhouse relayout of an unknown table: %v\n%s", err, unknown.Output())
	}
}

// TestIntegrationRelayoutCommandResumes kills walhouse relayout (as kill
// -9 would) before its swap, with the forwarding view in place, and then
// right after it, while the sink keeps loading; each run after a crash
// goes on from what the crash left, readers see every row once
// throughout, and FINAL ends equal to PostgreSQL in the new shape.
func TestIntegrationRelayoutCommandResumes(t *testing.T) {
	r := newRelayoutRun(t)
	done := r.sample(t)
	for _, point := range []string{"relayout.copied", "relayout.swapped"} {
		proc, err := r.relayout(t, "WALHOUSE_FAILPOINTS="+point+"=crash")
		if err == nil || !strings.Contains(proc.Output(), "crashing at "+point) {
			t.Fatalf("walhouse relayout did not crash at %s: %v\n%s", point, err, proc.Output())
		}
		// The sink loads on after the crash.
		time.Sleep(2 * time.Second)
	}
	proc, err := r.relayout(t, "")
	if err != nil {
		t.Fatalf("walhouse relayout after the crashes: %v\n%s", err, proc.Output())
	}
	if !strings.Contains(proc.Output(), "finished a relayout interrupted after its swap") {
		t.Errorf("walhouse relayout did not say it finished the interrupted one:\n%s", proc.Output())
	}
	r.finish(t, done)
	kept := clickhouse.RelayoutKeptName(r.table)
	if n := r.p.chInt(fmt.Sprintf("SELECT count() FROM `%s`.`%s` FINAL WHERE _is_deleted = 0", r.p.database, kept)); n != relayoutLive {
		t.Errorf("the kept old table has %d rows, want %d", n, relayoutLive)
	}
}
