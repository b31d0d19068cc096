package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/walhouse/walhouse/clickhouse"
	"github.com/walhouse/walhouse/harness/testenv"
	"github.com/walhouse/walhouse/schema"
)

// retypeRun is a table whose layout's column types change after the sink
// created it, loaded by capture and a sink that keep the old layout and
// keep running, under a steady write load: the stage of a relayout of
// column types.
type retypeRun struct {
	p             *pipeline
	table, qt     string // qt: quoted for PostgreSQL
	capture, sink *testenv.Proc
	pgQuery       string
	stop          func() // ends the write load
	live          uint64 // the live rows: the workload never changes their number
	building      string // counts the relayout's building table and view
}

// newRetypeRun loads a table of a numeric(12, 2), a text and a
// timestamptz column, whose prices in quarters mostly have trailing zeros
// in PostgreSQL's text (0.50, 3.00), which a decimal's text in ClickHouse
// drops, and whose times have milliseconds, which the sink's layout keeps
// (DateTime64(3)), and starts the write load (times unchanged).
func newRetypeRun(t *testing.T) *retypeRun {
	return newRetypeRunLayout(t, `{"columns":{"at":{"type":"DateTime64(3)"}}}`)
}

// newRetypeRunLayout is newRetypeRun with the sink's layout of the table
// (JSON), which must keep at a DateTime64(3).
func newRetypeRunLayout(t *testing.T, layout string) *retypeRun {
	const rows = 5_000
	p := newPipeline(t)
	table, qt := p.table("relayouttypes", `(tenant_id text, id int, status text, price numeric(12, 2), at timestamptz, amount int, PRIMARY KEY (tenant_id, id))`)
	p.exec(fmt.Sprintf(`INSERT INTO %s SELECT 't' || (i %% 7), i, (ARRAY['new', 'paid', 'sent'])[1 + i %% 3], CASE WHEN i %% 13 = 0 THEN NULL ELSE (i %% 400) * 0.25 END, `+
		`'2026-01-01 00:00:00+00'::timestamptz + i * interval '1.234 second', i FROM generate_series(1, %d) i`, qt, rows))
	p.exec(fmt.Sprintf(`DELETE FROM %s WHERE id %% 50 = 0`, qt))
	r := &retypeRun{p: p, table: table, qt: qt, live: uint64(rows - rows/50)}
	r.capture = p.runCapture(p.captureArgs([]string{table}))
	r.sink = p.sink("--layout", fmt.Sprintf(`public.%s=%s`, table, layout))
	r.pgQuery = fmt.Sprintf(`SELECT tenant_id, id::text, coalesce(status, 'NULL'), coalesce(price::text, 'NULL'), (extract(epoch FROM at) * 1000000)::bigint::text, coalesce(amount::text, 'NULL') FROM %s AS t ORDER BY t.tenant_id, t.id`, qt)
	p.convergeWithin(2*time.Minute, r.pgQuery, r.chQuery("toDecimalString(price, 2)"), r.capture, r.sink)
	p.checkColumnTypes(table, map[string]string{"status": "Nullable(String)", "price": "Nullable(Decimal(12, 2))", "at": "Nullable(DateTime64(3, 'UTC'))"})
	r.building = fmt.Sprintf("SELECT count() FROM system.tables WHERE database = %s AND name IN (%s, %s)", schema.QuoteString(p.database),
		schema.QuoteString(clickhouse.RelayoutForwardName(table)), schema.QuoteString(clickhouse.RelayoutBuildName(table)))

	r.stop = p.keepWriting(20*time.Millisecond, func(k int) string {
		return fmt.Sprintf(`UPDATE %s SET status = (ARRAY['new', 'paid', 'sent', 'held'])[1 + %d %% 4], price = price + 0.50, amount = amount + 1 WHERE id %% 97 = %d`, qt, k, k%97)
	})
	// The relayout takes the table's columns from its newest change.
	count := fmt.Sprintf("SELECT count() FROM `%s`.`%s`", p.database, table)
	before := p.chInt(count)
	if err := testenv.Eventually(context.Background(), time.Minute, func(context.Context) error {
		if n := p.chInt(count); n < before+200 {
			return fmt.Errorf("%d rows, waiting for %d", n, before+200)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return r
}

// chQuery is the ClickHouse side of r.pgQuery, with price read as price.
func (r *retypeRun) chQuery(price string) string {
	return fmt.Sprintf("SELECT tenant_id, toString(id), ifNull(status, 'NULL'), ifNull(%s, 'NULL'), toString(toUnixTimestamp64Micro(at)), ifNull(toString(amount), 'NULL')"+
		" FROM `%s`.`%s` FINAL WHERE _is_deleted = 0 ORDER BY tenant_id, id", price, r.p.database, r.table)
}

// config writes a configuration file whose layout of the table has
// columns (YAML lines of the columns key) and returns its path.
func (r *retypeRun) config(t *testing.T, columns string) string {
	return r.layoutConfig(t, "    columns:\n"+columns, "")
}

// layoutConfig writes a configuration file whose layout of the table is
// lines (YAML lines under the table's key), with extra (YAML lines of the
// top level) after the rest, and returns its path.
func (r *retypeRun) layoutConfig(t *testing.T, lines, extra string) string {
	p := r.p
	file := filepath.Join(t.TempDir(), "walhouse.yaml")
	cfg := fmt.Sprintf("layout:\n  public.%s:\n%s"+
		"kafka:\n  brokers: [%s]\nclickhouse:\n  url: %s\n  database: %s\ntopics:\n  prefix: %s\n%s", r.table, lines, p.env.Kafka, p.env.ClickHouse, p.database, p.prefix, extra)
	if err := os.WriteFile(file, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

// relayout runs walhouse relayout of the table with configuration file
// file, environment env (NAME=value) and extra arguments until it exits.
func (r *retypeRun) relayout(t *testing.T, file, env string, extra ...string) (*testenv.Proc, error) {
	args := append([]string{"--config", file, "relayout", "public." + r.table}, extra...)
	proc := testenv.Start(t, "relayout ("+env+")", "env", append([]string{env, walhouseBin}, args...)...)
	return proc, proc.Wait(3 * time.Minute)
}

// newTypes is the layout's change: the decimal as PostgreSQL's text, the
// text as a dictionary, the time with microseconds.
const newTypes = "      price: {type: String}\n      status: {type: \"LowCardinality(String)\"}\n      at: {type: \"DateTime64(6)\"}\n"

// retyped is how walhouse relayout names newTypes' changes.
const retyped = "with column status Nullable(String) to LowCardinality(Nullable(String)), column price Nullable(Decimal(12, 2)) to Nullable(String), column at Nullable(DateTime64(3, 'UTC')) to Nullable(DateTime64(6, 'UTC'))"

// finish ends the write load and checks that FINAL equals PostgreSQL's
// text, the columns have the new types and nothing of the relayout is
// left; then that the sink, which kept the old types in its insert's
// description, inserted into the new table: the server refused the block,
// and the retry read the columns again.
func (r *retypeRun) finish(t *testing.T, done func()) {
	time.Sleep(2 * time.Second)
	r.stop()
	r.p.convergeWithin(2*time.Minute, r.pgQuery, r.chQuery("price"), r.capture, r.sink)
	done()
	r.p.checkColumnTypes(r.table, map[string]string{"status": "LowCardinality(Nullable(String))", "price": "Nullable(String)", "at": "Nullable(DateTime64(6, 'UTC'))"})
	if n := r.p.chInt(r.building); n != 0 {
		t.Errorf("the forwarding view or the building table is still there")
	}
	mismatch := ""
	for _, line := range strings.Split(r.sink.Output(), "\n") {
		if strings.Contains(line, "TYPE_MISMATCH") {
			mismatch = line
			break
		}
	}
	if mismatch == "" {
		t.Errorf("the sink never inserted with the old column types into the new table; the test proves nothing about sinks running across the swap")
	}
	t.Logf("the sink's insert with the old types: %s", mismatch)
}

// TestIntegrationRelayoutColumnTypes changes the column types of a
// table's layout after the sink created it (docs/shaping-tables.md#column-types):
// a numeric(12, 2) to String and a text to LowCardinality(String), and
// runs `walhouse relayout` while capture and a sink that keeps the old
// layout stream and load the table under a steady write load. First a
// layout that no exact conversion reaches (Decimal(12, 2) to Float64) is
// refused before anything is built, naming the column, both types and
// the fix. Then the relayout is held between its copy and its swap and
// right after the swap, so the sink loads into the old table through the
// forwarding view, and into the new one with the old types in its
// insert's description: that insert must fail on the type mismatch (the
// server would otherwise convert the decimal to text without
// PostgreSQL's trailing zeros) and its retry load the right text. FINAL is
// sampled throughout (every sample exact), ends equal to PostgreSQL's
// text, and the columns have the new layout's types.
func TestIntegrationRelayoutColumnTypes(t *testing.T) {
	r := newRetypeRun(t)
	narrow, err := r.relayout(t, r.config(t, "      price: {type: Float64}\n"), "E2E_NOTHING=1")
	out := narrow.Output()
	if err == nil || !strings.Contains(out, "column price from Nullable(Decimal(12, 2)) to Nullable(Float64)") || !strings.Contains(out, "--resnapshot public."+r.table) {
		t.Errorf("a relayout to Float64: %v, want it refused naming the column, both types and the fix:\n%s", err, out)
	}
	if n := r.p.chInt(r.building); n != 0 {
		t.Errorf("a refused relayout built %d tables or views", n)
	}

	done := sampleFinal(t, r.p, r.table, r.live)
	file := r.config(t, newTypes)
	proc, err := r.relayout(t, file, "WALHOUSE_FAILPOINTS=relayout.copied=pause:3s,relayout.swapped=pause:2s")
	if err != nil {
		t.Fatalf("walhouse relayout: %v\n%s", err, proc.Output())
	}
	out = proc.Output()
	t.Logf("walhouse relayout:\n%s", out)
	if !strings.Contains(out, retyped) {
		t.Errorf("walhouse relayout did not say which column types it changed:\n%s", out)
	}
	r.finish(t, done)

	again, err := r.relayout(t, file, "E2E_NOTHING=1", "--drop-old")
	if err != nil || !strings.Contains(again.Output(), "already in its layout") {
		t.Errorf("a second relayout: %v, want it to find the layout in place:\n%s", err, again.Output())
	}
}

// TestIntegrationRelayoutColumnTypesResumes kills walhouse relayout of
// column types (as kill -9 would) right after its swap, with the
// forwarding view still in place: it then forwards the sink's inserts
// into the new table back to the old one, converted to the old types,
// which drops the microseconds the workload now writes. The run after the
// crash drops the view and copies the old table's rows again, converted,
// leaving out those the new table has (the same version would otherwise
// be there twice, and the copy, inserted last, win at FINAL without its
// microseconds); FINAL, sampled throughout, ends equal to PostgreSQL to
// the microsecond, with the new types.
func TestIntegrationRelayoutColumnTypesResumes(t *testing.T) {
	r := newRetypeRun(t)
	done := sampleFinal(t, r.p, r.table, r.live)
	file := r.config(t, newTypes)
	proc, err := r.relayout(t, file, "WALHOUSE_FAILPOINTS=relayout.swapped=crash")
	if err == nil || !strings.Contains(proc.Output(), "crashing at relayout.swapped") {
		t.Fatalf("walhouse relayout did not crash at relayout.swapped: %v\n%s", err, proc.Output())
	}
	// The sink loads on after the crash, into the new table and through
	// the view left in place: times with microseconds.
	r.stop()
	r.stop = r.p.keepWriting(20*time.Millisecond, func(k int) string {
		return fmt.Sprintf(`UPDATE %s SET at = at + interval '0.000001 second' * (1 + %d %% 997), amount = amount + 1 WHERE id %% 97 = %d`, r.qt, k, k%97)
	})
	time.Sleep(3 * time.Second)
	r.stop()
	r.p.convergeWithin(2*time.Minute, r.pgQuery, r.chQuery("price"), r.capture, r.sink)
	if n := r.p.chInt(fmt.Sprintf("SELECT count() FROM `%s`.`%s` WHERE toUnixTimestamp64Micro(at) %% 1000 != 0", r.p.database, r.table)); n < 1000 {
		t.Errorf("the new table holds %d rows with microseconds, want more than 1000 for the test to prove anything", n)
	}
	proc, err = r.relayout(t, file, "E2E_NOTHING=1")
	if err != nil {
		t.Fatalf("walhouse relayout after the crash: %v\n%s", err, proc.Output())
	}
	if !strings.Contains(proc.Output(), "finished a relayout interrupted after its swap: ORDER BY tenant_id, id, PARTITION BY (none), with column status") {
		t.Errorf("walhouse relayout did not say it finished the interrupted one:\n%s", proc.Output())
	}
	r.finish(t, done)
	kept := clickhouse.RelayoutKeptName(r.table)
	if n := r.p.chInt(fmt.Sprintf("SELECT count() FROM `%s`.`%s` FINAL WHERE _is_deleted = 0", r.p.database, kept)); uint64(n) != r.live {
		t.Errorf("the kept old table has %d rows, want %d", n, r.live)
	}
}

// captureLayout gives capture the layout of configuration file file, in
// the operator's order: capture first, and the relayout once the sink
// loaded what the old capture wrote. A move's tombstone needs the row's
// old sorting columns: the table's replica identity becomes FULL, and the
// old capture stops once the slot confirmed the change, so that the new
// one replays no change without them.
func (r *retypeRun) captureLayout(t *testing.T, file string) {
	p := r.p
	p.exec(fmt.Sprintf(`ALTER TABLE %s REPLICA IDENTITY FULL`, r.qt))
	var lsn string
	if err := p.pg.QueryRow(context.Background(), `SELECT pg_current_wal_lsn()::text`).Scan(&lsn); err != nil {
		t.Fatal(err)
	}
	if err := testenv.Eventually(context.Background(), time.Minute, func(ctx context.Context) error {
		var past bool
		if err := p.pg.QueryRow(ctx, `SELECT confirmed_flush_lsn >= $1::pg_lsn FROM pg_replication_slots WHERE slot_name = $2`, lsn, p.slot).Scan(&past); err != nil || !past {
			return fmt.Errorf("slot %s not past %s yet (%v)", p.slot, lsn, err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	r.capture.Kill()
	p.caughtUp(p.group, p.prefix+".public."+r.table, r.sink)
	r.capture = p.runCapture(append([]string{"--config", file}, p.captureArgs([]string{r.table})...))
}

// relayoutMicrosAtSwap runs walhouse relayout of the table with
// configuration file file, held for 6 s right after its swap, with the
// forwarding view still in place: then it forwards the sink's inserts
// into the new table back to the old one, converted to the old types.
// During the first 3 s of the hold the write load changes times by
// microseconds, which the forwarded copies lose; then nothing is written,
// so no later version hides a copy brought back over the exact row. It
// waits until the relayout exits and returns its output, checking that
// the new table took the microseconds and the old one the forwarded
// copies: otherwise the test proves nothing.
func (r *retypeRun) relayoutMicrosAtSwap(t *testing.T, file string) string {
	proc := testenv.Start(t, "relayout (held after its swap)", "env", "WALHOUSE_FAILPOINTS=relayout.swapped=pause:6s", walhouseBin, "--config", file, "relayout", "public."+r.table)
	waitLog(t, proc, "pausing", "relayout.swapped")
	r.stop()
	r.stop = r.p.keepWriting(20*time.Millisecond, func(k int) string {
		return fmt.Sprintf(`UPDATE %s SET at = at + interval '0.000001 second' * (1 + %d %% 997), amount = amount + 1 WHERE id %% 97 = %d`, r.qt, k, k%97)
	})
	time.Sleep(3 * time.Second)
	r.stop()
	if err := proc.Wait(3 * time.Minute); err != nil {
		t.Fatalf("walhouse relayout: %v\n%s", err, proc.Output())
	}
	micro := fmt.Sprintf("SELECT count() FROM `%s`.`%s` WHERE toUnixTimestamp64Micro(at) %% 1000 != 0", r.p.database, r.table)
	if n := r.p.chInt(micro); n < 500 {
		t.Errorf("the new table holds %d rows with microseconds, want more than 500 for the test to prove anything", n)
	}
	back := fmt.Sprintf("SELECT count() FROM `%[1]s`.`%[2]s` WHERE (tenant_id, id, _version) IN (SELECT tenant_id, id, _version FROM `%[1]s`.`%[3]s` WHERE toUnixTimestamp64Micro(at) %% 1000 != 0)",
		r.p.database, clickhouse.RelayoutKeptName(r.table), r.table)
	if n := r.p.chInt(back); n == 0 {
		t.Errorf("the view forwarded no insert into the new table back to the old one during the hold: the test proves nothing")
	} else {
		t.Logf("%d rows forwarded back to the old table after the swap", n)
	}
	return proc.Output()
}

// TestIntegrationRelayoutColumnTypesCatchUp widens a DateTime64(3) to
// (6) (with newTypes' other changes) by a relayout that runs to its end,
// held after its swap while the sink loads times with microseconds into
// the new table, which the forwarding view copies back to the old one
// without them. The catch-up after the swap copies the old table's new
// parts, leaving out the rows the new table has: FINAL, sampled
// throughout, ends equal to PostgreSQL to the microsecond.
func TestIntegrationRelayoutColumnTypesCatchUp(t *testing.T) {
	r := newRetypeRun(t)
	done := sampleFinal(t, r.p, r.table, r.live)
	out := r.relayoutMicrosAtSwap(t, r.config(t, newTypes))
	t.Logf("walhouse relayout:\n%s", out)
	if !strings.Contains(out, retyped) {
		t.Errorf("walhouse relayout did not say which column types it changed:\n%s", out)
	}
	r.finish(t, done)
}

// TestIntegrationRelayoutKeyAndColumnTypes changes a table's sorting key,
// its partitions and its column types in one relayout, under the write
// load: the layout becomes ORDER BY (tenant_id, amount, id), partitioned,
// with newTypes. Capture takes the new layout first (every change of the
// write loads is a move under it) and the sink loads what the old capture
// wrote; then the relayout runs, held after its swap while the sink
// loads microseconds (relayoutMicrosAtSwap). FINAL, sampled throughout, ends equal to
// PostgreSQL to the microsecond, with the new sorting key, partition key
// and column types.
func TestIntegrationRelayoutKeyAndColumnTypes(t *testing.T) {
	r := newRetypeRun(t)
	const newKey, newPartition = "tenant_id, amount, id", "cityHash64(tenant_id) % 4"
	file := r.layoutConfig(t, "    order_by: [tenant_id, amount, id]\n    partition_by: cityHash64(tenant_id) % 4\n    columns:\n"+newTypes, "")
	r.captureLayout(t, file)
	done := sampleFinal(t, r.p, r.table, r.live)
	out := r.relayoutMicrosAtSwap(t, file)
	t.Logf("walhouse relayout:\n%s", out)
	if !strings.Contains(out, "relayouted from ORDER BY tenant_id, id, PARTITION BY (none) to ORDER BY tenant_id, amount, id, PARTITION BY cityHash64(`tenant_id`) % 4, "+retyped) {
		t.Errorf("walhouse relayout did not say what it did:\n%s", out)
	}
	r.finish(t, done)
	var sortingKey, partitionKey string
	q := fmt.Sprintf("SELECT sorting_key, partition_key FROM system.tables WHERE database = %s AND name = %s", schema.QuoteString(r.p.database), schema.QuoteString(r.table))
	if err := r.p.ch.QueryRow(context.Background(), q).Scan(&sortingKey, &partitionKey); err != nil {
		t.Fatal(err)
	}
	if sortingKey != newKey || partitionKey != newPartition {
		t.Errorf("sorting key %q, partition key %q; want %q and %q", sortingKey, partitionKey, newKey, newPartition)
	}
}

// TestIntegrationSinkRelayoutColumnTypes starts a second sink of the
// group with a configuration file whose layout has newTypes and
// sink.relayout on, while the first keeps loading with the old layout
// under the write load: the second relayouts the table when it first
// loads it, and the first, with the old types in its insert's
// description, fails once on the type mismatch and loads into the new
// table with its columns read again. It keeps its old layout file: it
// warns, each time it opens the table, that the table's types are not
// its layout's and that the fix is the new file, and loads the new
// columns as they are, times with their microseconds, which the write
// load writes once the tables are swapped.
// FINAL, sampled throughout, ends equal to PostgreSQL to the microsecond,
// with the new types; both sinks keep running.
func TestIntegrationSinkRelayoutColumnTypes(t *testing.T) {
	r := newRetypeRun(t)
	done := sampleFinal(t, r.p, r.table, r.live)
	file := r.layoutConfig(t, "    columns:\n"+newTypes, "sink:\n  relayout: true\n")
	relayouting := r.p.sink("--config", file)
	waitLog(t, relayouting, "relayout: the table has its new shape")
	if out := relayouting.Output(); !strings.Contains(out, `column_types="status Nullable(String) to LowCardinality(Nullable(String)), price Nullable(Decimal(12, 2)) to Nullable(String), at Nullable(DateTime64(3, 'UTC')) to Nullable(DateTime64(6, 'UTC'))"`) {
		t.Errorf("the sink with --relayout did not log the column types it changes:\n%s", out)
	}
	r.stop()
	r.stop = r.p.keepWriting(20*time.Millisecond, func(k int) string {
		return fmt.Sprintf(`UPDATE %s SET at = at + interval '0.000001 second' * (1 + %d %% 997), price = price + 0.25, amount = amount + 1 WHERE id %% 97 = %d`, r.qt, k, k%97)
	})
	r.finish(t, done)
	if err := exited(relayouting); err != nil {
		t.Errorf("the sink that relayouted the table: %v", err)
	}
	if n := r.p.chInt(fmt.Sprintf("SELECT count() FROM `%s`.`%s` WHERE toUnixTimestamp64Micro(at) %% 1000 != 0", r.p.database, r.table)); n < 500 {
		t.Errorf("the table holds %d rows with microseconds, want more than 500 for the test to prove anything", n)
	}
	// The sink with the old layout opened the table again after the swap:
	// its fix is the new layout file (the error's own fix, a drop and a
	// copy, is for a layout that is newer than the table).
	warned := ""
	for _, line := range strings.Split(r.sink.Output(), "\n") {
		if strings.Contains(line, "level=WARN") && strings.Contains(line, "column at from Nullable(DateTime64(6, 'UTC')) to Nullable(DateTime64(3, 'UTC'))") {
			warned = line
			break
		}
	}
	if warned == "" || !strings.Contains(warned, "restart this sink with that layout") {
		t.Errorf("the sink with the old layout did not warn that the table's column at is not its layout's, naming the fix (restart it with the new layout):\n%s", r.sink.Output())
	}
	t.Logf("the sink with the old layout: %s", warned)
}

// TestIntegrationRelayoutOverrideRemovedIntoKey removes a column's type
// override to put the column in the sorting key (a sorting column keeps
// walhouse's mapping): at, a DateTime64(3) by the old layout, goes into
// ORDER BY and back to walhouse's DateTime64(6). ClickHouse refuses to
// change the type of a sorting-key column, so the sink cannot widen it
// afterwards, as it widens a column whose override was removed: the
// relayout gives it the new type as it builds the table. A sink with the
// new layout then loads the table, times with microseconds, and FINAL
// ends equal to PostgreSQL to the microsecond.
func TestIntegrationRelayoutOverrideRemovedIntoKey(t *testing.T) {
	r := newRetypeRun(t)
	file := r.layoutConfig(t, "    order_by: [tenant_id, at, id]\n", "")
	// Capture first: a change of at is a move under the new layout.
	r.captureLayout(t, file)
	done := sampleFinal(t, r.p, r.table, r.live)
	proc, err := r.relayout(t, file, "E2E_NOTHING=1")
	if err != nil {
		t.Fatalf("walhouse relayout: %v\n%s", err, proc.Output())
	}
	t.Logf("walhouse relayout:\n%s", proc.Output())
	if !strings.Contains(proc.Output(), "with column at Nullable(DateTime64(3, 'UTC')) to Nullable(DateTime64(6, 'UTC'))") {
		t.Errorf("walhouse relayout did not give at walhouse's type:\n%s", proc.Output())
	}
	// The sinks take the new layout after the relayout; the times written
	// from here on have microseconds.
	r.sink.Kill()
	r.sink = r.p.sink("--config", file)
	r.stop()
	r.stop = r.p.keepWriting(20*time.Millisecond, func(k int) string {
		return fmt.Sprintf(`UPDATE %s SET price = price + 0.25, amount = amount + 1 WHERE id %% 97 = %d`, r.qt, k%97)
	})
	time.Sleep(2 * time.Second)
	r.stop()
	r.p.exec(fmt.Sprintf(`UPDATE %s SET at = at + interval '0.000001 second' * (1 + id %% 997) WHERE id %% 10 = 0`, r.qt))
	r.p.convergeWithin(time.Minute, r.pgQuery, r.chQuery("toDecimalString(price, 2)"), r.capture, r.sink)
	done()
	r.p.checkColumnTypes(r.table, map[string]string{"at": "Nullable(DateTime64(6, 'UTC'))"})
}
