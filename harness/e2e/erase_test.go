package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/walhouse/walhouse/harness/testenv"
)

// erasureTable is a table of orders by customer: the data subject is a
// customer of a tenant (customer_id), the same customer number may exist
// in another tenant.
type erasureTable struct {
	sinkTable
	keyFile string
}

func (p *pipeline) newErasureTable() erasureTable {
	p.t.Helper()
	name, qt := p.table("orders", `(
		tenant_id   text NOT NULL,
		id          bigint NOT NULL,
		customer_id bigint NOT NULL,
		note        text,
		reading     numeric,
		PRIMARY KEY (tenant_id, id))`)
	key := filepath.Join(p.t.TempDir(), "erasure.key")
	if err := os.WriteFile(key, []byte("erasure key of the test, 32 bytes"), 0o600); err != nil {
		p.t.Fatal(err)
	}
	return erasureTable{keyFile: key, sinkTable: sinkTable{
		name: name, quoted: qt, topic: p.prefix + ".public." + name,
		pgQuery: fmt.Sprintf(`SELECT tenant_id, id::text, customer_id::text, coalesce(note, '<null>') FROM %s AS t ORDER BY t.tenant_id, t.id`, qt),
		chQuery: fmt.Sprintf("SELECT tenant_id, toString(id), toString(customer_id), ifNull(note, '<null>') FROM `%s`.`%s` FINAL WHERE _is_deleted = 0 ORDER BY tenant_id, id", p.database, name),
	}}
}

// versions counts the stored versions (tombstones included, without
// FINAL) of a customer of a tenant.
func (p *pipeline) versions(tb erasureTable, tenant string, customer int) int64 {
	p.t.Helper()
	return p.chInt(fmt.Sprintf("SELECT count() FROM `%s`.`%s` WHERE tenant_id = '%s' AND customer_id = %d", p.database, tb.name, tenant, customer))
}

// caughtUp waits until group committed every record topic holds now.
// The end offsets are read once: capture keeps writing heartbeats (one a
// second to every partition in these tests), so a group that commits each
// within the fetch wait still trails the moving end by one most of the
// time, and a check against the ends of the moment could miss it for
// minutes on a slow machine.
func (p *pipeline) caughtUp(group, topic string, procs ...*testenv.Proc) {
	p.t.Helper()
	adm := kadm.NewClient(p.kafka())
	var ends kadm.ListedOffsets
	err := testenv.Eventually(context.Background(), 90*time.Second, func(ctx context.Context) error {
		if err := exited(procs...); err != nil {
			return err
		}
		if ends == nil {
			listed, err := adm.ListEndOffsets(ctx, topic)
			if err == nil {
				err = listed.Error()
			}
			if err != nil {
				return err
			}
			ends = listed
		}
		committed, err := adm.FetchOffsets(ctx, group)
		if err != nil {
			return err
		}
		var behind []string
		ends.Each(func(o kadm.ListedOffset) {
			c, ok := committed.Lookup(topic, o.Partition)
			if !ok || c.At < o.Offset {
				behind = append(behind, fmt.Sprintf("%d (committed %d of %d)", o.Partition, c.At, o.Offset))
			}
		})
		if len(behind) > 0 {
			return fmt.Errorf("group %s is behind on partitions %s", group, strings.Join(behind, ", "))
		}
		return nil
	})
	if err != nil {
		p.t.Fatal(err)
	}
}

// TestIntegrationErasure erases a customer end to end: refused while
// PostgreSQL has their rows; after they are deleted there, every stored
// version (tombstones included) is gone from ClickHouse, the manifest
// verifies; then the topic replayed from its start by a fresh consumer
// group and a dead-letter replay never bring the customer back, a row the
// customer gets after the erasure loads, and every other row is exactly
// PostgreSQL's.
func TestIntegrationErasure(t *testing.T) {
	p := newPipeline(t)
	tb := p.newErasureTable()
	capture := p.startCapture(tb.name)
	dlq := testenv.Name("dlq")
	metrics := testenv.FreeAddr(t)
	sinkArgs := []string{"--dedup-addr", "off", "--dlq-topic", dlq, "--erasure-key-file", tb.keyFile, "--erasure-refresh", "1s"}
	sink := p.sink(append(sinkArgs, "--metrics-addr", metrics)...)

	// Merges would fold the versions this test wants to see removed: the
	// table is made by a first row, then its merges are stopped.
	p.exec(fmt.Sprintf(`INSERT INTO %s (tenant_id, id, customer_id, note) VALUES ('initech', 1, 1, 'first')`, tb.quoted))
	p.converge(tb.pgQuery, tb.chQuery, capture, sink)
	p.chExec(fmt.Sprintf("SYSTEM STOP MERGES `%s`.`%s`", p.database, tb.name), nil)

	// Customer 42 of acme: ten orders, updated twice, one deleted (a
	// tombstone). Customer 42 of globex and customer 7 of acme stay.
	p.exec(fmt.Sprintf(`INSERT INTO %s (tenant_id, id, customer_id, note)
		SELECT t, g, CASE WHEN g %% 3 = 0 THEN 42 ELSE 7 END, 'order ' || g
		FROM generate_series(1, 30) g, (VALUES ('acme'), ('globex')) AS v(t)`, tb.quoted))
	p.exec(fmt.Sprintf(`UPDATE %s SET note = note || ' changed' WHERE id %% 2 = 0`, tb.quoted))
	p.exec(fmt.Sprintf(`UPDATE %s SET note = note || ' again' WHERE customer_id = 42`, tb.quoted))
	p.exec(fmt.Sprintf(`DELETE FROM %s WHERE tenant_id = 'acme' AND id = 3`, tb.quoted))
	p.exec(fmt.Sprintf(`DELETE FROM %s WHERE tenant_id = 'globex' AND id = 5`, tb.quoted))
	p.converge(tb.pgQuery, tb.chQuery, capture, sink)

	// A change of the customer that cannot be loaded: in the dead letters.
	p.exec(fmt.Sprintf(`UPDATE %s SET reading = 1e40 WHERE tenant_id = 'acme' AND id = 6`, tb.quoted))
	p.waitDeadLetters(dlq, 1, capture, sink)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	manifest := filepath.Join(t.TempDir(), "manifest.json")
	erase := []string{"erase", "--pg", p.env.PG, "--clickhouse", p.env.ClickHouse, "--database", p.database,
		"--tenant", "acme", "--subject-column", "customer_id", "--subject", "42", "--erasure-key-file", tb.keyFile, "--settle", "3s", "--out", manifest}
	_, err := walhouse(ctx, erase...)
	if err == nil || !strings.Contains(err.Error(), "still has rows in PostgreSQL") || !strings.Contains(err.Error(), tb.name) {
		t.Fatalf("erase while PostgreSQL has the rows: %v; want a refusal naming %s", err, tb.name)
	}
	if n := p.chInt(fmt.Sprintf("SELECT count() FROM `%s`._walhouse_erasures", p.database)); n != 0 {
		t.Fatalf("a refused erasure recorded %d ledger entries", n)
	}

	p.exec(fmt.Sprintf(`DELETE FROM %s WHERE tenant_id = 'acme' AND customer_id = 42`, tb.quoted))
	p.converge(tb.pgQuery, tb.chQuery, capture, sink)
	before := p.versions(tb, "acme", 42)
	// Of its 10 inserts and 15 updates, those an insert did not fold
	// (optimize_on_insert); its 10 tombstones carry only the key.
	erasedKeys := fmt.Sprintf("SELECT count() FROM `%s`.`%s` WHERE tenant_id = 'acme' AND id %% 3 = 0 AND id <= 30", p.database, tb.name)
	stored := p.chInt(erasedKeys)
	if before == 0 || stored < before+10 {
		t.Fatalf("acme's customer 42 has %d stored versions with the customer, %d with tombstones; the test needs their history", before, stored)
	}
	// A mutation is a merge: the erasure waits for merges to run.
	p.chExec(fmt.Sprintf("SYSTEM START MERGES `%s`.`%s`", p.database, tb.name), nil)
	if _, err := walhouse(ctx, erase...); err != nil {
		t.Fatal(err)
	}
	// What is left of the customer's rows are tombstones a merge had
	// already separated from the rest of their history: the key, nothing
	// else (docs/erasure.md, Limits).
	onlyKeys := fmt.Sprintf("SELECT count() FROM `%s`.`%s` WHERE tenant_id = 'acme' AND id %% 3 = 0 AND id <= 30 AND (_is_deleted = 0 OR customer_id IS NOT NULL OR note IS NOT NULL)", p.database, tb.name)
	if n := p.versions(tb, "acme", 42); n != 0 {
		t.Fatalf("%d versions of the erased customer are left in ClickHouse", n)
	}
	if n := p.chInt(onlyKeys); n != 0 {
		t.Fatalf("%d versions of the erased customer's rows carry more than their key", n)
	}
	out, err := walhouse(ctx, "erase", "verify", manifest, "--erasure-key-file", tb.keyFile)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s", out)
	data, _ := os.ReadFile(manifest)
	var m struct {
		Tables []struct {
			Removed int64 `json:"versionsRemoved"`
		} `json:"tables"`
	}
	if err := json.Unmarshal(data, &m); err != nil || len(m.Tables) > 1 || len(m.Tables) == 1 && m.Tables[0].Removed > stored {
		t.Errorf("the manifest lists %+v (%v); want at most %d versions removed from one table", m.Tables, err, stored)
	}
	pub, err := walhouse(ctx, "erase", "public-key", "--erasure-key-file", tb.keyFile)
	if err != nil {
		t.Fatal(err)
	}
	tampered := filepath.Join(t.TempDir(), "tampered.json")
	_ = os.WriteFile(tampered, []byte(strings.Replace(string(data), `"tenant": "acme"`, `"tenant": "acmf"`, 1)), 0o600)
	if _, err := walhouse(ctx, "erase", "verify", tampered, "--public-key", strings.TrimSpace(string(pub))); err == nil {
		t.Error("a tampered manifest verified")
	}
	if strings.Contains(string(data), `"42"`) {
		t.Errorf("the manifest holds the subject value:\n%s", data)
	}

	// The customer orders again after the erasure: that row loads.
	p.exec(fmt.Sprintf(`INSERT INTO %s (tenant_id, id, customer_id, note) VALUES ('acme', 100, 42, 'after the erasure')`, tb.quoted))
	p.converge(tb.pgQuery, tb.chQuery, capture, sink)

	// The dead letter of the customer, replayed once it could load, is
	// dropped.
	p.chExec(fmt.Sprintf("ALTER TABLE `%s`.`%s` MODIFY COLUMN reading Nullable(String)", p.database, tb.name), ch.Settings{"mutations_sync": 2})
	if _, err := walhouse(ctx, "dlq", "replay", "--kafka", p.env.Kafka, "--topic-prefix", p.prefix, "--dlq-topic", dlq, "--replay-group", testenv.Name("replay")); err != nil {
		t.Fatal(err)
	}
	p.caughtUp(p.group, tb.topic, capture, sink)

	// The whole topic again, from its start, by a fresh consumer group
	// that cuts other batches than the first sink did: their insert tokens
	// are new, so ClickHouse's insert deduplication cannot hide a record
	// the ledger lets through.
	sink.Kill()
	group := testenv.Name("replay")
	replay := p.sink(append(sinkArgs, "--group", group, "--metrics-addr", metrics, "--max-batch", "3")...)
	p.caughtUp(group, tb.topic, capture, replay)
	p.converge(tb.pgQuery, tb.chQuery, capture, replay)
	if n := p.chInt(onlyKeys); n != 0 {
		t.Errorf("after the replays ClickHouse holds %d versions of the erased customer's rows with more than their key", n)
	}
	if n := p.chInt(fmt.Sprintf("SELECT count() FROM `%s`.`%s` WHERE tenant_id = 'acme' AND customer_id = 42 AND id != 100", p.database, tb.name)); n != 0 {
		t.Errorf("after the replays ClickHouse holds %d versions of the erased customer", n)
	}
	// 10 inserts, 15 updates, the update set aside (twice: the dead-letter
	// replay produced it again); the deletes are recognised by their key
	// only where the erasure found the key.
	const recognisable = 27
	series := fmt.Sprintf(`walhouse_sink_erased_records_dropped_total{table="public.%s"}`, tb.name)
	dropped, _ := scrapeUntil(metrics, series, 10*time.Second, func(v float64) bool { return v >= recognisable })
	t.Logf("records of the erased customer the replaying sink dropped: %.0f", dropped)
	if dropped < recognisable {
		t.Errorf("the replaying sink dropped %.0f records of the erased customer, want at least %d", dropped, recognisable)
	}
}

// waitOutput waits until proc has written want to its output, past the
// first from bytes of it.
func waitOutput(t *testing.T, proc *testenv.Proc, from int, want string) {
	t.Helper()
	err := testenv.Eventually(context.Background(), 2*time.Minute, func(context.Context) error {
		if err := exited(proc); err != nil {
			return err
		}
		if !strings.Contains(proc.Output()[from:], want) {
			return fmt.Errorf("%s has not logged %q yet", proc.Name, want)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, proc.Output())
	}
}

// TestIntegrationErasureOfABatchWhoseInsertIsRetried erases a customer
// while the sink holds a batch with the customer's changes, built before
// the ledger entry, whose insert ClickHouse refuses until after the
// erasure finished: the sink checks the ledger again before the retry, so
// the customer's changes never land, and every other row is exactly
// PostgreSQL's.
func TestIntegrationErasureOfABatchWhoseInsertIsRetried(t *testing.T) {
	p := newPipeline(t)
	tb := p.newErasureTable()
	capture := p.startCapture(tb.name)
	// Three partitions loading at once: each builds its batch as soon as
	// the poll arrives, before the erasure.
	sink := p.sink("--dedup-addr", "off", "--erasure-key-file", tb.keyFile, "--erasure-refresh", "1s",
		"--insert-parallelism", "3", "--max-wait", "2s")

	p.exec(fmt.Sprintf(`INSERT INTO %s (tenant_id, id, customer_id, note)
		SELECT t, g, CASE WHEN g %% 3 = 0 THEN 42 ELSE 7 END, 'order ' || g
		FROM generate_series(1, 30) g, (VALUES ('acme'), ('globex')) AS v(t)`, tb.quoted))
	p.converge(tb.pgQuery, tb.chQuery, capture, sink)

	// ClickHouse refuses every insert into the table from now on; changes
	// of the customer and of others reach the sink, whose insert of them
	// fails and is retried. The customer's deletion comes after the batch
	// (in one batch with the deletes, an insert would fold the changes
	// into the tombstones).
	p.chExec(fmt.Sprintf("ALTER TABLE `%s`.`%s` ADD CONSTRAINT refuse_inserts CHECK 1 = 0", p.database, tb.name), nil)
	logged := len(sink.Output())
	p.exec(fmt.Sprintf(`UPDATE %s SET note = note || ' changed' WHERE id %% 2 = 0`, tb.quoted))
	p.exec(fmt.Sprintf(`INSERT INTO %s (tenant_id, id, customer_id, note) VALUES ('acme', 31, 7, 'new'), ('globex', 31, 42, 'new')`, tb.quoted))
	waitOutput(t, sink, logged, "load public."+tb.name+" failed; retrying")
	p.exec(fmt.Sprintf(`DELETE FROM %s WHERE tenant_id = 'acme' AND customer_id = 42`, tb.quoted))

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := walhouse(ctx, "erase", "--pg", p.env.PG, "--clickhouse", p.env.ClickHouse, "--database", p.database,
		"--tenant", "acme", "--subject-column", "customer_id", "--subject", "42", "--erasure-key-file", tb.keyFile,
		"--settle", "3s", "--out", filepath.Join(t.TempDir(), "manifest.json")); err != nil {
		t.Fatal(err)
	}
	if n := p.versions(tb, "acme", 42); n != 0 {
		t.Fatalf("%d versions of the erased customer are left right after the erasure", n)
	}

	// ClickHouse takes inserts again: the batch built before the erasure
	// loads without the customer's changes.
	p.chExec(fmt.Sprintf("ALTER TABLE `%s`.`%s` DROP CONSTRAINT refuse_inserts", p.database, tb.name), nil)
	p.converge(tb.pgQuery, tb.chQuery, capture, sink)
	if n := p.versions(tb, "acme", 42); n != 0 {
		t.Errorf("the retried batch loaded %d versions of the erased customer after the erasure", n)
	}
	onlyKeys := fmt.Sprintf("SELECT count() FROM `%s`.`%s` WHERE tenant_id = 'acme' AND id %% 3 = 0 AND (_is_deleted = 0 OR customer_id IS NOT NULL OR note IS NOT NULL)", p.database, tb.name)
	if n := p.chInt(onlyKeys); n != 0 {
		t.Errorf("%d versions of the erased customer's rows carry more than their key", n)
	}
	p.noRowTwice(tb.sinkTable)
	if out := sink.Output(); !strings.Contains(out, `when="before an insert attempt"`) {
		t.Errorf("the sink did not leave the customer's records out of a retry (its log has no such drop):\n%s", out)
	}
}

// TestIntegrationSinkWaitsForTheErasureLedger makes the erasure ledger
// unreadable: once its copy is older than --erasure-max-age the sink loads
// nothing more and says so in /readyz, its records waiting in Kafka; once
// the ledger can be read again it loads them, and ClickHouse is exactly
// PostgreSQL.
func TestIntegrationSinkWaitsForTheErasureLedger(t *testing.T) {
	p, tb, capture := capturedSinkTable(t)
	metrics := testenv.FreeAddr(t)
	sink := p.sink("--dedup-addr", "off", "--erasure-refresh", "1s", "--metrics-addr", metrics) // --erasure-max-age 2s
	p.change(tb, 0)
	p.converge(tb.pgQuery, tb.chQuery, capture, sink)
	wantHealth(t, metrics, "/readyz", 200, `"erasure ledger","ok":true`)

	ledger := fmt.Sprintf("`%s`._walhouse_erasures", p.database)
	p.chExec(fmt.Sprintf("RENAME TABLE %s TO `%s`._walhouse_erasures_away", ledger, p.database), nil)
	waitHealth(t, sink, metrics, "/readyz", 503, "could not be read for too long")
	if age, _ := scrapeUntil(metrics, "walhouse_sink_erasure_ledger_age_seconds", 10*time.Second, func(v float64) bool { return v > 2 }); age <= 2 {
		t.Errorf("walhouse_sink_erasure_ledger_age_seconds = %v, want over the bound of 2 s", age)
	}

	ctx := context.Background()
	before, err := chRows(ctx, p.ch, tb.chQuery, nil)
	if err != nil {
		t.Fatal(err)
	}
	logged := len(sink.Output())
	p.change(tb, 1)
	waitOutput(t, sink, logged, "load public."+tb.name+" waits for the erasure ledger")
	after, err := chRows(ctx, p.ch, tb.chQuery, nil)
	if err != nil {
		t.Fatal(err)
	}
	if d := diff(before, after); d != "" {
		t.Fatalf("the sink loaded changes while it could not read the erasure ledger:\n%s", d)
	}

	p.chExec(fmt.Sprintf("RENAME TABLE `%s`._walhouse_erasures_away TO %s", p.database, ledger), nil)
	p.converge(tb.pgQuery, tb.chQuery, capture, sink)
	p.noRowTwice(tb)
	waitOutput(t, sink, logged, "load public."+tb.name+" resumes: the erasure ledger was read")
	waitHealth(t, sink, metrics, "/readyz", 200, `"erasure ledger","ok":true`)
}
