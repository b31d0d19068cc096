package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/walhouse/walhouse/harness/testenv"
	"github.com/walhouse/walhouse/record"
)

// TRUNCATE reaches ClickHouse: rows of both tenants written before it go,
// also those written earlier in its own transaction; rows written after it
// in the same transaction and later stay, even with the keys the truncated
// rows had; a TRUNCATE of two tables at once empties both. ClickHouse FINAL
// equals PostgreSQL after each step.
func TestIntegrationTruncate(t *testing.T) {
	p := newPipeline(t)
	a, b := p.newSinkTable(), p.newSinkTable()
	capture := p.startCapture(a.name, b.name)
	sink := p.sink()

	p.change(a, 0)
	p.change(b, 0)
	p.converge(a.pgQuery, a.chQuery, capture, sink)
	p.converge(b.pgQuery, b.chQuery, capture, sink)
	if n := p.chInt(fmt.Sprintf("SELECT count() FROM `%s`.`%s` FINAL WHERE _is_deleted = 0 AND tenant_id = 'globex'", p.database, a.name)); n == 0 {
		t.Fatal("no rows of the second tenant before the TRUNCATE: the test would prove nothing")
	}

	p.exec(truncateInTransaction(a))
	p.change(a, 1) // after it: new rows, updates, a delete
	p.converge(a.pgQuery, a.chQuery, capture, sink)

	p.exec(fmt.Sprintf("TRUNCATE %s, %s", a.quoted, b.quoted))
	p.change(b, 2)
	p.converge(a.pgQuery, a.chQuery, capture, sink)
	p.converge(b.pgQuery, b.chQuery, capture, sink)

	// Every partition got a marker per TRUNCATE of its table.
	for _, c := range []struct {
		tb   sinkTable
		want int
	}{{a, 2}, {b, 1}} {
		got := p.markers(c.tb.topic)
		for part := int32(0); part < 3; part++ {
			if got[part] != c.want {
				t.Errorf("partition %d of %s holds %d truncate markers, want %d (all: %v)", part, c.tb.topic, got[part], c.want, got)
			}
		}
	}
}

// truncateInTransaction returns a transaction that changes tb, truncates
// it, then writes rows again, some with the keys that were truncated.
func truncateInTransaction(tb sinkTable) string {
	return fmt.Sprintf(`BEGIN;
		UPDATE %[1]s SET status = 'before truncate', updated_at = updated_at + interval '1 second' WHERE id %% 2 = 0;
		INSERT INTO %[1]s (tenant_id, id, amount, status, qty, note, updated_at)
		SELECT tenant, 5000 + g, g, 'inserted before truncate', g, NULL, '2026-02-01 00:00:00+00'::timestamptz
		FROM generate_series(1, 10) g, (VALUES ('acme'), ('globex')) AS t(tenant);
		TRUNCATE %[1]s;
		INSERT INTO %[1]s (tenant_id, id, amount, status, qty, note, updated_at)
		SELECT tenant, g, g * 2, 'after truncate', g, 'same key as a truncated row', '2026-03-01 00:00:00+00'::timestamptz + g * interval '1 minute'
		FROM generate_series(1, 30) g, (VALUES ('acme'), ('globex')) AS t(tenant);
		UPDATE %[1]s SET qty = qty * 10 WHERE id %% 5 = 0;
		DELETE FROM %[1]s WHERE id = 13;
		COMMIT`, tb.quoted)
}

// markers counts the truncate markers in each partition of topic.
func (p *pipeline) markers(topic string) map[int32]int {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rs, err := p.topicRecords(ctx, topic)
	if err != nil {
		p.t.Fatal(err)
	}
	out := map[int32]int{}
	for _, r := range rs {
		for _, h := range r.Headers {
			if h.Key == record.HeaderTruncate {
				out[r.Partition]++
			}
		}
	}
	return out
}

// A sink killed after loading the records before a truncate marker and
// before applying it, then one killed right after applying it (both before
// committing), leave ClickHouse as if neither had crashed: the batches
// repeated with the same tokens are dropped (Layer 2 is off, so only the
// tokens prevent doubles) and the truncate, applied again, changes nothing.
func TestIntegrationSinkCrashAroundTruncate(t *testing.T) {
	p, tb, capture := capturedSinkTable(t)
	sink := p.sink("--dedup-addr", "off")
	p.change(tb, 0)
	p.converge(tb.pgQuery, tb.chQuery, capture, sink)
	sink.Kill()
	p.evictMembers()

	p.exec(truncateInTransaction(tb))
	n := p.change(tb, 1)
	p.waitProduced(tb.topic, n)
	if err := testenv.Eventually(context.Background(), 60*time.Second, func(context.Context) error {
		if got := p.markers(tb.topic); len(got) < 3 {
			return fmt.Errorf("markers in %d partitions", len(got))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	p.crashSinkAt("sink.truncating", "--dedup-addr", "off")
	p.crashSinkAt("sink.truncated", "--dedup-addr", "off")
	t.Logf("batch intents after the crashes: %v", p.intents(tb))

	sink = p.sink("--dedup-addr", "off")
	p.converge(tb.pgQuery, tb.chQuery, capture, sink)
	p.noRowTwice(tb)
}

// crashSinkAt runs a sink that exits like kill -9 at the named fault point,
// waits for it to die there and evicts it (evictMembers).
func (p *pipeline) crashSinkAt(point string, extra ...string) {
	p.t.Helper()
	p.sinkCrashingAt(point, extra...)
	p.evictMembers()
}

// sinkCrashingAt runs a sink that exits like kill -9 at the named fault
// point ("sink.loaded": after the inserts of its first flush, before the
// offset commit) and waits for it to die there. Its member stays in the
// group until evicted.
func (p *pipeline) sinkCrashingAt(point string, extra ...string) *testenv.Proc {
	p.t.Helper()
	env, err := exec.LookPath("env")
	if err != nil {
		p.t.Fatal(err)
	}
	args := append([]string{"WALHOUSE_FAILPOINTS=" + point + "=crash", walhouseBin}, p.sinkArgs(extra...)...)
	proc := killAtEnd(p.t, testenv.Start(p.t, "sink crashing at "+point, env, args...))
	if err := proc.Wait(90 * time.Second); err == nil || !strings.Contains(proc.Output(), "crashing at "+point) {
		p.t.Fatalf("the sink did not crash at %s (exit: %v):\n%s", point, err, proc.Output())
	}
	return proc
}
