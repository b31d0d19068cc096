package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/walhouse/walhouse/verify"
)

// TestIntegrationKeyDatesBeyondRange loads a table keyed by a date and a
// timestamp whose rows include keys beyond what ClickHouse holds (before
// 1900-01-01, after 2299-12-31 or 2262-04-11 23:47:16.854775 UTC,
// infinity), copied and streamed: stored as the range's bound, as a value
// outside a key is, each would share one row with the others beyond that
// bound and with the row really at the bound (1800-01-01's delete would
// delete 1900-01-01's row). Each of their changes goes to the dead letters
// with the reason instead, the rows at the bounds load, a row moved from
// such a key to one within the range loads at its new key, and the stream
// goes on: FINAL ends equal to PostgreSQL's rows within the range.
func TestIntegrationKeyDatesBeyondRange(t *testing.T) {
	p := newPipeline(t)
	table, qt := p.table("keyrange", `(tenant_id text, day date, at timestamptz, note text, PRIMARY KEY (tenant_id, day, at))`)
	p.exec(fmt.Sprintf(`INSERT INTO %s SELECT 't' || (i %% 2), date '2024-01-01' + i, '2024-01-01 00:00:00+00'::timestamptz + i * interval '1 hour', 'row ' || i FROM generate_series(1, 20) i`, qt))
	p.exec(fmt.Sprintf(`INSERT INTO %s VALUES
		('t0', '1900-01-01', '2024-01-01 00:00:00+00', 'min day'),
		('t0', '2299-12-31', '2024-01-01 00:00:00+00', 'max day'),
		('t1', '2024-05-01', '1900-01-01 00:00:00+00', 'min at'),
		('t1', '2024-05-01', '2262-04-11 23:47:16.854775+00', 'max at'),
		('t0', '1700-01-01', '2024-01-01 00:00:00+00', 'copied beyond')`, qt))
	capture := p.startCapture(table)
	sink := p.startSink()

	p.exec(fmt.Sprintf(`INSERT INTO %s VALUES
		('t0', '1800-01-01', '2024-01-01 00:00:00+00', 'a'),
		('t0', '1850-01-01', '2024-01-01 00:00:00+00', 'b'),
		('t0', 'infinity', '2024-01-01 00:00:00+00', 'c'),
		('t1', '2024-05-01', '2262-04-12 00:00:00+00', 'd'),
		('t1', '2024-05-01', 'infinity', 'e'),
		('t0', '2024-06-01', '2024-06-01 00:00:00+00', 'f')`, qt))
	p.exec(fmt.Sprintf(`UPDATE %s SET note = 'b updated' WHERE day = '1850-01-01'`, qt))
	p.exec(fmt.Sprintf(`DELETE FROM %s WHERE day = '1800-01-01'`, qt))
	p.exec(fmt.Sprintf(`UPDATE %s SET day = '1950-06-01' WHERE day = '1850-01-01'`, qt)) // its delete at 1850-01-01 is a dead letter
	p.exec(fmt.Sprintf(`UPDATE %s SET note = note || ' updated' WHERE day <= '2024-01-10'`, qt))

	// The copied row, the five streamed inserts, the three updates and
	// the delete of rows beyond the range, and the move's delete of the
	// old key.
	ls := p.waitDeadLetters(p.prefix+"-dlq", 10, capture, sink)
	count := map[string]int{}
	for _, l := range ls {
		if !strings.Contains(l.Error, "beyond the range ClickHouse holds") || !strings.Contains(l.Error, "change the value in PostgreSQL") {
			t.Errorf("dead letter %s: %s; want a key beyond ClickHouse's range, and the fix", l.Key, l.Error)
		}
		for _, v := range []string{"1700-01-01", "1800-01-01", "1850-01-01", "infinity", "2262-04-12 00:00:00+00"} {
			if strings.Contains(l.Error, fmt.Sprintf("%q", v)) {
				count[v]++
			}
		}
	}
	want := map[string]int{"1700-01-01": 2, "1800-01-01": 2, "1850-01-01": 3, "infinity": 2, "2262-04-12 00:00:00+00": 1}
	if fmt.Sprint(count) != fmt.Sprint(want) {
		t.Errorf("dead letters by key value: %v, want %v", count, want)
	}

	// The stream goes on.
	p.exec(fmt.Sprintf(`INSERT INTO %s VALUES ('t1', '2025-01-01', '2025-01-01 00:00:00+00', 'after')`, qt))
	p.exec(fmt.Sprintf(`UPDATE %s SET note = 'min day updated' WHERE day = '1900-01-01'`, qt))
	pgQuery := fmt.Sprintf(`SELECT tenant_id, day::text, (extract(epoch FROM at) * 1000000)::bigint::text, note FROM %s AS t
		WHERE day BETWEEN '1900-01-01' AND '2299-12-31' AND at BETWEEN '1900-01-01 00:00:00+00' AND '2262-04-11 23:47:16.854775+00'
		ORDER BY t.tenant_id, t.day, t.at`, qt)
	chQuery := fmt.Sprintf("SELECT tenant_id, toString(day), toString(toUnixTimestamp64Micro(at)), ifNull(note, 'NULL') FROM `%s`.`%s` FINAL WHERE _is_deleted = 0 ORDER BY tenant_id, day, at", p.database, table)
	p.converge(pgQuery, chQuery, capture, sink)

	// walhouse verify reports the four rows beyond the range as missing
	// (not the row at a bound), and its repair leaves them out: written,
	// 1700-01-01's row would replace 1900-01-01's.
	report := filepath.Join(t.TempDir(), "report.json")
	out, err := exec.Command(walhouseBin, "verify", "--pg", p.env.PG, "--clickhouse", p.env.ClickHouse, "--database", p.database,
		"--tables", "public."+table, "--load-wait", "60s", "--repair", "--report", report).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "beyond the range ClickHouse holds") {
		t.Errorf("walhouse verify --repair: %v, want the rows beyond the range reported and not repaired\n%s", err, out)
	}
	raw, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	var rep verify.Report
	if err := json.Unmarshal(raw, &rep); err != nil {
		t.Fatalf("verify report: %v\n%s", err, raw)
	}
	var missing []string
	for _, tr := range rep.Tables {
		for _, m := range tr.Mismatches {
			var key []string
			for _, k := range m.Key {
				key = append(key, k.Value)
			}
			missing = append(missing, m.Kind.String()+" "+strings.Join(key, "/"))
		}
	}
	slices.Sort(missing)
	t.Logf("verify's mismatches: %q", missing)
	want4 := []string{
		"missing_in_clickhouse 1700-01-01/2024-01-01 00:00:00.000000",
		"missing_in_clickhouse 2024-05-01/2262-04-12 00:00:00+00",
		"missing_in_clickhouse 2024-05-01/infinity",
		"missing_in_clickhouse infinity/2024-01-01 00:00:00.000000",
	}
	if !slices.Equal(missing, want4) {
		t.Errorf("verify reported %q, want %q: the four rows keyed beyond the range, missing", missing, want4)
	}
	p.converge(pgQuery, chQuery, capture, sink)
}
