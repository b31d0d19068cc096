package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/walhouse/walhouse/harness/testenv"
	"github.com/walhouse/walhouse/record"
)

const seriesCaptureRecords = "walhouse_capture_records_total"

// dropTopicsAtEnd deletes the pipeline's topics (<prefix>.*, <prefix>-state,
// <prefix>-dlq) when the test ends, after its processes stopped.
func (p *pipeline) dropTopicsAtEnd() {
	p.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		adm := kadm.NewClient(p.kafka())
		topics, err := adm.ListTopics(ctx)
		if err != nil {
			p.t.Logf("list topics to drop: %v", err)
			return
		}
		var mine []string
		for _, name := range topics.Names() {
			if strings.HasPrefix(name, p.prefix+".") || strings.HasPrefix(name, p.prefix+"-") {
				mine = append(mine, name)
			}
		}
		if len(mine) > 0 {
			if _, err := adm.DeleteTopics(ctx, mine...); err != nil {
				p.t.Logf("drop topics %v: %v", mine, err)
			}
		}
	})
}

// waitSlotReleased waits until no walsender holds the slot any more: the
// one of a killed capture ends when PostgreSQL notices the closed socket,
// and a capture started before that would find the slot busy.
func (p *pipeline) waitSlotReleased() {
	p.t.Helper()
	err := testenv.Eventually(context.Background(), 60*time.Second, func(ctx context.Context) error {
		var active bool
		if err := p.pg.QueryRow(ctx, "SELECT active FROM pg_replication_slots WHERE slot_name = $1", p.slot).Scan(&active); err != nil {
			return err
		}
		if active {
			return fmt.Errorf("slot %s is still active", p.slot)
		}
		return nil
	})
	if err != nil {
		p.t.Fatal(err)
	}
}

// writer commits a mix of transactions on a sinkTable from its own
// connection until stopped: single-row inserts, multi-row updates, deletes,
// re-inserts of deleted keys, multi-statement transactions touching one row
// twice, batches for both tenants with the same ids, and now and then a
// transaction of 2,000 rows. Its keys stay below 1,000,000.
type writer struct {
	ops    atomic.Int64 // transactions committed
	cancel context.CancelFunc
	done   chan struct{}
	err    error
}

func (p *pipeline) startWriter(tb sinkTable) *writer {
	p.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := &writer{cancel: cancel, done: make(chan struct{})}
	conn, err := pgx.Connect(ctx, p.env.PG)
	if err != nil {
		p.t.Fatalf("writer: connect to PostgreSQL: %v", err)
	}
	go func() {
		defer close(w.done)
		defer conn.Close(context.Background())
		w.err = w.run(ctx, conn, tb)
	}()
	p.t.Cleanup(func() { w.stop() })
	return w
}

// stop stops the writer after its current transaction and returns its
// first error.
func (w *writer) stop() error {
	w.cancel()
	<-w.done
	return w.err
}

// waitOps waits until the writer committed n more transactions than it had
// when called.
func (w *writer) waitOps(t *testing.T, n int64) {
	t.Helper()
	from := w.ops.Load()
	err := testenv.Eventually(context.Background(), 60*time.Second, func(context.Context) error {
		select {
		case <-w.done:
			return fmt.Errorf("the writer stopped: %v", w.err)
		default:
		}
		if got := w.ops.Load() - from; got < n {
			return fmt.Errorf("the writer committed %d of %d transactions", got, n)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func (w *writer) run(ctx context.Context, conn *pgx.Conn, tb sinkTable) error {
	rng := rand.New(rand.NewPCG(1, 2))
	const cols = `(tenant_id, id, amount, status, qty, note, updated_at)`
	const row = `g * 1.25, 'new', g::int, 'row ' || g, '2026-01-01 00:00:00+00'::timestamptz + g * interval '1 minute'`
	next := int64(1)
	type deleted struct {
		tenant   string
		from, to int64
	}
	var gone []deleted
	for i := 0; ctx.Err() == nil; i++ {
		tenant := []string{"acme", "globex"}[i%2]
		some := 1 + rng.Int64N(next)
		var err error
		switch {
		case i%100 == 99: // 2,000 rows in one transaction
			_, err = conn.Exec(ctx, fmt.Sprintf(`INSERT INTO %s %s SELECT t, g, %s
				FROM generate_series($1::bigint, $1 + 999) g, (VALUES ('acme'), ('globex')) AS v(t)`, tb.quoted, cols, row), next)
			next += 1000
		case i%100 == 49: // and 2,000 row updates in one
			_, err = conn.Exec(ctx, fmt.Sprintf(`UPDATE %s SET qty = qty + 1, amount = amount + 0.01, status = 'bulk %d'
				WHERE id IN (SELECT id FROM %s WHERE tenant_id = $1 AND id < 1000000 ORDER BY id DESC LIMIT 2000) AND tenant_id = $1`, tb.quoted, i, tb.quoted), tenant)
		case i%6 == 0:
			_, err = conn.Exec(ctx, fmt.Sprintf(`INSERT INTO %s %s SELECT $1, g, %s FROM generate_series($2::bigint, $2) g`, tb.quoted, cols, row), tenant, next)
			next++
		case i%6 == 1:
			_, err = conn.Exec(ctx, fmt.Sprintf(`UPDATE %s SET qty = qty + 1, status = status || '+', note = NULL,
				updated_at = updated_at + interval '1 second' WHERE tenant_id = $1 AND id BETWEEN $2 AND $2 + 20`, tb.quoted), tenant, some)
		case i%6 == 2:
			_, err = conn.Exec(ctx, fmt.Sprintf(`DELETE FROM %s WHERE tenant_id = $1 AND id BETWEEN $2 AND $2 + 2`, tb.quoted), tenant, some)
			gone = append(gone, deleted{tenant, some, min(some+2, next-1)}) // keys that existed
		case i%6 == 3 && len(gone) > 0: // the keys deleted the round before
			d := gone[len(gone)-1]
			gone = gone[:len(gone)-1]
			_, err = conn.Exec(ctx, fmt.Sprintf(`INSERT INTO %s %s SELECT $1, g, %s FROM generate_series($2::bigint, $3) g
				ON CONFLICT (tenant_id, id) DO NOTHING`, tb.quoted, cols, row), d.tenant, d.from, d.to)
		case i%6 == 4: // one transaction: new rows, one of them changed twice, another deleted
			err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, fmt.Sprintf(`INSERT INTO %s %s SELECT $1, g, %s FROM generate_series($2::bigint, $2 + 19) g`, tb.quoted, cols, row), tenant, next); err != nil {
					return err
				}
				for _, s := range []string{"first", "second"} {
					if _, err := tx.Exec(ctx, fmt.Sprintf(`UPDATE %s SET status = $3 WHERE tenant_id = $1 AND id = $2`, tb.quoted), tenant, next+3, s); err != nil {
						return err
					}
				}
				_, err := tx.Exec(ctx, fmt.Sprintf(`DELETE FROM %s WHERE tenant_id = $1 AND id = $2`, tb.quoted), tenant, next+7)
				return err
			})
			next += 20
		default: // the same ids for both tenants
			_, err = conn.Exec(ctx, fmt.Sprintf(`INSERT INTO %s %s SELECT t, g, %s
				FROM generate_series($1::bigint, $1 + 24) g, (VALUES ('acme'), ('globex')) AS v(t)`, tb.quoted, cols, row), next)
			next += 25
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil // stopped mid-transaction: it rolled back or committed, PostgreSQL knows which
			}
			return fmt.Errorf("writer transaction %d: %w", i, err)
		}
		w.ops.Add(1)
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

// redeliveries reads topic and returns how many row changes it holds and
// how many distinct eventIds; it fails the test if two copies of one
// eventId differ in anything but ingestedAt (a re-read must produce the
// same change). A copied row read again after it changed may differ: its
// eventId names the copy, not a change (see sink/layer2.go).
func (p *pipeline) redeliveries(topic string) (records, distinct int) {
	p.t.Helper()
	seen := map[string]string{}
	differ := 0
	for _, r := range p.topicRows(topic) {
		r.IngestedAt = time.Time{}
		canon := string(record.AppendJSON(nil, r))
		records++
		if prev, ok := seen[r.EventID]; ok {
			if r.Op == record.Read {
				continue
			}
			if prev != canon && differ < 3 {
				p.t.Errorf("eventId %s was produced twice with different contents:\n%s\n%s", r.EventID, prev, canon)
			}
			if prev != canon {
				differ++
			}
			continue
		}
		seen[r.EventID] = canon
	}
	return records, len(seen)
}

// scrapeUntil polls series on addr until cond holds for its value, and
// returns the value; it gives up after timeout (returning the last value
// and false).
func scrapeUntil(addr, series string, timeout time.Duration, cond func(float64) bool) (float64, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var v float64
	for ctx.Err() == nil {
		if got, err := scrape(ctx, addr, series); err == nil {
			v = got
			if cond(v) {
				return v, true
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	return v, false
}

// TestIntegrationCaptureKilledMidStream kills `walhouse capture` with
// SIGKILL three times while a writer keeps committing (once while a
// 4,000-row transaction is being produced, once right after a large
// update-and-delete transaction committed, once between the writer's small
// transactions) and restarts it with the same slot and topics each time.
// Every restart re-reads the unconfirmed tail, so Kafka holds changes
// twice; ClickHouse FINAL must still equal PostgreSQL exactly.
func TestIntegrationCaptureKilledMidStream(t *testing.T) {
	p := newPipeline(t)
	p.dropTopicsAtEnd()
	tb := p.newSinkTable()
	sinkMetrics := testenv.FreeAddr(t)
	sink := p.layer2Sink("--metrics-addr", sinkMetrics)
	metrics := testenv.FreeAddr(t)
	capture := p.runCapture(p.captureArgs([]string{tb.name}, "--metrics-addr", metrics))
	w := p.startWriter(tb)
	w.waitOps(t, 100)

	// The test's own large transactions use keys from 1,000,000 on, which
	// the writer never touches: no deadlocks between the two.
	const cols = `(tenant_id, id, amount, status, qty, note, updated_at)`
	kills := []struct {
		name string
		tx   string        // committed just before the kill (empty: none)
		at   float64       // kill once capture produced this many records since the commit
		wait time.Duration // or kill after this long
	}{
		{name: "while a 4,000-row insert is produced", at: 1000, tx: fmt.Sprintf(`INSERT INTO %s %s
			SELECT t, g, g, 'big', 1, NULL, '2026-01-01 00:00:00+00'::timestamptz FROM generate_series(1000001, 1002000) g, (VALUES ('acme'), ('globex')) AS v(t)`, tb.quoted, cols)},
		{name: "right after a 4,000-row update and delete committed", at: 1, tx: fmt.Sprintf(`BEGIN;
			UPDATE %s SET status = 'big+', qty = qty + 1 WHERE id BETWEEN 1000001 AND 1002000;
			DELETE FROM %s WHERE id BETWEEN 1000001 AND 1000500;
			COMMIT`, tb.quoted, tb.quoted)},
		{name: "between the writer's transactions", wait: 1500 * time.Millisecond},
	}
	for i, k := range kills {
		before, _ := scrapeUntil(metrics, seriesCaptureRecords, 10*time.Second, func(float64) bool { return true })
		if k.tx != "" {
			p.exec(k.tx)
			produced, ok := scrapeUntil(metrics, seriesCaptureRecords, 60*time.Second, func(v float64) bool { return v-before >= k.at })
			if !ok {
				t.Fatalf("kill %d: capture did not produce %v records within 60 s (it produced %v):\n%s", i+1, k.at, produced-before, capture.Output())
			}
			capture.Kill()
			t.Logf("kill %d (%s): capture had produced %v records since the commit", i+1, k.name, produced-before)
		} else {
			time.Sleep(k.wait) // an arbitrary moment, not a condition to wait for
			capture.Kill()
			t.Logf("kill %d (%s)", i+1, k.name)
		}
		if done, err := capture.Exited(); !done || err == nil || !strings.Contains(err.Error(), "killed") {
			t.Fatalf("kill %d: capture did not die of SIGKILL (exited %v: %v)", i+1, done, err)
		}
		p.waitSlotReleased()
		metrics = testenv.FreeAddr(t)
		capture = p.runCapture(p.captureArgs([]string{tb.name}, "--metrics-addr", metrics))
		w.waitOps(t, 30)
	}
	w.waitOps(t, 60)
	if err := w.stop(); err != nil {
		t.Fatal(err)
	}
	p.converge(tb.pgQuery, tb.chQuery, capture, sink)

	records, distinct := p.redeliveries(tb.topic)
	t.Logf("Kafka holds %d row changes with %d distinct eventIds: %d re-produced by the restarts; the writer committed %d transactions; Layer 2 dropped %v",
		records, distinct, records-distinct, w.ops.Load(), metric(t, sinkMetrics, seriesLayer2Hits))
	if n := metric(t, sinkMetrics, seriesMismatches); n != 0 {
		t.Errorf("the sink saw %v eventIds reused with another payload", n)
	}
}

// snapshotState returns the saved snapshot plan of tb from the state topic,
// or nil if there is none yet.
func (p *pipeline) snapshotState(ctx context.Context, tb sinkTable) (*snapshotProgress, error) {
	rs, err := p.topicRecords(ctx, p.prefix+"-state")
	if err != nil {
		return nil, err
	}
	key := "snapshot/" + p.slot + "/public." + tb.name
	var last []byte
	for _, r := range rs {
		if string(r.Key) == key {
			last = r.Value
		}
	}
	if last == nil {
		return nil, nil
	}
	var s snapshotProgress
	if err := json.Unmarshal(last, &s); err != nil {
		return nil, fmt.Errorf("state of %s: %w: %s", key, err, last)
	}
	return &s, nil
}

// snapshotProgress is what the test reads of capture's saved snapshot plan.
type snapshotProgress struct {
	Chunks   int   `json:"chunks"`
	Done     []int `json:"done"`
	Complete bool  `json:"complete"`
}

// TestIntegrationCaptureKilledMidSnapshot kills `walhouse capture` with
// SIGKILL while it copies a 200,000-row table in small chunks, changes rows
// while it is down, and restarts it: it must resume with the chunks not
// done yet (the log says msg=resuming with chunks_done > 0) rather than
// start over, and ClickHouse FINAL must equal PostgreSQL exactly, the
// changes made during the outage included.
func TestIntegrationCaptureKilledMidSnapshot(t *testing.T) {
	p := newPipeline(t)
	p.dropTopicsAtEnd()
	tb := p.newSinkTable()
	p.exec(fmt.Sprintf(`INSERT INTO %s (tenant_id, id, amount, status, qty, note, updated_at)
		SELECT t, g, g * 0.5, 'copied', g %% 100, CASE WHEN g %% 7 = 0 THEN NULL ELSE 'row ' || g END,
		       '2026-01-01 00:00:00+00'::timestamptz + g * interval '1 second'
		FROM generate_series(1, 100000) g, (VALUES ('acme'), ('globex')) AS v(t)`, tb.quoted))
	sinkMetrics := testenv.FreeAddr(t)
	sink := p.layer2Sink("--metrics-addr", sinkMetrics)
	args := p.captureArgs([]string{tb.name}, "--snapshot-workers", "2", "--snapshot-chunk-pages", "16")
	capture := testenv.Start(t, "capture", walhouseBin, args...)

	var at *snapshotProgress
	err := testenv.Eventually(context.Background(), 90*time.Second, func(ctx context.Context) error {
		if err := exited(capture); err != nil {
			return err
		}
		s, err := p.snapshotState(ctx, tb)
		if err != nil {
			return err
		}
		if s == nil || len(s.Done) < 3 {
			return errors.New("fewer than 3 chunks done")
		}
		at = s
		return nil
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, capture.Output())
	}
	capture.Kill()
	if at.Complete {
		t.Fatalf("the snapshot completed (%d chunks) before capture was killed: nothing left to resume", at.Chunks)
	}
	t.Logf("killed capture with %d of %d chunks done", len(at.Done), at.Chunks)
	p.waitSlotReleased()

	// While capture is down: rows in copied and in uncopied chunks change,
	// some are deleted (a few of them re-inserted), new ones arrive.
	p.exec(fmt.Sprintf(`UPDATE %s SET status = 'changed while down', qty = -qty WHERE id %% 97 = 0`, tb.quoted))
	p.exec(fmt.Sprintf(`DELETE FROM %s WHERE id %% 101 = 0 OR (tenant_id = 'acme' AND id BETWEEN 500 AND 520)`, tb.quoted))
	p.exec(fmt.Sprintf(`INSERT INTO %s (tenant_id, id, amount, status, updated_at)
		SELECT 'acme', g, 1, 're-inserted', '2026-02-01 00:00:00+00' FROM generate_series(505, 510) g`, tb.quoted))
	p.exec(fmt.Sprintf(`INSERT INTO %s (tenant_id, id, status, updated_at)
		SELECT t, g, 'new while down', '2026-03-01 00:00:00+00' FROM generate_series(100001, 100500) g, (VALUES ('acme'), ('globex')) AS v(t)`, tb.quoted))

	capture = p.runCapture(args)
	waitLog(t, capture, "msg=resuming", "public."+tb.name)
	resumed := regexp.MustCompile(`msg=resuming .*chunks_done=(\d+)`).FindStringSubmatch(capture.Output())
	if resumed == nil {
		t.Fatalf("no chunks_done in the resuming line:\n%s", capture.Output())
	}
	if n, _ := strconv.Atoi(resumed[1]); n == 0 {
		t.Errorf("capture resumed with chunks_done=0: it started the snapshot over")
	}
	// And while the copy runs next to the stream.
	p.exec(fmt.Sprintf(`UPDATE %s SET status = 'changed after restart', note = 'x' WHERE id %% 89 = 0`, tb.quoted))
	waitLog(t, capture, "msg=complete", "public."+tb.name)
	// Comparing 200,000 rows is slow and the embedded ClickHouse answers
	// one query at a time, slowing the sink: wait for the counts first.
	var want int64
	if err := p.pg.QueryRow(context.Background(), "SELECT count(*) FROM "+tb.quoted).Scan(&want); err != nil {
		t.Fatal(err)
	}
	err = testenv.Eventually(context.Background(), 120*time.Second, func(ctx context.Context) error {
		var got uint64
		q := fmt.Sprintf("SELECT count() FROM `%s`.`%s` FINAL WHERE _is_deleted = 0", p.database, tb.name)
		if err := p.ch.QueryRow(ctx, q).Scan(&got); err != nil {
			return err
		}
		if int64(got) != want {
			return fmt.Errorf("ClickHouse has %d rows, PostgreSQL %d", got, want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	p.converge(tb.pgQuery, tb.chQuery, capture, sink)

	t.Logf("capture resumed with %s of %d chunks done", resumed[1], at.Chunks)
	// Rows of the chunks in flight at the kill are read again, those
	// changed during the outage with new values under the same eventIds:
	// not a broken eventId contract (see sink/layer2.go).
	if n := metric(t, sinkMetrics, seriesMismatches); n != 0 {
		t.Errorf("the sink saw %v eventIds reused with another payload", n)
	}
}

// TestIntegrationKafkaBrokerRestart stops the Kafka broker for a while as
// a writer keeps committing (a 2,000-row transaction included), then
// starts it again. capture and sink keep running: their clients retry
// until the broker is back, capture holding the changes it read (its
// producer backlog) without confirming them to the slot. Then capture is
// killed with SIGKILL while the broker is still down, losing that backlog,
// and restarted once the broker is back, as a supervisor would (it cannot
// start without a broker): the slot still has the changes. ClickHouse
// FINAL must then equal PostgreSQL exactly.
func TestIntegrationKafkaBrokerRestart(t *testing.T) {
	p := newPipeline(t)
	p.dropTopicsAtEnd()
	tb := p.newSinkTable()
	metrics := testenv.FreeAddr(t)
	capture := p.runCapture(p.captureArgs([]string{tb.name}, "--metrics-addr", metrics))
	sink := p.sink("--dedup-addr", "off")
	w := p.startWriter(tb)
	w.waitOps(t, 100)
	if err := testenv.Eventually(context.Background(), 60*time.Second, func(context.Context) error {
		if p.rawCount(tb) == 0 {
			return errors.New("nothing loaded into ClickHouse yet")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	stopService(t, "kafka") // started again when the test ends, whatever happens
	w.waitOps(t, 150)       // covers the writer's next 2,000-row transaction
	// The outage is felt: changes wait in capture's producer for the broker.
	if backlog, ok := scrapeUntil(metrics, "walhouse_capture_producer_backlog_bytes", 30*time.Second, func(v float64) bool { return v > 0 }); !ok {
		t.Errorf("capture's producer backlog stayed at %v while the broker was down", backlog)
	} else {
		t.Logf("capture's producer backlog while the broker was down: %v bytes", backlog)
	}
	requireRunning(t, capture, sink)
	ls, n := warnings(capture.Output(), 3)
	t.Logf("capture logged %d warnings or errors while the broker was down, first: %s", n, strings.Join(ls, "\n"))

	capture.Kill()
	w.waitOps(t, 20)
	services(t, "start", "kafka")
	p.waitSlotReleased()
	capture = p.runCapture(p.captureArgs([]string{tb.name}))
	w.waitOps(t, 100)
	if err := w.stop(); err != nil {
		t.Fatal(err)
	}
	p.converge(tb.pgQuery, tb.chQuery, capture, sink)
	ls, n = warnings(sink.Output(), 3)
	t.Logf("sink logged %d warnings or errors across the outage, first: %s", n, strings.Join(ls, "\n"))
	t.Logf("the writer committed %d transactions; ClickHouse FINAL and PostgreSQL hold %d rows", w.ops.Load(), p.chInt(fmt.Sprintf("SELECT count() FROM `%s`.`%s` FINAL WHERE _is_deleted = 0", p.database, tb.name)))
}

// warnings returns the lines of out logged at level WARN or ERROR, at most
// n of them, and how many there were.
func warnings(out string, n int) ([]string, int) {
	var ls []string
	total := 0
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "level=WARN") || strings.Contains(l, "level=ERROR") {
			total++
			if len(ls) < n {
				ls = append(ls, l)
			}
		}
	}
	return ls, total
}
