package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/walhouse/walhouse/harness/testenv"
)

// chaosWriter commits an insert/update/delete workload over many tenants
// on the chaos table from a connection of its own, reconnecting when
// PostgreSQL goes away, until it committed its total of row changes. A
// paced writer writes only up to what allow granted so far, so that faults
// can be spread over the workload.
type chaosWriter struct {
	changes atomic.Int64 // row changes committed
	allowed atomic.Int64
	total   int64
	cancel  context.CancelFunc
	done    chan struct{}
	err     error
}

// startWorkload starts a writer of total row changes on the chaos table;
// a paced one writes nothing before allow.
func (c *chaos) startWorkload(total int64, paced bool) *chaosWriter {
	c.t.Helper()
	if !c.held {
		// One row (id 0, which the workload never uses) for the sink to
		// create the table with.
		c.exec(fmt.Sprintf(`INSERT INTO %s (tenant_id, id, status, updated_at) VALUES ($1, 0, 'first', '2026-01-01 00:00:00+00')`, c.sinkTable.quoted), chaosTenant(0))
		c.holdMerges()
		c.held = true
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &chaosWriter{total: total, cancel: cancel, done: make(chan struct{})}
	if !paced {
		w.allowed.Store(total)
	}
	go func() {
		defer close(w.done)
		w.err = w.run(ctx, c.env.PG, c.sinkTable.quoted, c.cfg.tenants)
	}()
	c.t.Cleanup(func() { cancel(); <-w.done })
	return w
}

// allow lets a paced writer commit n more row changes.
func (w *chaosWriter) allow(n int64) { w.allowed.Add(n) }

// waitChanges waits until the writer committed at least n row changes.
func (w *chaosWriter) waitChanges(t *testing.T, n int64) {
	t.Helper()
	err := testenv.Eventually(context.Background(), 10*time.Minute, func(context.Context) error {
		select {
		case <-w.done:
			if w.err != nil {
				return fmt.Errorf("the writer stopped: %w", w.err)
			}
			return nil
		default:
		}
		if got := w.changes.Load(); got < n {
			return fmt.Errorf("the writer committed %d of %d row changes", got, n)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// finish waits until the writer committed its total.
func (w *chaosWriter) finish(t *testing.T) {
	t.Helper()
	w.allow(w.total)
	select {
	case <-w.done:
	case <-time.After(time.Hour):
		t.Fatalf("the writer committed %d of %d row changes in an hour", w.changes.Load(), w.total)
	}
	if w.err != nil {
		t.Fatal(w.err)
	}
}

func (w *chaosWriter) run(ctx context.Context, pgURL, table string, tenants int) error {
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 17))
	next := make([]int64, tenants) // the next new id of each tenant
	for i := range next {
		next[i] = 1
	}
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			conn.Close(context.Background())
		}
	}()
	var failingSince time.Time
	for w.changes.Load() < w.total {
		if ctx.Err() != nil {
			return nil
		}
		if w.changes.Load() >= w.allowed.Load() {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		var n int64
		var err error
		if conn == nil {
			conn, err = pgx.Connect(ctx, pgURL)
		}
		if err == nil {
			n, err = chaosStep(ctx, conn, rng, table, next)
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			// PostgreSQL restarting: a transaction in flight committed or
			// not, which the comparison with PostgreSQL takes as it is.
			if failingSince.IsZero() {
				failingSince = time.Now()
			} else if time.Since(failingSince) > 3*time.Minute {
				return fmt.Errorf("workload: PostgreSQL failing for 3 minutes: %w", err)
			}
			if conn != nil {
				conn.Close(context.Background())
				conn = nil
			}
			time.Sleep(200 * time.Millisecond)
			continue
		}
		failingSince = time.Time{}
		w.changes.Add(n)
	}
	return nil
}

// chaosTenant names tenant i of the workload.
func chaosTenant(i int) string { return fmt.Sprintf("t%03d", i) }

// chaosStep commits one transaction of the workload on a random tenant and
// returns how many rows it changed: new rows (45%), a range of rows
// updated (30%) or deleted (15%), or one transaction over three tenants
// that inserts, changes one row twice, deletes one and re-inserts a
// deleted key (10%).
func chaosStep(ctx context.Context, conn *pgx.Conn, rng *rand.Rand, table string, next []int64) (int64, error) {
	const insert = `INSERT INTO %s (tenant_id, id, amount, status, qty, note, updated_at)
		SELECT $1, g, g * 0.25, 'new', (g %% 1000)::int, CASE WHEN g %% 5 = 0 THEN NULL ELSE 'n' || g END,
		       '2026-01-01 00:00:00+00'::timestamptz + g * interval '1 second'
		FROM generate_series($2::bigint, $3::bigint) g ON CONFLICT (tenant_id, id) DO NOTHING`
	i := rng.IntN(len(next))
	tenant := chaosTenant(i)
	some := 1 + rng.Int64N(next[i])
	exec := func(tx pgx.Tx, sql string, args ...any) (int64, error) {
		tag, err := tx.Exec(ctx, sql, args...)
		return tag.RowsAffected(), err
	}
	var total int64
	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		total = 0
		var steps []func() (int64, error)
		switch r := rng.IntN(100); {
		case r < 45:
			n := 1 + rng.Int64N(100)
			from := next[i]
			next[i] += n
			steps = append(steps, func() (int64, error) { return exec(tx, fmt.Sprintf(insert, table), tenant, from, from+n-1) })
		case r < 75:
			steps = append(steps, func() (int64, error) {
				return exec(tx, fmt.Sprintf(`UPDATE %s SET amount = amount + 1, qty = qty + 1, status = left(status || '+', 40),
					note = CASE WHEN note IS NULL THEN 'set' ELSE NULL END, updated_at = updated_at + interval '1 millisecond'
					WHERE tenant_id = $1 AND id BETWEEN $2 AND $3`, table), tenant, some, some+rng.Int64N(50))
			})
		case r < 90:
			steps = append(steps, func() (int64, error) {
				return exec(tx, fmt.Sprintf(`DELETE FROM %s WHERE tenant_id = $1 AND id BETWEEN $2 AND $3`, table), tenant, some, some+rng.Int64N(10))
			})
		default:
			j, k := rng.IntN(len(next)), rng.IntN(len(next))
			from := next[i]
			next[i] += 10
			other, third := chaosTenant(j), chaosTenant(k)
			steps = append(steps,
				func() (int64, error) { return exec(tx, fmt.Sprintf(insert, table), tenant, from, from+9) },
				func() (int64, error) {
					return exec(tx, fmt.Sprintf(`UPDATE %s SET status = 'first' WHERE tenant_id = $1 AND id = $2`, table), other, 1+rng.Int64N(next[j]))
				},
				func() (int64, error) {
					return exec(tx, fmt.Sprintf(`UPDATE %s SET status = 'second', qty = -qty WHERE tenant_id = $1 AND status = 'first'`, table), other)
				},
				func() (int64, error) {
					return exec(tx, fmt.Sprintf(`DELETE FROM %s WHERE tenant_id = $1 AND id = $2`, table), third, 1+rng.Int64N(next[k]))
				},
				// A key deleted earlier, or one that exists (then nothing).
				func() (int64, error) {
					d := 1 + rng.Int64N(next[k])
					return exec(tx, fmt.Sprintf(insert, table), third, d, d)
				},
			)
		}
		for _, s := range steps {
			n, err := s()
			if err != nil {
				return err
			}
			total += n
		}
		return nil
	})
	return total, err
}

// crashAt returns the scenario of a crash at a sink's failpoint: the sink
// crashes at its second hit (the first is the row the table is made with),
// in the workload's first flush, its member leaves the group and a sink
// without failpoints takes over. Capture sends no heartbeats, so that each
// hit is in a flush that loads rows. Without layer2 only the insert token
// keeps the repeated batch from being loaded twice.
func crashAt(point string, layer2 bool) func(c *chaos) {
	return func(c *chaos) {
		if !layer2 {
			c.sinkFlags = []string{"--dedup-addr", "off"}
		}
		c.startCapture("", "--heartbeat-interval", "0") // every flush then inserts rows

		s := c.startSink(point + "=crash@2")
		w := c.startWorkload(c.cfg.each, false)
		c.waitCrash(s.proc, point, 5*time.Minute)
		c.supervise()
		w.finish(c.t)
	}
}

// capturePublishesAgain crashes capture at capture.produced, halfway
// through the workload, with a status interval of 20 s: Kafka holds the
// changes since its last confirmed position, and the capture that
// restarts re-publishes them from that older LSN with the same eventIds.
func (c *chaos) capturePublishesAgain() {
	c.spawnCapture(fmt.Sprintf("capture.produced=crash@%d", c.cfg.each/2), "--status-interval", "20s")
	waitLog(c.t, c.capture, "msg=streaming")
	c.startSink("")
	w := c.startWorkload(c.cfg.each, false)
	c.waitCrash(c.capture, "capture.produced", 5*time.Minute)
	c.supervise()
	w.finish(c.t)
}

// capturePublishesAgainWithoutLayer2 is capturePublishesAgain with Layer
// 2 off: the re-published changes are inserted again, and only
// ReplacingMergeTree (FINAL, merges) makes them one.
func (c *chaos) capturePublishesAgainWithoutLayer2() {
	c.sinkFlags = []string{"--dedup-addr", "off"}
	c.capturePublishesAgain()
}

// spawnCapture starts capture with failpoints without waiting for it.
func (c *chaos) spawnCapture(failpoints string, extra ...string) {
	c.t.Helper()
	c.capture = c.spawn("capture", failpoints, append(c.captureArgsCopy(), extra...))
}

func (c *chaos) captureArgsCopy() []string { return append([]string(nil), c.capArgs...) }

// sinkKillRebalance runs two sinks in the group, kills one with SIGKILL
// mid-workload (the other takes its partitions, from its last commit on)
// and later starts a third, which rebalances the partitions again.
func (c *chaos) sinkKillRebalance() {
	c.startCapture("")
	a := c.startSink("")
	c.startSink("")
	w := c.startWorkload(c.cfg.each, false)
	w.waitChanges(c.t, c.cfg.each/3)
	c.killSink(a)
	w.waitChanges(c.t, 2*c.cfg.each/3)
	c.startSink("")
	w.finish(c.t)
}

// crashDuringRebalance crashes a sink at sink.revoked: a second sink
// joins the group mid-workload, and the first dies while its partitions
// are being revoked.
func (c *chaos) crashDuringRebalance() {
	c.startCapture("")
	a := c.startSink("sink.revoked=crash")
	w := c.startWorkload(c.cfg.each, false)
	w.waitChanges(c.t, c.cfg.each/3)
	c.startSink("")
	c.waitCrash(a.proc, "sink.revoked", 2*time.Minute)
	c.supervise()
	w.finish(c.t)
}

// allAtOnce combines the faults of Layers 2 and 3: capture crashes after
// producing (re-publishing from an older LSN when it restarts) while a
// sink of two is killed, and then every change is produced once more.
func (c *chaos) allAtOnce() {
	c.spawnCapture(fmt.Sprintf("capture.produced=crash@%d", c.cfg.each/2), "--status-interval", "20s")
	waitLog(c.t, c.capture, "msg=streaming")
	a := c.startSink("")
	c.startSink("")
	w := c.startWorkload(c.cfg.each, false)
	app := c.startLayer1App()
	c.faults += c.runLayer1(app, int(c.cfg.each/40)) // while capture nears its crash
	c.waitCrash(c.capture, "capture.produced", 5*time.Minute)
	c.killSink(a)
	c.supervise()
	c.startSink("")
	c.faults += c.runLayer1(app, int(c.cfg.each/40))
	w.finish(c.t)
	c.settle()
	c.produceAgain(false)
}

// loadWorkload runs the scenario's workload through capture and a sink
// (with failpoints, if given) until ClickHouse FINAL equals PostgreSQL,
// and returns the sink.
func (c *chaos) loadWorkload(sinkFailpoints string) *chaosSink {
	c.t.Helper()
	c.startCapture("")
	s := c.startSink(sinkFailpoints)
	c.startWorkload(c.cfg.each, false).finish(c.t)
	c.settle()
	return s
}

// produceAgain produces every change of the workload's topic once more
// to its partition, shuffled when asked (older versions then arrive after
// newer ones).
func (c *chaos) produceAgain(shuffle bool) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rs, err := c.topicRecords(ctx, c.sinkTable.topic)
	if err != nil {
		c.t.Fatal(err)
	}
	rs = changes(rs)
	if shuffle {
		rand.Shuffle(len(rs), func(i, j int) { rs[i], rs[j] = rs[j], rs[i] })
	}
	c.reproduce(rs)
	c.faults += len(rs)
}

// duplicatePublish produces every change a second time, then rolls the
// group's offsets back to the start of the topic (a checkpoint rollback),
// so each change reaches the sink two more times.
func (c *chaos) duplicatePublish() {
	c.loadWorkload("")
	c.produceAgain(false)
	c.settle()
	for _, s := range slices.Clone(c.sinks) {
		c.killSink(s)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	adm := kadm.NewClient(c.kafka())
	starts, err := adm.ListStartOffsets(ctx, c.sinkTable.topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		c.t.Fatal(err)
	}
	resp, err := adm.CommitOffsets(ctx, c.group, starts.Offsets())
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		c.t.Fatalf("roll the group's offsets back: %v", err)
	}
	c.faults++
	c.startSink("")
}

// crashMidCopy crashes capture at capture.copied: a table of rows exists
// before capture starts, and capture dies after the second chunk of its
// copy is in Kafka, before that chunk is recorded as done; rows change
// while it is down, and it resumes the copy when it restarts.
func (c *chaos) crashMidCopy() {
	per := max(c.cfg.each/int64(c.cfg.tenants), 1)
	c.exec(fmt.Sprintf(`INSERT INTO %s (tenant_id, id, amount, status, qty, note, updated_at)
		SELECT 't' || lpad(t::text, 3, '0'), g, g * 0.5, 'copied', g %% 100, 'row ' || g, '2026-01-01 00:00:00+00'::timestamptz + g * interval '1 second'
		FROM generate_series(1, $1::bigint) g, generate_series(0, $2::int - 1) t`, c.sinkTable.quoted), per, c.cfg.tenants)
	c.spawnCapture("capture.copied=crash@2", "--snapshot-workers", "2", "--snapshot-chunk-pages", "8")
	c.waitCrash(c.capture, "capture.copied", 5*time.Minute)
	c.startSink("")
	w := c.startWorkload(c.cfg.each, false)
	w.waitChanges(c.t, c.cfg.each/3)
	c.supervise()
	w.finish(c.t)
}

// outOfOrder loads the workload with Layer 2 off, then produces all its
// changes again shuffled: older versions arrive after newer ones and must
// lose to them.
func (c *chaos) outOfOrder() {
	c.sinkFlags = []string{"--dedup-addr", "off"}
	c.loadWorkload("")
	c.produceAgain(true)
}

// twoSinksAtOnce runs a second sink in a group of its own on the same
// topics, ClickHouse database and Layer 2 keys: every eventId reaches two
// sinks at the same time.
func (c *chaos) twoSinksAtOnce() {
	c.startCapture("")
	c.startSink("")
	group := testenv.Name("grp")
	other := c.spawn("sink of another group", "", c.sinkArgs(append(append([]string(nil), c.sinkFlags...), "--group", group)...))
	w := c.startWorkload(c.cfg.each, false)
	w.finish(c.t)
	c.settle()
	c.caughtUp(group, time.Now().Add(c.deadlineBy)) // the other sink saw every change too
	requireRunning(c.t, other)
	c.faults++
}

// retryAfterFailure makes the sink's inserts fail three times after
// ClickHouse took them (the answer is lost): the sink retries with backoff,
// each retry the same insert with the same deduplication token.
func (c *chaos) retryAfterFailure() {
	s := c.loadWorkload("sink.inserted=error:3")
	if n := strings.Count(s.proc.Output(), "injected failure at sink.inserted"); n != 3 {
		c.t.Errorf("the sink logged %d injected failures, want 3:\n%s", n, s.proc.Output())
	}
	c.faults += 3
}

// keyNormalisation loads tenants and keys that differ only in case,
// whitespace, separators, Unicode normalisation or escaping, and some that
// a careless key encoding would collide (tenant "a|b" with key "c" and
// tenant "a" with key "b|c"); a sink is killed halfway. No two may become
// one.
func (c *chaos) keyNormalisation() {
	name, qt := c.table("keys", `(tenant_id text NOT NULL, k text NOT NULL, v text, n int, PRIMARY KEY (tenant_id, k))`)
	c.tables = []chaosTable{{name: name, topic: c.prefix + ".public." + name, key: "tenant_id, k",
		pgQuery: fmt.Sprintf(`SELECT tenant_id, k, coalesce(v, '<null>'), coalesce(n::text, '<null>') FROM %s`, qt),
		chQuery: fmt.Sprintf("SELECT tenant_id, k, ifNull(v, '<null>'), ifNull(toString(n), '<null>') FROM `%s`.`%s` FINAL WHERE _is_deleted = 0", c.database, name)}}
	c.capArgs = c.captureArgs([]string{name})
	variants := []string{"acme", "Acme", "ACME", " acme", "acme ", "ac me", "ac\tme", "ac\nme", "a", "a|b", "b|c", "c", "a||b", "|",
		"\u00e9", "e\u0301", "", " ", "%", "_", "\\", "'", `"`, "a/b", "a.b", "null", "NULL", "🦆", strings.Repeat("k", 300)}
	c.startCapture("")
	s := c.startSink("")
	insert := fmt.Sprintf(`INSERT INTO %s SELECT t, k, 'v:' || t || ':' || k, 1 FROM unnest($1::text[]) t, unnest($2::text[]) k
		ON CONFLICT (tenant_id, k) DO UPDATE SET n = %s.n + 1, v = excluded.v || '+'`, qt, qt)
	c.exec(insert, variants, variants)
	c.holdMerges()
	c.exec(fmt.Sprintf(`UPDATE %s SET v = upper(v), n = n + 10 WHERE tenant_id = ANY($1) OR k = ANY($2)`, qt),
		[]string{"acme", " acme", "a|b", "e\u0301"}, []string{"Acme", "c", ""})
	c.killSink(s)
	c.startSink("")
	c.exec(fmt.Sprintf(`DELETE FROM %s WHERE tenant_id = ANY($1) OR k = ANY($2)`, qt),
		[]string{"ACME", "acme ", "\u00e9", "NULL"}, []string{"a||b", "b|c", " "})
	c.exec(insert, []string{"ACME", "\u00e9"}, variants)
	c.exec(fmt.Sprintf(`UPDATE %s SET v = NULL WHERE k = 'null'`, qt))
}

// outage returns the scenario of a service stopped for d mid-workload
// and started again; capture and the sinks are restarted if they exit.
func outage(service string, d time.Duration) func(c *chaos) {
	return func(c *chaos) {
		c.startCapture("")
		c.startSink("")
		w := c.startWorkload(c.cfg.each, false)
		w.waitChanges(c.t, c.cfg.each/3)
		stopService(c.t, service)
		c.faults++
		time.Sleep(d) // the outage's length, not a wait for a condition
		services(c.t, "start", service)
		switch service {
		case "postgres":
			c.reconnectPG()
		case "clickhouse":
			c.stopMerges() // a restart starts them
		}
		w.finish(c.t)
	}
}

// reconnectPG replaces the pipeline's PostgreSQL connection after a
// restart of PostgreSQL broke it. The new one is left to the end of the
// process: the pipeline's cleanups drop its slot through it.
func (c *chaos) reconnectPG() {
	c.t.Helper()
	err := testenv.Eventually(context.Background(), time.Minute, func(ctx context.Context) error {
		conn, err := pgx.Connect(ctx, c.env.PG)
		if err == nil {
			c.pg = conn
		}
		return err
	})
	if err != nil {
		c.t.Fatal(err)
	}
}

// randomKills runs capture and two sinks through a workload of cfg.rows
// row changes over cfg.tenants tenants, and kills cfg.kills times, at
// random moments while it writes, capture (40%), one of the sinks (40%)
// or both (20%) with SIGKILL, restarting what it killed.
func (c *chaos) randomKills() {
	c.startCapture("")
	c.startSink("")
	c.startSink("")
	w := c.startWorkload(c.cfg.rows, true)
	slice := c.cfg.rows / int64(c.cfg.kills+1)
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 3))
	for k := 0; k < c.cfg.kills; k++ {
		w.allow(slice)
		time.Sleep(time.Duration(50+rng.IntN(1500)) * time.Millisecond) // a random moment
		r := rng.IntN(10)
		if r < 4 || r >= 8 {
			c.killCapture()
		}
		if r >= 4 {
			c.killSink(c.sinks[rng.IntN(len(c.sinks))])
		}
		c.supervise()
		for len(c.sinks) < 2 {
			c.startSink("")
		}
		if k%10 == 9 {
			c.t.Logf("%d kills, the writer committed %d row changes", k+1, w.changes.Load())
		}
	}
	w.finish(c.t)
}
