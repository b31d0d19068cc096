package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walhouse/walhouse/harness/testenv"
)

// The scale-out tests (docs/scale-out.md): several `walhouse sink`
// processes in one consumer group, and several captures, each with its own
// slot and publication, feeding one pipeline.

// groupSink is one `walhouse sink` process of a consumer group with the
// member id it joined under and the address of its metrics.
type groupSink struct {
	name, member, metrics string
	proc                  *testenv.Proc
}

// joinSink starts a sink named name with flags, and waits until it joined
// the pipeline's group: the group has a member it did not have before.
// crashAt, when not empty, is the fault point the sink dies at like kill -9
// (sinkCrashingAt); joinSink then returns once it died there, its member
// still in the group.
func (p *pipeline) joinSink(name, crashAt string, flags ...string) *groupSink {
	p.t.Helper()
	before := p.members()
	s := &groupSink{name: name, metrics: testenv.FreeAddr(p.t)}
	flags = append(flags, "--metrics-addr", s.metrics)
	if crashAt != "" {
		s.proc = p.sinkCrashingAt(crashAt, flags...)
	} else {
		s.proc = killAtEnd(p.t, testenv.Start(p.t, name, walhouseBin, p.sinkArgs(flags...)...))
	}
	err := testenv.Eventually(context.Background(), 60*time.Second, func(context.Context) error {
		for _, m := range p.members() {
			if !slices.Contains(before, m) {
				s.member = m
				return nil
			}
		}
		if crashAt == "" {
			if err := exited(s.proc); err != nil {
				return err
			}
		}
		return fmt.Errorf("%s has not joined group %s yet", name, p.group)
	})
	if err != nil {
		p.t.Fatalf("%v\n%s", err, s.proc.Output())
	}
	return s
}

// loaded returns the records the sink loaded into the tables so far.
func (s *groupSink) loaded(t *testing.T, tables ...sinkTable) float64 {
	t.Helper()
	n := 0.0
	for _, tb := range tables {
		n += metric(t, s.metrics, fmt.Sprintf(`%s{table="public.%s"}`, seriesLoaded, tb.name))
	}
	return n
}

// waitLoading waits until each sink loaded some of the tables' records.
func waitLoading(t *testing.T, sinks []*groupSink, tables ...sinkTable) {
	t.Helper()
	for _, s := range sinks {
		err := testenv.Eventually(context.Background(), 60*time.Second, func(context.Context) error {
			if err := exited(s.proc); err != nil {
				return err
			}
			if s.loaded(t, tables...) == 0 {
				return fmt.Errorf("%s has loaded nothing yet", s.name)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("%v\n%s", err, s.proc.Output())
		}
	}
}

// procs returns the sinks' processes, for the waits that fail at once when
// one of them exits.
func procs(sinks []*groupSink, more ...*testenv.Proc) []*testenv.Proc {
	out := slices.Clone(more)
	for _, s := range sinks {
		out = append(out, s.proc)
	}
	return out
}

// scaleTenants is how many tenants mixedWorkload spreads its rows over.
const scaleTenants = 16

// mixedWorkload returns the statement keepWriting runs as transaction k:
// one transaction (a multi-statement query is one) that, in each of tables,
// inserts 32 rows spread over 16 tenants, updates one in four of the rows
// of the last ten transactions, deletes one in thirteen of older rows,
// inserts some of the keys deleted before that again, and changes one row
// twice. A row's tenant follows from its id, so a key never moves.
func mixedWorkload(tables ...sinkTable) func(k int) string {
	const n = 32
	return func(k int) string {
		var b strings.Builder
		first := k * n
		for _, tb := range tables {
			fmt.Fprintf(&b, `INSERT INTO %[1]s (tenant_id, id, amount, status, qty, note, updated_at)
				SELECT 't' || lpad((g %% %[4]d)::text, 2, '0'), g, g * 0.25, 'new', 1, CASE WHEN g %% 3 = 0 THEN NULL ELSE 'row ' || g END,
				       '2026-01-01 00:00:00+00'::timestamptz + g * interval '1 second'
				FROM generate_series(%[2]d, %[2]d + %[3]d - 1) g;
			UPDATE %[1]s SET qty = qty + 1, amount = amount + 0.5, status = status || '+', note = NULL, updated_at = updated_at + interval '1 millisecond'
				WHERE id >= %[5]d AND id %% 4 = %[6]d;
			DELETE FROM %[1]s WHERE id BETWEEN %[7]d AND %[8]d AND id %% 13 = %[9]d;
			INSERT INTO %[1]s (tenant_id, id, amount, status, qty, updated_at)
				SELECT 't' || lpad((g %% %[4]d)::text, 2, '0'), g, 1, 'back', 0, '2026-02-01 00:00:00+00'
				FROM generate_series(%[10]d, %[8]d) g WHERE g %% 13 = %[11]d
				ON CONFLICT (tenant_id, id) DO NOTHING;
			UPDATE %[1]s SET status = 'first' WHERE id = %[2]d + 1;
			UPDATE %[1]s SET status = 'second', qty = 2 WHERE id = %[2]d + 1;
			`, tb.quoted, first, n, scaleTenants,
				first-10*n, k%4, // updates
				first-30*n, first-20*n, k%13, // deletes
				max(first-60*n, 0), (k+5)%13) // re-inserts
		}
		return b.String()
	}
}

// checkWorkload fails the test unless the workload wrote what it should
// have: keepWriting ignores errors, so a broken statement would otherwise
// leave a test that compares nothing.
func (p *pipeline) checkWorkload(tables ...sinkTable) {
	p.t.Helper()
	for _, tb := range tables {
		var rows, tenants, updated, twice, back int64
		err := p.pg.QueryRow(context.Background(), fmt.Sprintf(`SELECT count(*), count(DISTINCT tenant_id),
			count(*) FILTER (WHERE status LIKE '%%+'), count(*) FILTER (WHERE status = 'second'), count(*) FILTER (WHERE status LIKE 'back%%')
			FROM %s`, tb.quoted)).Scan(&rows, &tenants, &updated, &twice, &back)
		if err != nil {
			p.t.Fatal(err)
		}
		p.t.Logf("%s: %d rows of %d tenants, %d updated, %d changed twice in a transaction, %d re-inserted after a delete", tb.name, rows, tenants, updated, twice, back)
		if tenants != scaleTenants || updated == 0 || twice == 0 || back == 0 {
			p.t.Fatalf("the workload did not write what it should have into %s (do its statements fail?)", tb.name)
		}
	}
}

// stopMerges stops ClickHouse's background merges of the tables, which
// must exist, so that a row version inserted twice from then on stays
// visible to noRowTwice: a merge would remove it before it is counted.
// exactlyOnce starts them again.
func (p *pipeline) stopMerges(tables ...sinkTable) {
	p.t.Helper()
	for _, tb := range tables {
		q := fmt.Sprintf("SYSTEM STOP MERGES `%s`.`%s`", p.database, tb.name)
		if err := testenv.Eventually(context.Background(), 30*time.Second, func(ctx context.Context) error { return p.ch.Exec(ctx, q) }); err != nil {
			p.t.Fatalf("%s: %v", q, err)
		}
	}
}

// exactlyOnce ends a scale-out test: ClickHouse FINAL equals PostgreSQL
// row for row; no row version was inserted twice since stopMerges; after
// OPTIMIZE … FINAL a plain read (no FINAL) equals PostgreSQL too, with one
// row per key.
func (p *pipeline) exactlyOnce(tables []sinkTable, procs ...*testenv.Proc) {
	p.t.Helper()
	for _, tb := range tables {
		p.converge(tb.pgQuery, tb.chQuery, procs...)
	}
	for _, tb := range tables {
		p.noRowTwice(tb)
		table := fmt.Sprintf("`%s`.`%s`", p.database, tb.name)
		p.t.Logf("%s: %d rows in ClickHouse before OPTIMIZE FINAL", tb.name, p.rawCount(tb))
		p.chExec("SYSTEM START MERGES "+table, nil)
		p.chExec("OPTIMIZE TABLE "+table+" FINAL", nil)
		plain := strings.Replace(tb.chQuery, " FINAL WHERE ", " WHERE ", 1)
		if plain == tb.chQuery {
			p.t.Fatalf("no FINAL to leave out in %s", tb.chQuery)
		}
		p.converge(tb.pgQuery, plain, procs...)
		if n := p.chInt(fmt.Sprintf("SELECT count() - uniqExact(tuple(tenant_id, id)) FROM %s", table)); n != 0 {
			p.t.Errorf("%s: %d older versions left after OPTIMIZE FINAL", tb.name, n)
		}
	}
}

// Three `walhouse sink` processes in one consumer group load one pipeline
// (two tables of four partitions, sixteen tenants) while a writer keeps
// inserting, updating and deleting. One sink is killed with SIGKILL at an
// arbitrary moment, another joins and dies like kill -9 between the
// inserts of its first batch and their offset commit, a third takes over.
// The sinks share Layer 2, as a group in production does. Every record of
// the dead sinks' batches is loaded once: ClickHouse FINAL equals
// PostgreSQL, no version is in ClickHouse twice, and after OPTIMIZE FINAL a
// plain read equals PostgreSQL too.
func TestIntegrationScaleOutSinks(t *testing.T) {
	p := newPipeline(t)
	p.dropTopicsAtEnd()
	tables := []sinkTable{p.newSinkTable(), p.newSinkTable()}
	capture := p.runCapture(p.captureArgs([]string{tables[0].name, tables[1].name}, "--partitions", "4"))
	flags := p.layer2Flags() // one dedup memory for the whole group
	stop := p.keepWriting(100*time.Millisecond, mixedWorkload(tables...))

	a := p.joinSink("sink A", "", flags...)
	b := p.joinSink("sink B", "", flags...)
	c := p.joinSink("sink C", "", flags...)
	waitLoading(t, []*groupSink{a, b, c}, tables...)
	p.stopMerges(tables...)
	t.Logf("three sinks load in group %s: A %v, B %v, C %v records", p.group, a.loaded(t, tables...), b.loaded(t, tables...), c.loaded(t, tables...))

	// kill -9 at an arbitrary moment: C may be anywhere in a batch.
	c.proc.Kill()
	p.evict(c.member) // at once, rather than after its session timeout (45 s)

	// D dies like kill -9 between the inserts of its first batch and their
	// commit: its batch intent stays in the group's offsets, and the sink
	// that gets its partitions must load exactly that batch again.
	d := p.joinSink("sink D", "sink.loaded", flags...)
	left := 0
	for _, tb := range tables {
		left += len(p.intents(tb))
	}
	if left == 0 {
		t.Fatalf("sink D left no batch intent: it did not die mid-batch\n%s", d.proc.Output())
	}
	p.evict(d.member)
	e := p.joinSink("sink E", "", flags...)
	sinks := []*groupSink{a, b, e}
	waitLoading(t, sinks, tables...)
	time.Sleep(3 * time.Second) // some more workload after the takeover, not a condition to wait for
	stop()
	p.checkWorkload(tables...)

	p.exactlyOnce(tables, procs(sinks, capture)...)
	resumed := 0
	for _, s := range sinks {
		resumed += strings.Count(s.proc.Output(), "msg=\"resuming an interrupted batch exactly\"")
		if n := metric(t, s.metrics, seriesMismatches); n != 0 {
			t.Errorf("%s saw %v eventIds reused with another payload", s.name, n)
		}
		if n := metric(t, s.metrics, seriesDeadLetters); n != 0 {
			t.Errorf("%s dead-lettered %v records", s.name, n)
		}
	}
	if resumed == 0 {
		t.Errorf("no sink resumed the batch sink D left behind")
	}
	t.Logf("records loaded: A %v, B %v, E %v; %d interrupted batches resumed exactly", a.loaded(t, tables...), b.loaded(t, tables...), e.loaded(t, tables...), resumed)
}

// shard returns a pipeline for a second capture of p's pipeline: the same
// topics, sink group and ClickHouse database, with a replication slot and a
// publication of its own (dropped when the test ends).
func (p *pipeline) shard() *pipeline {
	q := *p
	q.slot, q.pub = testenv.Name("slot"), testenv.Name("pub")
	p.t.Cleanup(func() {
		ctx := context.Background()
		if err := testenv.DropSlot(ctx, p.pg, q.slot); err != nil {
			p.t.Errorf("drop slot %s: %v", q.slot, err)
		}
		_, _ = p.pg.Exec(ctx, "DROP PUBLICATION IF EXISTS "+pgx.Identifier{q.pub}.Sanitize())
	})
	return &q
}

// Two captures, each with its own slot, publication and table, feed one
// topic prefix and one group of two sinks, while every transaction of the
// writer changes both tables; the second capture is killed with SIGKILL
// and restarted midway. Neither capture's eventIds, state, heartbeats nor
// schemas may collide with the other's: ClickHouse FINAL equals PostgreSQL
// for both tables, no version is there twice, no record is dead-lettered or
// taken for another's duplicate, the restarted capture does not copy its
// table again, and neither capture skipped the other's heartbeats.
func TestIntegrationScaleOutCaptures(t *testing.T) {
	p := newPipeline(t)
	p.dropTopicsAtEnd()
	q := p.shard()
	tables := []sinkTable{p.newSinkTable(), p.newSinkTable()}
	captures := []struct {
		p       *pipeline
		table   sinkTable
		metrics string
		proc    *testenv.Proc
	}{{p: p, table: tables[0]}, {p: q, table: tables[1]}}
	for i := range captures {
		c := &captures[i]
		c.metrics = testenv.FreeAddr(t)
		c.proc = c.p.runCapture(c.p.captureArgs([]string{c.table.name}, "--partitions", "4", "--metrics-addr", c.metrics))
	}
	flags := p.layer2Flags()
	sinks := []*groupSink{p.joinSink("sink A", "", flags...), p.joinSink("sink B", "", flags...)}
	stop := p.keepWriting(100*time.Millisecond, mixedWorkload(tables...))
	waitLoading(t, sinks, tables...)
	p.stopMerges(tables...)
	time.Sleep(2 * time.Second) // more workload, not a condition to wait for

	// The restart reads the unconfirmed tail again, under the same
	// eventIds, and finds its copy done in the state its slot keeps.
	b := &captures[1]
	b.proc.Kill()
	b.p.waitSlotReleased()
	b.metrics = testenv.FreeAddr(t)
	b.proc = b.p.runCapture(b.p.captureArgs([]string{b.table.name}, "--partitions", "4", "--metrics-addr", b.metrics))
	time.Sleep(3 * time.Second) // more workload after the restart
	stop()
	if strings.Contains(b.proc.Output(), "phase=snapshot") {
		t.Errorf("the restarted capture copied its table again:\n%s", b.proc.Output())
	}
	p.checkWorkload(tables...)

	p.exactlyOnce(tables, procs(sinks, captures[0].proc, captures[1].proc)...)
	hits := 0.0
	for _, s := range sinks {
		if n := metric(t, s.metrics, seriesMismatches); n != 0 {
			t.Errorf("%s saw %v eventIds reused with another payload: the captures' eventIds collide", s.name, n)
		}
		if n := metric(t, s.metrics, seriesDeadLetters); n != 0 {
			t.Errorf("%s dead-lettered %v records", s.name, n)
		}
		hits += metric(t, s.metrics, seriesLayer2Hits)
	}
	t.Logf("Layer 2 dropped %v changes the restarted capture produced again", hits)
	for i, c := range captures {
		for _, reason := range []string{"unauthenticated", "misplaced", "malformed"} {
			series := fmt.Sprintf(`walhouse_capture_ignored_messages_total{prefix="walhouse_heartbeat",reason=%q}`, reason)
			if n := metric(t, c.metrics, series); n != 0 {
				t.Errorf("capture %d skipped %v heartbeats as %s", i+1, n, reason)
			}
		}
	}
	// Each capture keeps its snapshot state under its own slot.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rs, err := p.topicRecords(ctx, p.prefix+"-state")
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]bool{}
	for _, r := range rs {
		keys[string(r.Key)] = true
	}
	for _, c := range captures {
		if key := "snapshot/" + c.p.slot + "/public." + c.table.name; !keys[key] {
			t.Errorf("no state %s in %s-state (keys: %v)", key, p.prefix, keys)
		}
	}
}
