package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/jackc/pgx/v5"

	"github.com/walhouse/walhouse/harness/testenv"
	"github.com/walhouse/walhouse/record"
	"github.com/walhouse/walhouse/schema"
	"github.com/walhouse/walhouse/verify"
)

// verifyTable is a table of many types with rows of three tenants, copied
// and streamed into ClickHouse, for the tests of `walhouse verify`.
type verifyTable struct {
	p        *pipeline
	name, qt string
	chTable  string
}

func newVerifyTable(t *testing.T) (*verifyTable, *pipeline) {
	p := newPipeline(t)
	name, qt := p.table("ver", `(tenant_id text, id int8, n numeric(12,3), ts timestamptz, d date, f float8, b bytea, j jsonb,
		arr int4[], iv interval, txt text, u uuid, PRIMARY KEY (tenant_id, id))`)
	vt := &verifyTable{p: p, name: name, qt: qt, chTable: schema.TableName(record.Source{Schema: "public", Table: name})}
	// Lossy by the documented mappings: a date beyond ClickHouse's range
	// (clamped) and a nested array (flattened) every 50 rows.
	insert := func(tenant string, from, to int) {
		p.exec(fmt.Sprintf(`INSERT INTO %s SELECT $1, g, g * 1.125, '2024-01-01 00:00:00+00'::timestamptz + g * interval '1.5 seconds',
			CASE WHEN g %% 50 = 7 THEN 'infinity'::date ELSE '2020-02-29'::date + g END, g / 3.0, decode(lpad(to_hex(g), 8, '0'), 'hex'),
			jsonb_build_object('g', g, 's', 'x' || g), CASE WHEN g %% 50 = 9 THEN '{{1,2},{3,4}}'::int4[] ELSE ARRAY[g, NULL, -g] END,
			g * interval '1 minute 0.5 second', 'row ' || g || E' \u00e9', md5(g::text)::uuid FROM generate_series($2::int, $3::int) g`, qt), tenant, from, to)
	}
	insert("a", 1, 300)
	insert("b", 1, 300)
	capture := p.startCapture(name)
	sink := p.startSink()
	insert("c", 1, 300)
	p.converge(fmt.Sprintf("SELECT tenant_id, id::text FROM %s AS t ORDER BY 1, t.id", qt),
		fmt.Sprintf("SELECT tenant_id, toString(id) FROM `%s`.`%s` FINAL WHERE _is_deleted = 0 ORDER BY 1, id", p.database, vt.chTable), capture, sink)
	return vt, p
}

// verifier returns a Verifier of the pipeline's database with small
// buckets, so that a table of a few hundred rows has many.
func (vt *verifyTable) verifier(t *testing.T, opts ...verify.Option) *verify.Verifier {
	v, err := verify.New(vt.p.env.PG, vt.p.ch, append([]verify.Option{verify.WithDatabase(vt.p.database), verify.WithBucketRows(40), verify.WithLoadWait(90 * time.Second)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func (vt *verifyTable) run(t *testing.T, v *verify.Verifier) verify.TableResult {
	t.Helper()
	res, err := v.Verify(context.Background(), record.Source{Schema: "public", Table: vt.name})
	if err != nil {
		t.Fatalf("verify %s: %v", vt.name, err)
	}
	return res
}

// found lists a result's mismatches as "tenant/id kind [columns]", sorted.
func found(res verify.TableResult) []string {
	var out []string
	for _, m := range res.Mismatches {
		var cols []string
		for _, c := range m.Columns {
			cols = append(cols, c.Column)
		}
		out = append(out, fmt.Sprintf("%s/%s %s %s", m.Tenant, m.Key[0].Value, m.Kind, strings.Join(cols, ",")))
	}
	slices.Sort(out)
	return out
}

// TestIntegrationVerify checks that verify finds nothing in a table
// replicated exactly (its lossy values counted, not reported), then,
// under a steady write load to the same table and tenants, exactly the
// differences injected into ClickHouse behind walhouse's back, round after
// round, with the values of the changed column in a report of mode 0600.
func TestIntegrationVerify(t *testing.T) {
	vt, p := newVerifyTable(t)
	v := vt.verifier(t)
	res := vt.run(t, v)
	if len(res.Mismatches) != 0 || res.NotExamined != 0 {
		t.Fatalf("an exact copy has mismatches: %v", found(res))
	}
	if res.RowsChecked != 900 || res.Buckets < 900/40 {
		t.Errorf("checked %d rows in %d buckets; want 900 rows in at least %d", res.RowsChecked, res.Buckets, 900/40)
	}
	if res.Lossy["d"] != 18 || res.Lossy["arr"] != 18 {
		t.Errorf("lossy values counted: %v; want 18 clamped dates (d) and 18 flattened arrays (arr)", res.Lossy)
	}

	// A steady load on every tenant but the injected keys: updates,
	// inserts and deletes.
	stop := p.keepWriting(2*time.Millisecond, func(k int) string {
		tenant := []string{"a", "b", "c"}[k%3]
		id := 100 + k%150
		switch k % 4 {
		case 0:
			return fmt.Sprintf(`DELETE FROM %s WHERE tenant_id = '%s' AND id = %d`, vt.qt, tenant, 1000+k%200)
		case 1:
			return fmt.Sprintf(`INSERT INTO %s (tenant_id, id, txt) VALUES ('%s', %d, 'new %d') ON CONFLICT (tenant_id, id) DO UPDATE SET txt = excluded.txt`, vt.qt, tenant, 1000+k%200, k)
		}
		return fmt.Sprintf(`UPDATE %s SET n = n + 1, txt = 'load %d', ts = now() WHERE tenant_id = '%s' AND id = %d`, vt.qt, k, tenant, id)
	})
	defer stop()
	// Long transactions: a change written before a snapshot's WAL position
	// and committed after it, which ClickHouse can hold with a version
	// below the snapshot while the snapshot does not see it.
	stopSlow := longTransactions(t, p, func(k int) string {
		return fmt.Sprintf(`UPDATE %s SET txt = 'slow %d' WHERE tenant_id = '%s' AND id = %d`, vt.qt, k, []string{"a", "b", "c"}[k%3], 250+k%40)
	})
	defer stopSlow()

	// A tombstone that gets lost: the row deleted in PostgreSQL, then its
	// tombstone removed from ClickHouse, which brings the old row back.
	p.exec(fmt.Sprintf(`DELETE FROM %s WHERE tenant_id = 'b' AND id = 30`, vt.qt))
	tomb := fmt.Sprintf("SELECT count() FROM `%s`.`%s` WHERE tenant_id = 'b' AND id = 30 AND _is_deleted = 1", p.database, vt.chTable)
	if err := testenv.Eventually(context.Background(), 60*time.Second, func(context.Context) error {
		if n := p.chInt(tomb); n != 1 {
			return fmt.Errorf("%d tombstones of b/30 in ClickHouse", n)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	mut := ch.Settings{"mutations_sync": 2}
	q := "`" + p.database + "`.`" + vt.chTable + "`"
	// A merge may have folded the old row into the tombstone: the old row
	// comes back as a version just below the tombstone's.
	p.chExec(fmt.Sprintf("CREATE TABLE `%s`.lost ENGINE = Memory AS SELECT * FROM %s WHERE tenant_id = 'b' AND id = 30 AND _is_deleted = 1", p.database, q), nil)
	p.chExec(fmt.Sprintf("ALTER TABLE %s DELETE WHERE tenant_id = 'b' AND id = 30 AND _is_deleted = 1", q), mut)
	p.chExec(fmt.Sprintf("INSERT INTO %s (tenant_id, id, txt, _version, _is_deleted) SELECT tenant_id, id, 'lost delete', _version - 1, 0 FROM `%s`.lost", q, p.database), nil)
	// A row deleted in ClickHouse, a value changed there, a row only
	// there, and a row deleted only there (a tombstone written above the
	// row's version).
	p.chExec(fmt.Sprintf("ALTER TABLE %s DELETE WHERE tenant_id = 'a' AND id = 10", q), mut)
	p.chExec(fmt.Sprintf("ALTER TABLE %s UPDATE txt = 'tampered' WHERE tenant_id = 'a' AND id = 20", q), mut)
	p.chExec(fmt.Sprintf("INSERT INTO %s (tenant_id, id, txt, _version, _is_deleted) VALUES ('c', 5000, 'ghost', 1, 0)", q), nil)
	p.chExec(fmt.Sprintf("INSERT INTO %s (tenant_id, id, _version, _is_deleted) SELECT tenant_id, id, _version + 1, 1 FROM %s FINAL WHERE tenant_id = 'c' AND id = 40", q, q), nil)

	want := []string{
		"a/10 missing_in_clickhouse ",
		"a/20 values_differ txt",
		"b/30 only_in_clickhouse ",
		"c/40 deleted_in_clickhouse ",
		"c/5000 only_in_clickhouse ",
	}
	var every *everyVerify
	for round := range 4 {
		res = vt.run(t, v)
		if got := found(res); !slices.Equal(got, want) {
			t.Fatalf("round %d under load: verify found\n%s\nwant\n%s", round, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		t.Logf("round %d: %d rows, %d buckets (%d split), %d changed since, %s", round, res.RowsChecked, res.Buckets, res.SplitBuckets, res.ChangedSince, res.Duration)
		if round == 1 {
			vt.command(t, want)
			every = vt.every(t)
		}
		if round == 0 {
			path := filepath.Join(t.TempDir(), "report.json")
			if err := verify.WriteReport(path, verify.Report{Tables: []verify.TableResult{res}}); err != nil {
				t.Fatal(err)
			}
			st, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := os.ReadFile(path)
			if st.Mode().Perm() != 0o600 || !strings.Contains(string(body), `"clickhouse": "tampered"`) || !strings.Contains(string(body), `"postgresql": "row 20 é"`) {
				t.Errorf("report mode %v (want 0600), values of a/20 missing:\n%s", st.Mode().Perm(), body)
			}
		}
	}

	// --repair, still under the load: every key repaired and checked
	// again, then nothing differs, also by an independent comparison.
	if err := v.Repair(context.Background(), record.Source{Schema: "public", Table: vt.name}, &res); err != nil {
		t.Fatalf("repair: %v", err)
	}
	for _, m := range res.Mismatches {
		if !m.Repaired {
			t.Errorf("%s/%s (%s) not repaired", m.Tenant, m.Key[0].Value, m.Kind)
		}
	}
	if got := found(vt.run(t, v)); len(got) != 0 {
		t.Fatalf("after the repair, under load, verify still finds\n%s", strings.Join(got, "\n"))
	}
	every.waitRepaired(t)
	stop()
	stopSlow()
	p.converge(fmt.Sprintf("SELECT tenant_id, id::text, coalesce(txt, '<null>'), coalesce(trim_scale(n)::text, '<null>') FROM %s AS t ORDER BY 1, t.id", vt.qt),
		fmt.Sprintf("SELECT tenant_id, toString(id), ifNull(txt, '<null>'), ifNull(toString(n), '<null>') FROM %s FINAL ORDER BY 1, id", q))
	if got := found(vt.run(t, v)); len(got) != 0 {
		t.Fatalf("after the repair verify finds\n%s", strings.Join(got, "\n"))
	}
}

// longTransactions runs statement(k) for k = 0, 1, … each in a
// transaction that stays open 200 ms after it, on a connection of its own,
// until the returned stop is called or the test ends.
func longTransactions(t *testing.T, p *pipeline, statement func(k int) string) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		conn, err := pgx.Connect(ctx, p.env.PG)
		if err != nil {
			return
		}
		defer conn.Close(context.Background())
		for k := 0; ctx.Err() == nil; k++ {
			tx, err := conn.Begin(ctx)
			if err != nil {
				return
			}
			_, _ = tx.Exec(ctx, statement(k))
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
			_ = tx.Commit(context.Background())
		}
	}()
	var once sync.Once
	stop = func() { once.Do(cancel); <-done }
	t.Cleanup(stop)
	return stop
}

// command runs `walhouse verify` on the table: it must exit 1, write a
// report of mode 0600 with want, and log no value.
func (vt *verifyTable) command(t *testing.T, want []string) {
	t.Helper()
	p := vt.p
	path := filepath.Join(t.TempDir(), "verify.json")
	cmd := exec.Command(walhouseBin, "verify", "--pg", p.env.PG, "--clickhouse", p.env.ClickHouse, "--database", p.database,
		"--tables", "public."+vt.name, "--report", path, "--bucket-rows", "40", "--load-wait", "90s")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("walhouse verify with rows that differ: %v, want exit status 1\n%s", err, out)
	}
	if strings.Contains(string(out), "tampered") || strings.Contains(string(out), "lost delete") {
		t.Errorf("walhouse verify logged a value:\n%s", out)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := os.ReadFile(path)
	var rep verify.Report
	if err := json.Unmarshal(body, &rep); err != nil || len(rep.Tables) != 1 {
		t.Fatalf("report: %v\n%s", err, body)
	}
	if got := found(rep.Tables[0]); st.Mode().Perm() != 0o600 || !slices.Equal(got, want) {
		t.Errorf("walhouse verify: report mode %v (want 0600), found\n%s\nwant\n%s", st.Mode().Perm(), strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// The round is recorded for serve's status page: its counts and
	// snapshot position, never a key or a value.
	rounds, err := chRows(context.Background(), p.ch, fmt.Sprintf("SELECT source_table, outcome, toString(snapshot_lsn), toString(rows_checked), toString(mismatched_rows), toString(repaired_rows), error FROM `%s`.%s FINAL",
		p.database, schema.VerifyTable), nil)
	if err != nil {
		t.Fatal(err)
	}
	wantRound := fmt.Sprintf("%s | verified | %d | %d | %d | 0 | ", vt.chTable, uint64(rep.Tables[0].Snapshot), rep.Tables[0].RowsChecked, len(want))
	if len(rounds) != 1 || rounds[0] != wantRound {
		t.Errorf("walhouse verify recorded %q in %s, want one round %q", rounds, schema.VerifyTable, wantRound)
	}
}

// everyVerify is a long-running `walhouse verify --every` and its metrics
// address.
type everyVerify struct {
	proc   *testenv.Proc
	addr   string
	series string
}

// every starts `walhouse verify --every 1s` on the table, with the 5
// differences in place, and waits until its metrics report them.
func (vt *verifyTable) every(t *testing.T) *everyVerify {
	t.Helper()
	p := vt.p
	e := &everyVerify{addr: testenv.FreeAddr(t), series: fmt.Sprintf(`walhouse_verify_mismatched_rows{table="public.%s"}`, vt.name)}
	e.proc = testenv.Start(t, "verify", walhouseBin, "verify", "--pg", p.env.PG, "--clickhouse", p.env.ClickHouse, "--database", p.database,
		"--tables", "public."+vt.name, "--every", "1s", "--metrics-addr", e.addr, "--bucket-rows", "40", "--load-wait", "90s")
	waitMetric(t, e.addr, e.series, 5, e.proc)
	waitMetric(t, e.addr, fmt.Sprintf(`walhouse_verify_rows_checked_total{table="public.%s"}`, vt.name), 900, e.proc)
	return e
}

// waitRepaired waits until a round after the repair reports no
// difference, and checks that the process logged no value.
func (e *everyVerify) waitRepaired(t *testing.T) {
	t.Helper()
	err := testenv.Eventually(context.Background(), 90*time.Second, func(ctx context.Context) error {
		if err := exited(e.proc); err != nil {
			return err
		}
		v, err := scrape(ctx, e.addr, e.series)
		if err == nil && v != 0 {
			err = fmt.Errorf("%s is %v", e.series, v)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if out := e.proc.Output(); strings.Contains(out, "tampered") || strings.Contains(out, "lost delete") {
		t.Errorf("walhouse verify --every logged a value:\n%s", out)
	}
}
