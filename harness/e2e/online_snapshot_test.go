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
	"github.com/walhouse/walhouse/record"
)

// TestIntegrationTableJoinsWhileStreaming adds a table with existing rows to
// the publication while capture streams another one. The new table must be
// copied next to the stream (the other table's changes keep flowing during
// the copy), and updates made right after the table joined, which leave
// large TOASTed values unchanged and reach Kafka before the copy of their
// rows, must not lose those values. ClickHouse must end equal to
// PostgreSQL for both tables.
func TestIntegrationTableJoinsWhileStreaming(t *testing.T) {
	p := newPipeline(t)
	streamed, qs := p.table("stay", `(tenant_id text, id bigserial, v int, PRIMARY KEY (tenant_id, id))`)
	joined, qj := p.table("join", `(tenant_id text, id int, big text, n int, PRIMARY KEY (tenant_id, id))`)
	p.exec(fmt.Sprintf(`ALTER TABLE %s ALTER COLUMN big SET STORAGE EXTERNAL`, qj))
	const bigValue = `(SELECT string_agg(md5(random()::text || g::text), '') FROM generate_series(1, 300) g)` // 9.6 KB
	// Enough rows, in small chunks read by one worker, that the copy takes
	// a while; the first 50 carry out-of-line values.
	p.exec(fmt.Sprintf(`INSERT INTO %s SELECT 't' || (i %% 3), i, CASE WHEN i <= 50 THEN %s END, 0 FROM generate_series(1, 150000) i`, qj, bigValue))

	capture := p.runCapture(p.captureArgs([]string{streamed}, "--snapshot-workers", "1", "--snapshot-chunk-pages", "16"))
	sink := p.startSink()
	p.exec(fmt.Sprintf(`INSERT INTO %s (tenant_id, v) SELECT 't' || (i %% 2), i FROM generate_series(1, 100) i`, qs))

	// Keep changing the streamed table while the other one joins.
	stopWriter := p.keepWriting(10*time.Millisecond, func(k int) string {
		return fmt.Sprintf(`INSERT INTO %s (tenant_id, v) VALUES ('t%d', %d)`, qs, k%2, k)
	})

	p.exec(fmt.Sprintf(`ALTER PUBLICATION %s ADD TABLE %s`, pgx.Identifier{p.pub}.Sanitize(), qj))
	// Right after joining: updates that leave big alone, a delete, an
	// insert; they reach Kafka before the copy of their rows.
	p.exec(fmt.Sprintf(`UPDATE %s SET n = n + 1 WHERE id <= 40`, qj))
	p.exec(fmt.Sprintf(`DELETE FROM %s WHERE id BETWEEN 41 AND 45`, qj))
	p.exec(fmt.Sprintf(`INSERT INTO %s VALUES ('t1', 200001, %s, 7)`, qj, bigValue))
	waitLog(t, capture, "msg=complete", "online=true", joined)
	// And after the copy.
	p.exec(fmt.Sprintf(`UPDATE %s SET n = n + 10 WHERE id <= 10 OR id = 200001`, qj))
	stopWriter()

	pgJoined := fmt.Sprintf(`SELECT tenant_id, id::text, coalesce(md5(big), '-'), n::text FROM %s AS t ORDER BY 1, t.id`, qj)
	chJoined := fmt.Sprintf("SELECT tenant_id, toString(id), if(isNull(big), '-', lower(hex(MD5(big)))), toString(n) FROM `%s`.`%s` FINAL WHERE _is_deleted = 0 ORDER BY tenant_id, id", p.database, joined)
	p.converge(pgJoined, chJoined, capture, sink)
	pgStreamed := fmt.Sprintf(`SELECT tenant_id, id::text, v::text FROM %s AS t ORDER BY 1, t.id`, qs)
	chStreamed := fmt.Sprintf("SELECT tenant_id, toString(id), toString(v) FROM `%s`.`%s` FINAL WHERE _is_deleted = 0 ORDER BY tenant_id, id", p.database, streamed)
	p.converge(pgStreamed, chStreamed, capture, sink)

	// The stream did not wait for the copy: some changes of the streamed
	// table were produced between the first and the last copied row.
	first, last := ingestSpan(t, p, p.prefix+".public."+joined, record.Read)
	if !last.After(first) {
		t.Fatalf("copy of %s took no time (%v); the test cannot tell whether the stream kept flowing", joined, first)
	}
	during := 0
	for _, r := range p.topicRows(p.prefix + ".public." + streamed) {
		if r.IngestedAt.After(first) && r.IngestedAt.Before(last) {
			during++
		}
	}
	if during == 0 {
		t.Errorf("no change of %s was produced while %s was copied (%v to %v): the stream waited for the copy", streamed, joined, first, last)
	}
	if !strings.Contains(capture.Output(), "table joined the stream") {
		t.Errorf("capture did not log the table joining:\n%s", capture.Output())
	}
}

// ingestSpan returns the first and last ingestedAt of a topic's records of
// the given operation.
func ingestSpan(t *testing.T, p *pipeline, topic string, op record.Op) (first, last time.Time) {
	t.Helper()
	for _, r := range p.topicRows(topic) {
		if r.Op != op {
			continue
		}
		if first.IsZero() || r.IngestedAt.Before(first) {
			first = r.IngestedAt
		}
		if r.IngestedAt.After(last) {
			last = r.IngestedAt
		}
	}
	if first.IsZero() {
		t.Fatalf("topic %s has no %q records", topic, op)
	}
	return first, last
}

// waitLog waits until a process has logged a line containing all of parts.
func waitLog(t *testing.T, proc *testenv.Proc, parts ...string) {
	t.Helper()
	err := testenv.Eventually(context.Background(), 90*time.Second, func(context.Context) error {
		for _, line := range strings.Split(proc.Output(), "\n") {
			if !slices.ContainsFunc(parts, func(s string) bool { return !strings.Contains(line, s) }) {
				return nil
			}
		}
		if err := exited(proc); err != nil {
			return err
		}
		return fmt.Errorf("no line with %q in the log yet", parts)
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, proc.Output())
	}
}

// TestIntegrationTruncateDuringOnlineCopy truncates a table while its
// online copy runs, then writes to it again. Copied rows have version 0, so
// the truncate markers must find every row read before the TRUNCATE ahead
// of them, and the copy must not bring back rows the TRUNCATE removed.
func TestIntegrationTruncateDuringOnlineCopy(t *testing.T) {
	p := newPipeline(t)
	streamed, qs := p.table("stay", `(tenant_id text, id int, PRIMARY KEY (tenant_id, id))`)
	joined, qj := p.table("trunc", `(tenant_id text, id int, n int, PRIMARY KEY (tenant_id, id))`)
	p.exec(fmt.Sprintf(`INSERT INTO %s SELECT 't' || (i %% 3), i, 0 FROM generate_series(1, 150000) i`, qj))

	capture := p.runCapture(p.captureArgs([]string{streamed}, "--snapshot-workers", "1", "--snapshot-chunk-pages", "16"))
	sink := p.startSink()
	p.exec(fmt.Sprintf(`ALTER PUBLICATION %s ADD TABLE %s`, pgx.Identifier{p.pub}.Sanitize(), qj))
	p.exec(fmt.Sprintf(`INSERT INTO %s VALUES ('t1', 1)`, qs)) // the stream notices the new table at once
	waitLog(t, capture, "msg=starting", "online=true", joined)
	p.exec(fmt.Sprintf(`BEGIN; DELETE FROM %s WHERE id = 1; TRUNCATE %s; INSERT INTO %s VALUES ('t0', 7, 1), ('t1', 200000, 2); COMMIT`, qj, qj, qj))
	p.exec(fmt.Sprintf(`INSERT INTO %s SELECT 't2', i, 3 FROM generate_series(300000, 300100) i`, qj))
	p.exec(fmt.Sprintf(`UPDATE %s SET n = n + 1 WHERE id = 7`, qj))
	waitLog(t, capture, "msg=complete", "online=true", joined)

	pgQuery := fmt.Sprintf(`SELECT tenant_id, id::text, n::text FROM %s AS t ORDER BY 1, t.id`, qj)
	chQuery := fmt.Sprintf("SELECT tenant_id, toString(id), toString(n) FROM `%s`.`%s` FINAL WHERE _is_deleted = 0 ORDER BY tenant_id, id", p.database, joined)
	p.converge(pgQuery, chQuery, capture, sink)
}

// A table removed from the publication and added back while capture is
// stopped has changes that never reached the slot. PostgreSQL keeps no
// trace of that but the table's new entry in the publication: capture must
// notice it at start, copy the table again (which brings in the rows
// inserted meanwhile) and say what it cannot repair and how; the documented
// recovery must then make ClickHouse equal to PostgreSQL.
func TestIntegrationTableRejoinedWhileStopped(t *testing.T) {
	p, tb, capture := capturedSinkTable(t)
	sink := p.startSink()
	p.change(tb, 0)
	p.converge(tb.pgQuery, tb.chQuery, capture, sink)
	capture.Stop()

	pub := pgx.Identifier{p.pub}.Sanitize()
	p.exec(fmt.Sprintf(`ALTER PUBLICATION %s DROP TABLE %s`, pub, tb.quoted))
	p.exec(fmt.Sprintf(`INSERT INTO %s (tenant_id, id, amount, status, qty, note, updated_at)
		SELECT 'acme', 5000 + g, g, 'while out', g, 'inserted while out of the publication', now() FROM generate_series(1, 30) g`, tb.quoted))
	p.exec(fmt.Sprintf(`UPDATE %s SET status = 'updated while out' WHERE id %% 2 = 0 AND id < 5000`, tb.quoted))
	p.exec(fmt.Sprintf(`ALTER PUBLICATION %s ADD TABLE %s`, pub, tb.quoted))

	capture = p.startCapture(tb.name)
	waitLog(t, capture, "joined it again while capture was stopped", "--resnapshot")
	inserted := fmt.Sprintf("SELECT count() FROM `%s`.`%s` FINAL WHERE _is_deleted = 0 AND status = 'while out'", p.database, tb.name)
	if err := testenv.Eventually(context.Background(), 60*time.Second, func(context.Context) error {
		if n := p.chInt(inserted); n != 30 {
			return fmt.Errorf("%d of the 30 rows inserted while the table was out of the publication are in ClickHouse", n)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	// The recovery the warning names.
	capture.Stop()
	sink.Stop()
	p.chExec(fmt.Sprintf("DROP TABLE `%s`.`%s`", p.database, tb.name), nil)
	capture = killAtEnd(t, p.runCapture(p.captureArgs([]string{tb.name}, "--resnapshot", "public."+tb.name)))
	sink = killAtEnd(t, p.startSink())
	p.converge(tb.pgQuery, tb.chQuery, capture, sink)
}

// A table that joins the publication but cannot be captured (here: no
// primary key) is left out with one error; capture goes on streaming the
// others.
func TestIntegrationUncapturableTableJoinDoesNotStopCapture(t *testing.T) {
	p := newPipeline(t)
	streamed, qs := p.table("stay", `(tenant_id text, id bigserial, v int, PRIMARY KEY (tenant_id, id))`)
	nokey, qn := p.table("nokey", `(tenant_id text, v int)`)
	capture := p.runCapture(p.captureArgs([]string{streamed}))
	sink := p.startSink()
	p.exec(fmt.Sprintf(`INSERT INTO %s (tenant_id, v) VALUES ('t', 1)`, qs))
	p.exec(fmt.Sprintf(`ALTER PUBLICATION %s ADD TABLE %s`, pgx.Identifier{p.pub}.Sanitize(), qn))
	p.exec(fmt.Sprintf(`INSERT INTO %s VALUES ('t', 1)`, qn))
	waitLog(t, capture, "cannot be captured", nokey)
	p.exec(fmt.Sprintf(`INSERT INTO %s (tenant_id, v) SELECT 't', i FROM generate_series(2, 100) i`, qs))
	pgRows := fmt.Sprintf(`SELECT tenant_id, id::text, v::text FROM %s AS t ORDER BY 1, t.id`, qs)
	chRows := fmt.Sprintf("SELECT tenant_id, toString(id), toString(v) FROM `%s`.`%s` FINAL WHERE _is_deleted = 0 ORDER BY tenant_id, id", p.database, streamed)
	p.converge(pgRows, chRows, capture, sink)
}
