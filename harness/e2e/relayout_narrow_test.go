package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/walhouse/walhouse/clickhouse"
	"github.com/walhouse/walhouse/harness/testenv"
	"github.com/walhouse/walhouse/schema"
)

// narrowRows is the size of the narrowing tests' table.
const narrowRows = 3_000

// newNarrowRun loads a table whose price is a numeric(20, 4), loaded as a
// Decimal(20, 4) by a sink whose layout names that type: quarters
// (0.25 to 99.75), NULL for every 13th row, and every 10th row beyond
// 10^10 (12345678901.25 + id), every 10th and 5 more below -10^10, which
// a Decimal(12, 2) cannot hold; the row of id inexact, when not 0, has
// 1.2345, more decimals than a Decimal(12, 2) holds. Rows whose id is a
// multiple of 50 are deleted once capture copied the table, leaving
// tombstones (without the deleted row's price: the replica identity is
// the primary key), and sampleFinal's rule.
func newNarrowRun(t *testing.T, inexact int) *retypeRun {
	p := newPipeline(t)
	table, qt := p.table("relayoutnarrow", `(tenant_id text, id int, status text, price numeric(20, 4), amount int, PRIMARY KEY (tenant_id, id))`)
	p.exec(fmt.Sprintf(`INSERT INTO %s SELECT 't' || (i %% 7), i, 'new', CASE WHEN i = %d THEN 1.2345 WHEN i %% 13 = 0 THEN NULL `+
		`WHEN i %% 10 = 0 THEN 12345678901.25 + i WHEN i %% 10 = 5 THEN -(98765432109.5 + i) ELSE (i %% 400) * 0.25 END, i FROM generate_series(1, %d) i`, qt, inexact, narrowRows))
	r := &retypeRun{p: p, table: table, qt: qt, live: uint64(narrowRows - narrowRows/50)}
	r.capture = p.runCapture(p.captureArgs([]string{table}))
	r.sink = p.sink("--layout", fmt.Sprintf(`public.%s={"columns":{"price":{"type":"Decimal(20, 4)"}}}`, table))
	// Changes after the copy: the relayout takes the table's columns from
	// the newest, and the deletes leave tombstones.
	p.exec(fmt.Sprintf(`DELETE FROM %s WHERE id %% 50 = 0`, qt))
	p.exec(fmt.Sprintf(`UPDATE %s SET amount = amount + 1 WHERE id %% 100 = 1`, qt))
	r.building = fmt.Sprintf("SELECT count() FROM system.tables WHERE database = %s AND name IN (%s, %s)", schema.QuoteString(p.database),
		schema.QuoteString(clickhouse.RelayoutForwardName(table)), schema.QuoteString(clickhouse.RelayoutBuildName(table)))
	r.pgQuery = fmt.Sprintf(`SELECT tenant_id, id::text, coalesce(price::text, 'NULL'), amount::text FROM %s AS t ORDER BY t.tenant_id, t.id`, qt)
	p.convergeWithin(2*time.Minute, r.pgQuery, r.narrowCH(4), r.capture, r.sink)
	p.checkColumnTypes(table, map[string]string{"price": "Nullable(Decimal(20, 4))"})
	return r
}

// narrowCH is the ClickHouse side of the narrowing tests' comparisons,
// price with scale decimals.
func (r *retypeRun) narrowCH(scale int) string {
	return fmt.Sprintf("SELECT tenant_id, toString(id), ifNull(toDecimalString(price, %d), 'NULL'), toString(amount) FROM `%s`.`%s` FINAL WHERE _is_deleted = 0 ORDER BY tenant_id, id",
		scale, r.p.database, r.table)
}

// clampedPG is PostgreSQL's side of a comparison after a relayout to
// Decimal(12, 2) with on_overflow clamp: each price as the sink would
// store it now, the bound of its sign beyond the range.
func (r *retypeRun) clampedPG() string {
	return fmt.Sprintf(`SELECT tenant_id, id::text, coalesce(CASE WHEN abs(price) >= 1e10 THEN sign(price) * 9999999999.99 ELSE price END::numeric(20, 2)::text, 'NULL'), amount::text FROM %s AS t ORDER BY t.tenant_id, t.id`, r.qt)
}

// TestIntegrationRelayoutNarrowClamp narrows a Decimal(20, 4) column to
// Decimal(12, 2) with on_overflow clamp by `walhouse relayout`, while
// capture and a sink with the old layout load the table under an update
// every 20 ms that raises prices by 0.25, overflowing ones included (the
// command held 3 s between its copy and its swap, so such values pass
// through the forwarding view). The values beyond the range become the
// bound of their sign, as the sink stores them, and are counted; the
// others keep their value. Then the sink takes the new layout (the old one
// stops loading the table, whose column it cannot widen back). FINAL,
// sampled throughout, holds every row once, and ends equal to
// PostgreSQL's prices as the sink would store them now.
func TestIntegrationRelayoutNarrowClamp(t *testing.T) {
	r := newNarrowRun(t, 0)
	done := sampleFinal(t, r.p, r.table, r.live)
	r.stop = r.p.keepWriting(20*time.Millisecond, func(k int) string {
		return fmt.Sprintf(`UPDATE %s SET price = price + 0.25, amount = amount + 1 WHERE id %% 97 = %d`, r.qt, k%97)
	})
	file := r.config(t, "      price: {type: \"Decimal(12, 2)\", on_overflow: clamp}\n")
	proc, err := r.relayout(t, file, "WALHOUSE_FAILPOINTS=relayout.copied=pause:3s")
	out := proc.Output()
	t.Logf("walhouse relayout:\n%s", out)
	if err != nil {
		t.Fatalf("walhouse relayout: %v", err)
	}
	if !strings.Contains(out, "with column price Nullable(Decimal(20, 4)) to Nullable(Decimal(12, 2))") || !strings.Contains(out, "stored as its bound (on_overflow clamp)") {
		t.Errorf("walhouse relayout did not say it narrowed price and clamped values:\n%s", out)
	}
	r.sink.Kill()
	r.sink = r.p.sink("--config", file)
	time.Sleep(2 * time.Second)
	r.stop()
	r.p.convergeWithin(2*time.Minute, r.clampedPG(), r.narrowCH(2), r.capture, r.sink)
	done()
	r.p.checkColumnTypes(r.table, map[string]string{"price": "Nullable(Decimal(12, 2))"})
	if n := r.p.chInt(r.building); n != 0 {
		t.Errorf("the forwarding view or the building table is still there")
	}
	bound := fmt.Sprintf("SELECT count() FROM `%s`.`%s` FINAL WHERE _is_deleted = 0 AND abs(price) = toDecimal64('9999999999.99', 2)", r.p.database, r.table)
	if n := r.p.chInt(bound); n < 400 {
		t.Errorf("%d rows hold the bound, want more than 400 for the test to prove anything", n)
	}
}

// TestIntegrationRelayoutNarrowRefused narrows a Decimal(20, 4) column
// to Decimal(12, 2) where rows hold values beyond its range and one holds
// 1.2345. Under on_overflow dead_letter (the default) the relayout is
// refused before anything is built, counting the values and naming rows
// and the fixes; under clamp too, for the one value with more decimals
// than the scale (a clamp never rounds), naming its key. The table stays
// as it was and the sink keeps loading it. Once that value is changed in
// PostgreSQL, the relayout with clamp runs, and FINAL equals PostgreSQL's
// prices as the sink would store them now.
func TestIntegrationRelayoutNarrowRefused(t *testing.T) {
	r := newNarrowRun(t, 7) // tenant t0
	var beyond int64
	if err := r.p.pg.QueryRow(context.Background(), fmt.Sprintf(`SELECT count(*) FROM %s WHERE abs(price) >= 1e10`, r.qt)).Scan(&beyond); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		layout string
		want   []string
	}{
		{"      price: {type: \"Decimal(12, 2)\"}\n", []string{fmt.Sprintf("price: %d refused (keys ", beyond+1), "set on_overflow: clamp", "a wider Decimal, or String"}},
		{"      price: {type: \"Decimal(12, 2)\", on_overflow: clamp}\n", []string{fmt.Sprintf("price: 1 refused (keys ('t0',7)), %d clamped", beyond), "change those values in PostgreSQL"}},
	} {
		proc, err := r.relayout(t, r.config(t, tc.layout), "E2E_NOTHING=1")
		out := proc.Output()
		t.Logf("walhouse relayout:\n%s", out)
		if err == nil || !strings.Contains(out, "column price Nullable(Decimal(20, 4)) to Nullable(Decimal(12, 2))") {
			t.Errorf("a relayout to %s: %v, want it refused naming the column and both types", tc.layout, err)
		}
		for _, w := range tc.want {
			if !strings.Contains(out, w) {
				t.Errorf("a relayout to %s did not say %q", tc.layout, w)
			}
		}
		if n := r.p.chInt(r.building); n != 0 {
			t.Errorf("a refused relayout built %d tables or views", n)
		}
		r.p.checkColumnTypes(r.table, map[string]string{"price": "Nullable(Decimal(20, 4))"})
	}
	// The sink loads the table as before.
	r.p.exec(fmt.Sprintf(`UPDATE %s SET price = price + 0.25, amount = amount + 1 WHERE id %% 3 = 0`, r.qt))
	r.p.exec(fmt.Sprintf(`UPDATE %s SET price = 1.23 WHERE id = 7`, r.qt))
	r.p.convergeWithin(time.Minute, r.pgQuery, r.narrowCH(4), r.capture, r.sink)
	proc, err := r.relayout(t, r.config(t, "      price: {type: \"Decimal(12, 2)\", on_overflow: clamp}\n"), "E2E_NOTHING=1")
	if err != nil {
		t.Fatalf("walhouse relayout once the value was changed: %v\n%s", err, proc.Output())
	}
	t.Logf("walhouse relayout:\n%s", proc.Output())
	r.p.convergeWithin(30*time.Second, r.clampedPG(), r.narrowCH(2), r.capture)
}

// TestIntegrationRelayoutNarrowArrivesAcrossSwap narrows a Decimal(20, 4)
// to Decimal(12, 2) with on_overflow clamp while the sink, with the old
// layout, loads a value the new type refuses (1.2345, more decimals than
// its scale) into the old table after the relayout's copy and its catch-up
// of new parts, before its swap (the command held 4 s there). The
// forwarding view leaves that row out, and the copy after the swap finds
// it: it is not stored in another value, nor silently dropped. The
// command ends with an error naming the row and the fix; the table has
// its new shape, holding the row's previous version (as when the sink
// sends a change to the dead letters), and the old table, kept despite
// --drop-old, holds the row. A value beyond the range loaded at the same
// time is clamped.
func TestIntegrationRelayoutNarrowArrivesAcrossSwap(t *testing.T) {
	r, proc := narrowLateRow(t, "relayout.copied=pause:4s")
	err := proc.Wait(3 * time.Minute)
	r.checkLateRow(t, proc, err)
}

// TestIntegrationRelayoutNarrowResumes is
// TestIntegrationRelayoutNarrowArrivesAcrossSwap with the command killed
// (as kill -9 would) right after its swap: the run after the crash copies
// the old table's rows again, finds the refused one, leaves it out, keeps
// the old table and fails naming the row, with the same end.
func TestIntegrationRelayoutNarrowResumes(t *testing.T) {
	r, proc := narrowLateRow(t, "relayout.copied=pause:4s,relayout.swapped=crash")
	if err := proc.Wait(3 * time.Minute); err == nil || !strings.Contains(proc.Output(), "crashing at relayout.swapped") {
		t.Fatalf("walhouse relayout did not crash at relayout.swapped: %v\n%s", err, proc.Output())
	}
	again := testenv.Start(t, "relayout (after the crash)", walhouseBin, "--config", r.file, "relayout", "public."+r.table, "--drop-old")
	err := again.Wait(3 * time.Minute)
	if !strings.Contains(again.Output(), "copying the old table's rows again") {
		t.Errorf("the run after the crash did not finish the interrupted relayout:\n%s", again.Output())
	}
	r.checkLateRow(t, again, err)
}

// lateRow is a narrowing relayout whose refused row arrives late.
type lateRow struct {
	*retypeRun
	file string // the configuration file of the relayout
}

// narrowLateRow starts walhouse relayout of a newNarrowRun table to
// Decimal(12, 2) with on_overflow clamp and --drop-old, failpoints
// holding it after its copy, and, during the hold, has the sink load
// 1.2345 into row 7 (tenant t0, 1.75 until then) and 77777777777.5 into
// row 8 (t1) of the old table.
func narrowLateRow(t *testing.T, failpoints string) (lateRow, *testenv.Proc) {
	r := lateRow{retypeRun: newNarrowRun(t, 0)}
	r.file = r.config(t, "      price: {type: \"Decimal(12, 2)\", on_overflow: clamp}\n")
	proc := testenv.Start(t, "relayout ("+failpoints+")", "env", "WALHOUSE_FAILPOINTS="+failpoints, walhouseBin, "--config", r.file, "relayout", "public."+r.table, "--drop-old")
	waitLog(t, proc, "pausing", "relayout.copied")
	r.p.exec(fmt.Sprintf(`UPDATE %s SET price = 1.2345 WHERE id = 7`, r.qt))
	r.p.exec(fmt.Sprintf(`UPDATE %s SET price = 77777777777.5 WHERE id = 8`, r.qt))
	loaded := fmt.Sprintf("SELECT count() FROM `%s`.`%s` WHERE id IN (7, 8) AND price IN (toDecimal64('1.2345', 4), toDecimal64('77777777777.5', 4))", r.p.database, r.table)
	if err := testenv.Eventually(context.Background(), 3*time.Second, func(context.Context) error {
		if n := r.p.chInt(loaded); n != 2 {
			return fmt.Errorf("the sink loaded %d of the 2 changes into the old table", n)
		}
		return nil
	}); err != nil {
		t.Fatalf("%v: the test proves nothing", err)
	}
	return r, proc
}

// checkLateRow checks the end of a narrowLateRow relayout, proc, which
// exited with err: it failed naming row 7; the table has the new type,
// row 7's previous version and row 8 clamped; the old table, kept, has
// both as loaded.
func (r lateRow) checkLateRow(t *testing.T, proc *testenv.Proc, err error) {
	out := proc.Output()
	t.Logf("walhouse relayout:\n%s", out)
	if err == nil || !strings.Contains(out, "the relayout left them out") || !strings.Contains(out, "price: 1 refused (keys ('t0',7))") {
		t.Errorf("walhouse relayout: %v, want it to fail naming the row it left out", err)
	}
	r.p.checkColumnTypes(r.table, map[string]string{"price": "Nullable(Decimal(12, 2))"})
	final := func(table string) string {
		var got string
		q := fmt.Sprintf("SELECT arrayStringConcat(groupArray(toDecimalString(price, 4)), ' ') FROM (SELECT price FROM `%s`.`%s` FINAL WHERE id IN (7, 8) ORDER BY id)", r.p.database, table)
		if err := r.p.ch.QueryRow(context.Background(), q).Scan(&got); err != nil {
			t.Fatal(err)
		}
		return got
	}
	if got := final(r.table); got != "1.7500 9999999999.9900" {
		t.Errorf("rows 7 and 8 of the new table: %s, want 1.7500 (the version before the refused one) and 9999999999.9900 (clamped)", got)
	}
	if got := final(clickhouse.RelayoutKeptName(r.table)); got != "1.2345 77777777777.5000" {
		t.Errorf("rows 7 and 8 of the old table, kept despite --drop-old: %s, want 1.2345 77777777777.5000", got)
	}
}
