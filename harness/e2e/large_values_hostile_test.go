package e2e

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/walhouse/walhouse/harness/testenv"
	"github.com/walhouse/walhouse/record"
)

// TestIntegrationLargeValuesHostile writes what a PostgreSQL user can
// write to make capture run out of memory, with the default record bound
// (64 MiB): a 48 MiB text of control characters (chr(1), escaped to six
// bytes each in JSON), copied by the snapshot and streamed; 80 MiB texts,
// copied and streamed, whose row and change messages alone are over the
// bound; and pg_logical_emit_message
// of 256 MiB (outside a transaction) and 72 MiB (inside one, with
// walhouse's DDL prefix). Capture must go on, dead-letter the four rows as
// too_large, skip and count the two messages, load every other row exactly,
// and peak under twice the bound plus its baseline. Before, it encoded the
// whole record first (about 1.2 GB for the 48 MiB row) and read every
// message whole.
func TestIntegrationLargeValuesHostile(t *testing.T) {
	p := newPipeline(t)
	p.dropTopicsAtEnd()
	table, qt := p.table("hostile_large", `(tenant_id text, id int, t text, PRIMARY KEY (tenant_id, id))`)
	const controls = `repeat(chr(1), 48 << 20)`
	small := func(first, last int) string {
		return fmt.Sprintf(`INSERT INTO %s SELECT 't' || (i %% 2), i, 'small ' || i FROM generate_series(%d, %d) i`, qt, first, last)
	}
	p.exec(small(1, 100))
	p.exec(fmt.Sprintf(`INSERT INTO %s VALUES ('t0', 1000, %s)`, qt, controls))
	p.exec(fmt.Sprintf(`INSERT INTO %s VALUES ('t1', 1003, repeat('x', 80 << 20))`, qt))

	metricsAddr := testenv.FreeAddr(t)
	capt := p.runCapture(p.captureArgs([]string{table}, "--metrics-addr", metricsAddr))
	sink := p.startSink("--dedup-addr", "off")
	p.exec(fmt.Sprintf(`WITH big AS (INSERT INTO %s VALUES ('t1', 1001, %s)) %s`, qt, controls, small(101, 150)))
	p.exec(fmt.Sprintf(`INSERT INTO %s VALUES ('t0', 1002, repeat('x', 80 << 20))`, qt))
	p.exec(`SELECT pg_logical_emit_message(false, 'anyone', repeat('y', 256 << 20))`)
	p.exec(fmt.Sprintf(`WITH m AS (SELECT pg_logical_emit_message(true, 'walhouse_ddl', repeat('z', 72 << 20))) INSERT INTO %s SELECT 't' || (i %% 2), i, 'after ' || i FROM generate_series(151, 170) i, m`, qt))
	p.exec(small(171, 200))

	pgQuery := fmt.Sprintf(`SELECT tenant_id, id::text, t FROM %s AS x WHERE id < 1000 ORDER BY x.tenant_id, x.id`, qt)
	chQuery := fmt.Sprintf("SELECT tenant_id, toString(id), ifNull(t, '') FROM `%s`.`%s` FINAL WHERE _is_deleted = 0 ORDER BY tenant_id, id", p.database, table)
	p.convergeWithin(5*time.Minute, pgQuery, chQuery, capt, sink)

	ls := p.waitDeadLetters(p.prefix+"-dlq", 4, capt, sink)
	var keys []string
	for _, l := range ls {
		if l.Origin != "capture" || l.Reason != record.ReasonTooLarge || l.Table != "public."+table || !strings.Contains(l.Error, "--max-record-bytes") {
			t.Errorf("dead letter %+v: want capture's, too_large, of the table, naming --max-record-bytes", l)
		}
		keys = append(keys, string(l.PrimaryKey))
	}
	sort.Strings(keys)
	if want := []string{`null`, `null`, `{"id":"1000","tenant_id":"t0"}`, `{"id":"1001","tenant_id":"t1"}`}; fmt.Sprint(keys) != fmt.Sprint(want) {
		t.Errorf("dead letters' keys %q, want %q (the row and the change over the read bound have none)", keys, want)
	}
	messages := 2.0
	if p.serverMajor() < 14 {
		messages = 0 // PostgreSQL 13's pgoutput streams no logical messages
	}
	for series, want := range map[string]float64{
		`walhouse_capture_oversized_messages_total{kind="logical_message",reason="too_large"}`: messages,
		`walhouse_capture_oversized_messages_total{kind="change",reason="too_large"}`:          1,
		`walhouse_capture_oversized_messages_total{kind="copied_row",reason="too_large"}`:      1,
		`walhouse_capture_ignored_messages_total{prefix="walhouse_ddl",reason="malformed"}`:    0,
	} {
		if v, _ := scrape(t.Context(), metricsAddr, series); v != want {
			t.Errorf("%s = %v, want %v", series, v, want)
		}
	}

	peak, err := capt.PeakRSS()
	if err != nil {
		t.Fatal(err)
	}
	// The 48 MiB change's message (read whole, as it is under the bound)
	// and the snapshot's copy of that row are the largest buffers; nothing
	// grows with the escapes or the messages over the bound.
	const baseline = 96 << 20
	limit := int64(2*record.DefaultMaxBytes + baseline)
	t.Logf("peak resident memory of capture: %d MiB (limit %d MiB)", peak>>20, limit>>20)
	if peak > limit {
		t.Errorf("capture peaked at %d MiB, want under %d MiB (twice the record bound plus a baseline)", peak>>20, limit>>20)
	}
	requireRunning(t, capt, sink)
}
