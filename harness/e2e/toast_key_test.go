package e2e

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/walhouse/walhouse/record"
)

// TestIntegrationOutOfLineKey updates rows whose primary key PostgreSQL
// stores out of line (TOAST: a key of about 2 KB or more compressed). An
// UPDATE that leaves such a key alone sends it as unchanged TOAST, and
// under the default replica identity no old row says which row changed:
// capture must dead-letter each such change with a reason that names
// REPLICA IDENTITY FULL, and go on. Under FULL the old row carries the key,
// the rows load, and ClickHouse FINAL must equal PostgreSQL.
func TestIntegrationOutOfLineKey(t *testing.T) {
	p := newPipeline(t)
	p.dropTopicsAtEnd()
	table, qt := p.table("toastkey", `(tenant_id text, k text, big text, n int, PRIMARY KEY (tenant_id, k))`)
	capt := p.startCapture(table)
	sink := p.startSink()
	// 200,000 repeated characters compress to about 2.3 KB: within the
	// index's bound, over the heap's inline threshold beside a large value.
	p.exec(fmt.Sprintf(`INSERT INTO %s SELECT 't1', repeat('a', 200000) || i, (SELECT string_agg(md5(g::text || random()::text), '') FROM generate_series(1, 5000) g), 0 FROM generate_series(1, 3) i`, qt))
	p.exec(fmt.Sprintf(`INSERT INTO %s SELECT 't1', 'small' || i, 'b', 0 FROM generate_series(1, 3) i`, qt))
	pgQuery := fmt.Sprintf(`SELECT tenant_id, md5(k), md5(coalesce(big, '')), n::text FROM %s ORDER BY 1, 2`, qt)
	chQuery := fmt.Sprintf("SELECT tenant_id, lower(hex(MD5(k))), lower(hex(MD5(ifNull(big, '')))), toString(n) FROM `%s`.`%s` FINAL WHERE _is_deleted = 0 ORDER BY 1, 2", p.database, table)
	p.convergeWithin(time.Minute, pgQuery, chQuery, capt, sink)

	// The default replica identity: the three long keys' updates are
	// dead letters; the short keys' load.
	p.exec(fmt.Sprintf(`UPDATE %s SET n = n + 1`, qt))
	for _, l := range p.waitDeadLetters(p.prefix+"-dlq", 3, capt, sink) {
		if l.Origin != "capture" || l.Reason != record.ReasonInvalid || l.Table != "public."+table || !strings.Contains(l.Error, "REPLICA IDENTITY FULL") {
			t.Errorf("dead letter %+v: want capture's, reason %s, the table and the fix (REPLICA IDENTITY FULL)", l, record.ReasonInvalid)
		}
	}
	// The fix the reason names: REPLICA IDENTITY FULL, then walhouse
	// verify --repair for the rows the dead-lettered updates changed.
	p.exec(fmt.Sprintf(`ALTER TABLE %s REPLICA IDENTITY FULL`, qt))
	verify := []string{"verify", "--pg", p.env.PG, "--clickhouse", p.env.ClickHouse, "--database", p.database, "--tables", "public." + table, "--load-wait", "60s"}
	if out, err := exec.Command(walhouseBin, verify...).CombinedOutput(); err == nil {
		t.Errorf("walhouse verify: no difference found, want the three rows whose updates were dead-lettered\n%s", out)
	}
	if out, err := exec.Command(walhouseBin, append(verify, "--repair")...).CombinedOutput(); err != nil {
		t.Errorf("walhouse verify --repair: %v\n%s", err, out)
	}
	p.convergeWithin(time.Minute, pgQuery, chQuery, capt, sink)
	p.exec(fmt.Sprintf(`UPDATE %s SET n = n + 1`, qt))
	p.convergeWithin(time.Minute, pgQuery, chQuery, capt, sink)
}
