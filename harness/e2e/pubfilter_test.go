package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walhouse/walhouse/harness/testenv"
	"github.com/walhouse/walhouse/record"
	"github.com/walhouse/walhouse/schema"
)

// TestIntegrationPublicationColumnListAndRowFilter (PostgreSQL 15+): three
// tables published with a column list, a row filter, and both (with the
// column left out also in the layout's exclude_columns), copied at
// the first start and then changed while streaming, with updates that move
// rows into the filter (pgoutput sends an INSERT) and out of it (a
// DELETE). ClickHouse FINAL must end equal to PostgreSQL projected
// through the publication, row for row; the ClickHouse tables have exactly
// the published columns, and no record holds a value of a column left out.
func TestIntegrationPublicationColumnListAndRowFilter(t *testing.T) {
	p := newPipeline(t)
	testenv.SkipBeforePG(t, p.pg, 15, "publication row filters and column lists")
	p.dropTopicsAtEnd()
	cols, qc := p.table("pubcols", `(tenant_id text, id int, email text, secret text, note text, PRIMARY KEY (tenant_id, id))`)
	// The filter's column must be in the replica identity for PostgreSQL
	// to accept updates and deletes: FULL sends it in every old row.
	rows, qr := p.table("pubrows", `(tenant_id text, id int, region text NOT NULL, v int, PRIMARY KEY (tenant_id, id))`)
	p.exec(fmt.Sprintf(`ALTER TABLE %s REPLICA IDENTITY FULL`, qr))
	// A filter on a key column needs nothing more.
	both, qb := p.table("pubboth", `(tenant_id text, id int, secret text, v int, PRIMARY KEY (tenant_id, id))`)

	p.exec(fmt.Sprintf(`INSERT INTO %s SELECT 't' || (i %% 2), i, 'u' || i || '@example.com', 'SECRET-' || i, 'n' || i FROM generate_series(1, 100) i`, qc))
	p.exec(fmt.Sprintf(`INSERT INTO %s SELECT 't' || (i %% 2), i, (ARRAY['eu', 'us', 'ap'])[1 + i %% 3], i FROM generate_series(1, 120) i`, qr))
	p.exec(fmt.Sprintf(`INSERT INTO %s SELECT 't' || (i %% 2), i, 'SECRET-' || i, i FROM generate_series(1, 40) i`, qb))
	p.exec(fmt.Sprintf(`CREATE PUBLICATION %s FOR TABLE %s (tenant_id, id, email, note), %s WHERE (region = 'eu'), %s (tenant_id, id, v) WHERE (id > 10)`,
		pgx.Identifier{p.pub}.Sanitize(), qc, qr, qb))

	// exclude_columns and a column list together: the column excluded is
	// not in the list either, and the table still has it.
	file := filepath.Join(t.TempDir(), "walhouse.yaml")
	if err := os.WriteFile(file, []byte(fmt.Sprintf("layout:\n  public.%s: {exclude_columns: [secret]}\n", both)), 0o600); err != nil {
		t.Fatal(err)
	}
	metrics := testenv.FreeAddr(t)
	capture := p.runCapture(append([]string{"--config", file}, p.captureArgs([]string{cols, rows, both}, "--metrics-addr", metrics)...))
	sink := testenv.Start(t, "sink", walhouseBin, append([]string{"--config", file}, p.sinkArgs()...)...)

	colsPG := fmt.Sprintf(`SELECT tenant_id, id::text, email, coalesce(note, 'NULL') FROM %s AS t ORDER BY t.tenant_id, t.id`, qc)
	colsCH := fmt.Sprintf("SELECT tenant_id, toString(id), email, ifNull(note, 'NULL') FROM `%s`.`%s` FINAL WHERE _is_deleted = 0 ORDER BY tenant_id, id", p.database, cols)
	rowsPG := fmt.Sprintf(`SELECT tenant_id, id::text, region, coalesce(v::text, 'NULL') FROM %s AS t WHERE t.region = 'eu' ORDER BY t.tenant_id, t.id`, qr)
	rowsCH := fmt.Sprintf("SELECT tenant_id, toString(id), region, ifNull(toString(v), 'NULL') FROM `%s`.`%s` FINAL WHERE _is_deleted = 0 ORDER BY tenant_id, id", p.database, rows)
	bothPG := fmt.Sprintf(`SELECT tenant_id, id::text, coalesce(v::text, 'NULL') FROM %s AS t WHERE t.id > 10 ORDER BY t.tenant_id, t.id`, qb)
	bothCH := fmt.Sprintf("SELECT tenant_id, toString(id), ifNull(toString(v), 'NULL') FROM `%s`.`%s` FINAL WHERE _is_deleted = 0 ORDER BY tenant_id, id", p.database, both)
	// The initial copy.
	p.converge(colsPG, colsCH, capture, sink)
	p.converge(rowsPG, rowsCH, capture, sink)
	p.converge(bothPG, bothCH, capture, sink)

	for _, q := range []string{
		// Column list: changes of listed and unlisted columns, a key
		// change, deletes, new rows.
		`UPDATE %[1]s SET secret = 'SECRET-NEW-' || id, note = 'changed' WHERE id %% 3 = 0`,
		`UPDATE %[1]s SET secret = 'SECRET-ONLY-' || id WHERE id %% 5 = 0`,
		`UPDATE %[1]s SET id = id + 1000 WHERE id %% 7 = 0`,
		`DELETE FROM %[1]s WHERE id %% 11 = 0`,
		`INSERT INTO %[1]s SELECT 't' || (i %% 2), i, 'u' || i || '@example.com', 'SECRET-' || i, NULL FROM generate_series(101, 130) i`,
	} {
		p.exec(fmt.Sprintf(q, qc))
	}
	for _, q := range []string{
		// Row filter: rows moved into it (an INSERT in the stream), out
		// of it (a DELETE), changed within it and outside it, moved out
		// and in again in one transaction, new rows on both sides,
		// deletes on both sides.
		`UPDATE %[1]s SET region = 'eu' WHERE region = 'us' AND id %% 2 = 0`,
		`UPDATE %[1]s SET region = 'ap', v = -v WHERE region = 'eu' AND id %% 5 = 0`,
		`UPDATE %[1]s SET v = v + 1000 WHERE id %% 3 = 0`,
		`BEGIN; UPDATE %[1]s SET region = 'us' WHERE id = 3; UPDATE %[1]s SET region = 'eu', v = 333 WHERE id = 3; COMMIT`,
		`BEGIN; UPDATE %[1]s SET region = 'eu', v = 444 WHERE id = 4; UPDATE %[1]s SET region = 'ap' WHERE id = 4; COMMIT`,
		`INSERT INTO %[1]s SELECT 't' || (i %% 2), i, (ARRAY['eu', 'us'])[1 + i %% 2], i FROM generate_series(121, 140) i`,
		`DELETE FROM %[1]s WHERE id %% 13 = 0`,
		`UPDATE %[1]s SET id = id + 1000 WHERE id %% 17 = 0`,
	} {
		p.exec(fmt.Sprintf(q, qr))
	}
	for _, q := range []string{
		// Both: moves into and out of the filter by key changes, a column
		// left out changed alone.
		`UPDATE %[1]s SET id = id + 100 WHERE id <= 5`,
		`UPDATE %[1]s SET id = id - 100 WHERE id > 30 AND id <= 35`,
		`UPDATE %[1]s SET secret = 'SECRET-ONLY-' || id WHERE id %% 2 = 0`,
		`UPDATE %[1]s SET v = v * 10, secret = 'SECRET-NEW' WHERE id %% 3 = 0`,
		`INSERT INTO %[1]s SELECT 't' || (i %% 2), i, 'SECRET-' || i, i FROM generate_series(1, 5) i`,
		`DELETE FROM %[1]s WHERE id = 20`,
	} {
		p.exec(fmt.Sprintf(q, qb))
	}
	p.converge(colsPG, colsCH, capture, sink)
	p.converge(rowsPG, rowsCH, capture, sink)
	p.converge(bothPG, bothCH, capture, sink)

	// The ClickHouse tables have exactly the published columns.
	for table, want := range map[string][]string{
		cols: {"tenant_id", "id", "email", "note"},
		rows: {"tenant_id", "id", "region", "v"},
		both: {"tenant_id", "id", "v"},
	} {
		q := fmt.Sprintf("SELECT name FROM system.columns WHERE database = %s AND table = %s AND NOT startsWith(name, '_') ORDER BY position",
			schema.QuoteString(p.database), schema.QuoteString(table))
		got, err := chRows(context.Background(), p.ch, q, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Errorf("ClickHouse table %s has columns %q, want %q", table, got, want)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, topic := range []string{record.TopicName(p.prefix, "public", cols), record.TopicName(p.prefix, "public", both), p.prefix + "-dlq"} {
		rs, err := p.topicRecords(ctx, topic)
		if err != nil {
			t.Fatalf("read %s: %v", topic, err)
		}
		for _, r := range rs {
			if bytes.Contains(r.Value, []byte("SECRET")) || bytes.Contains(r.Key, []byte("SECRET")) {
				t.Fatalf("a record of %s holds a value of a column the publication leaves out: %s", topic, r.Value)
			}
		}
	}
	st := captureStatus(t, metrics)
	for _, table := range []string{cols, rows, both} {
		if reasons := refusedIn(st, table); reasons != nil {
			t.Errorf("/status says %s is left out: %q", table, reasons)
		}
	}

	// walhouse verify compares the filtered tables through their filter,
	// given the publication; without it, it refuses to compare them whole.
	tables := "public." + cols + ",public." + rows + ",public." + both
	verifyArgs := []string{"verify", "--pg", p.env.PG, "--clickhouse", p.env.ClickHouse, "--database", p.database, "--tables", tables, "--load-wait", "90s"}
	if out, err := exec.Command(walhouseBin, append(verifyArgs, "--publication", p.pub)...).CombinedOutput(); err != nil {
		t.Errorf("walhouse verify --publication %s: %v, want no difference\n%s", p.pub, err, out)
	}
	out, err := exec.Command(walhouseBin, verifyArgs...).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "is published with a row filter by "+p.pub) {
		t.Errorf("walhouse verify without the publication: %v, want it to refuse the filtered tables\n%s", err, out)
	}
	requireRunning(t, capture, sink)
}

// TestIntegrationRowFilterMovesKeepTOAST (PostgreSQL 15+): updates that
// move rows into a row filter without changing their large, TOASTed value.
// PostgreSQL sends such an update as an INSERT, whose unchanged TOASTed
// value it takes from the old row only where the old row has it (REPLICA
// IDENTITY FULL); otherwise (a filter on the key, the default identity)
// the INSERT says "unchanged" of a row ClickHouse never had, and capture
// reads the value from the source (a row moved on since keeps the marker,
// which the sink stores as NULL, until its move out, further on in the
// stream, deletes it). ClickHouse must end with the values, equal to
// PostgreSQL through the filters. (Without the read, the sink stored NULL
// for good.)
func TestIntegrationRowFilterMovesKeepTOAST(t *testing.T) {
	p := newPipeline(t)
	testenv.SkipBeforePG(t, p.pg, 15, "publication row filters")
	p.dropTopicsAtEnd()
	full, qf := p.table("toastf", `(tenant_id text, id int, region text NOT NULL, big text, PRIMARY KEY (tenant_id, id))`)
	p.exec(fmt.Sprintf(`ALTER TABLE %s REPLICA IDENTITY FULL`, qf))
	key, qk := p.table("toastk", `(tenant_id text, id int, big text, PRIMARY KEY (tenant_id, id))`)
	// A partitioned table, published via its root: its changes come under
	// the root's name, and the root has no rows of its own to read.
	parted, qp := p.table("toastp", `(tenant_id text, id int, big text, PRIMARY KEY (tenant_id, id)) PARTITION BY RANGE (id)`)
	p.exec(fmt.Sprintf(`CREATE TABLE %s PARTITION OF %s FOR VALUES FROM (MINVALUE) TO (100)`, pgx.Identifier{parted + "_low"}.Sanitize(), qp))
	p.exec(fmt.Sprintf(`CREATE TABLE %s PARTITION OF %s FOR VALUES FROM (100) TO (MAXVALUE)`, pgx.Identifier{parted + "_high"}.Sanitize(), qp))
	// Incompressible, so stored out of line.
	const big = `(SELECT string_agg(md5(i::text || g::text), '') FROM generate_series(1, 300) g)`
	p.exec(fmt.Sprintf(`INSERT INTO %s SELECT 't', i, CASE WHEN i %% 2 = 0 THEN 'eu' ELSE 'us' END, %s FROM generate_series(1, 20) i`, qf, big))
	p.exec(fmt.Sprintf(`INSERT INTO %s SELECT 't', i, %s FROM generate_series(1, 20) i`, qk, big))
	p.exec(fmt.Sprintf(`INSERT INTO %s SELECT 't', i, %s FROM generate_series(1, 20) i`, qp, big))
	p.exec(fmt.Sprintf(`CREATE PUBLICATION %s FOR TABLE %s WHERE (region = 'eu'), %s WHERE (id > 10), %s WHERE (id > 10) WITH (publish_via_partition_root = true)`,
		pgx.Identifier{p.pub}.Sanitize(), qf, qk, qp))
	capture := p.runCapture(p.captureArgs([]string{full, key, parted}))
	sink := p.startSink()
	fullPG := fmt.Sprintf(`SELECT tenant_id, id::text, region, md5(big) FROM %s AS t WHERE t.region = 'eu' ORDER BY t.id`, qf)
	fullCH := fmt.Sprintf("SELECT tenant_id, toString(id), region, lower(hex(MD5(ifNull(big, 'NULL')))) FROM `%s`.`%s` FINAL WHERE _is_deleted = 0 ORDER BY id", p.database, full)
	keyPG := fmt.Sprintf(`SELECT tenant_id, id::text, md5(big) FROM %s AS t WHERE t.id > 10 ORDER BY t.id`, qk)
	keyCH := fmt.Sprintf("SELECT tenant_id, toString(id), lower(hex(MD5(ifNull(big, 'NULL')))) FROM `%s`.`%s` FINAL WHERE _is_deleted = 0 ORDER BY id", p.database, key)
	partedPG := fmt.Sprintf(`SELECT tenant_id, id::text, md5(big) FROM %s AS t WHERE t.id > 10 ORDER BY t.id`, qp)
	partedCH := fmt.Sprintf("SELECT tenant_id, toString(id), lower(hex(MD5(ifNull(big, 'NULL')))) FROM `%s`.`%s` FINAL WHERE _is_deleted = 0 ORDER BY id", p.database, parted)
	p.converge(fullPG, fullCH, capture, sink)
	p.converge(keyPG, keyCH, capture, sink)
	p.converge(partedPG, partedCH, capture, sink)
	p.exec(fmt.Sprintf(`UPDATE %s SET region = 'eu' WHERE id %% 4 = 1`, qf))
	p.exec(fmt.Sprintf(`UPDATE %s SET region = 'us' WHERE id %% 4 = 2`, qf))
	p.exec(fmt.Sprintf(`UPDATE %s SET region = 'eu' WHERE id = 2`, qf))
	p.exec(fmt.Sprintf(`UPDATE %s SET id = id + 100 WHERE id <= 5`, qk))
	p.exec(fmt.Sprintf(`UPDATE %s SET id = id - 100 WHERE id BETWEEN 11 AND 13`, qk))
	p.exec(fmt.Sprintf(`BEGIN; UPDATE %[1]s SET id = -1 WHERE id = 105; UPDATE %[1]s SET id = 150 WHERE id = -1; COMMIT`, qk))
	// Into the filter within a partition (an update, sent as an insert)
	// and across partitions (a delete and an insert of the whole row).
	p.exec(fmt.Sprintf(`UPDATE %s SET id = id + 20 WHERE id <= 3`, qp))
	p.exec(fmt.Sprintf(`UPDATE %s SET id = id + 200 WHERE id BETWEEN 4 AND 5`, qp))
	p.converge(fullPG, fullCH, capture, sink)
	p.converge(keyPG, keyCH, capture, sink)
	p.converge(partedPG, partedCH, capture, sink)
	requireRunning(t, capture, sink)
}

// TestIntegrationFilteredTableJoinsWhileStreaming (PostgreSQL 15+): a table
// joins the publication while capture streams, with a column list and a
// row filter, and its online copy reads it in many chunks (TID ranges and
// the filter) while rows move into and out of the filter. ClickHouse FINAL
// must end equal to PostgreSQL projected through the publication.
func TestIntegrationFilteredTableJoinsWhileStreaming(t *testing.T) {
	p := newPipeline(t)
	testenv.SkipBeforePG(t, p.pg, 15, "publication row filters and column lists")
	p.dropTopicsAtEnd()
	tb := p.newSinkTable()
	joined, qj := p.table("pubjoin", `(tenant_id text, id int, v int NOT NULL, secret text, pad text, PRIMARY KEY (tenant_id, id))`)
	p.exec(fmt.Sprintf(`ALTER TABLE %s REPLICA IDENTITY FULL`, qj))
	p.exec(fmt.Sprintf(`INSERT INTO %s SELECT 't' || (i %% 3), i, i %% 10, 'SECRET-' || i, repeat('x', 200) FROM generate_series(1, 5000) i`, qj))
	capture := p.runCapture(p.captureArgs([]string{tb.name}, "--snapshot-chunk-pages", "8", "--snapshot-workers", "2"))
	sink := p.startSink()
	// FULL identity: PostgreSQL wants every column in the list for
	// updates, so the list leaves none out here but the filter does
	// rows; a second join below leaves a column out.
	p.exec(fmt.Sprintf(`ALTER PUBLICATION %s ADD TABLE %s WHERE (v >= 5)`, pgx.Identifier{p.pub}.Sanitize(), qj))
	p.change(tb, 0)
	waitLog(t, capture, "msg=starting", "online=true", joined)
	p.exec(fmt.Sprintf(`UPDATE %s SET v = v + 5 WHERE v < 5 AND id %% 7 = 0`, qj))
	p.exec(fmt.Sprintf(`UPDATE %s SET v = v - 5 WHERE v >= 5 AND id %% 11 = 0`, qj))
	p.exec(fmt.Sprintf(`DELETE FROM %s WHERE id %% 13 = 0`, qj))
	pgQuery := fmt.Sprintf(`SELECT tenant_id, id::text, v::text, secret FROM %s AS t WHERE t.v >= 5 ORDER BY t.tenant_id, t.id`, qj)
	chQuery := fmt.Sprintf("SELECT tenant_id, toString(id), toString(v), secret FROM `%s`.`%s` FINAL WHERE _is_deleted = 0 ORDER BY tenant_id, id", p.database, joined)
	p.converge(pgQuery, chQuery, capture, sink)

	listed, ql := p.table("publist", `(tenant_id text, id int, v int, secret text, pad text, PRIMARY KEY (tenant_id, id))`)
	p.exec(fmt.Sprintf(`INSERT INTO %s SELECT 't' || (i %% 3), i, i, 'SECRET-' || i, repeat('x', 200) FROM generate_series(1, 5000) i`, ql))
	p.exec(fmt.Sprintf(`ALTER PUBLICATION %s ADD TABLE %s (tenant_id, id, v, pad) WHERE (id > 100)`, pgx.Identifier{p.pub}.Sanitize(), ql))
	p.change(tb, 1)
	waitLog(t, capture, "msg=starting", "online=true", listed)
	p.exec(fmt.Sprintf(`UPDATE %s SET v = -v, secret = 'SECRET-NEW' WHERE id %% 9 = 0`, ql))
	p.exec(fmt.Sprintf(`UPDATE %s SET id = id + 10000 WHERE id <= 20`, ql))
	listedPG := fmt.Sprintf(`SELECT tenant_id, id::text, v::text, md5(pad) FROM %s AS t WHERE t.id > 100 ORDER BY t.tenant_id, t.id`, ql)
	listedCH := fmt.Sprintf("SELECT tenant_id, toString(id), toString(v), lower(hex(MD5(pad))) FROM `%s`.`%s` FINAL WHERE _is_deleted = 0 ORDER BY tenant_id, id", p.database, listed)
	p.converge(listedPG, listedCH, capture, sink)
	p.converge(tb.pgQuery, tb.chQuery, capture, sink)
	var n uint64
	q := fmt.Sprintf("SELECT count() FROM system.columns WHERE database = %s AND table = %s AND name = 'secret'", schema.QuoteString(p.database), schema.QuoteString(listed))
	if err := p.ch.QueryRow(context.Background(), q).Scan(&n); err != nil || n != 0 {
		t.Errorf("ClickHouse table %s has %d columns secret (%v); want none: the list leaves it out", listed, n, err)
	}
	requireRunning(t, capture, sink)
}
