package capture_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walhouse/walhouse/capture"
	"github.com/walhouse/walhouse/harness/testenv"
	"github.com/walhouse/walhouse/idempotency"
	"github.com/walhouse/walhouse/kafka"
	"github.com/walhouse/walhouse/record"
	"github.com/walhouse/walhouse/registry"
	"github.com/walhouse/walhouse/schema"
)

// withKafka wires a Capturer of the pipeline with the given topic prefix
// to Kafka through cl, as cmd/walhouse does: its topics, its schema
// registry.
func withKafka(cl *kgo.Client, prefix string) []capture.Option {
	return []capture.Option{capture.WithTopicPrefix(prefix),
		capture.WithTopicCreator(kafka.Topics(cl, record.DefaultMaxBytes)),
		capture.WithSchemaRegistry(registry.NewWriter(cl, kafka.SchemasTopic(prefix), -1))}
}

// run starts a Capturer of the pipeline with the given topic prefix in the
// background and returns a stop function that waits for it.
func run(t *testing.T, env testenv.Env, prefix string, opts ...capture.Option) func() {
	t.Helper()
	_, stop := start(t, env, prefix, opts...)
	return stop
}

// start is run, also returning the Capturer.
func start(t *testing.T, env testenv.Env, prefix string, opts ...capture.Option) (*capture.Capturer, func()) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(env.Kafka), kgo.RecordPartitioner(capture.Partitioner()))
	if err != nil {
		t.Fatal(err)
	}
	c, err := capture.New(env.PG, cl, append(append(withKafka(cl, prefix), opts...), capture.WithStatusInterval(200*time.Millisecond))...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	// Streaming has begun once the position is known.
	deadline := time.Now().Add(30 * time.Second)
	for c.Stats().Confirmed == 0 {
		select {
		case err := <-done:
			t.Fatalf("capture stopped: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("capture did not start")
		}
		time.Sleep(20 * time.Millisecond)
	}
	return c, func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("capture: %v", err)
		}
		cl.Close()
	}
}

// consume reads n records from topic.
func consume(t *testing.T, env testenv.Env, topic string, n int) []*record.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(env.Kafka), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	prefix, _, _ := strings.Cut(topic, ".public.")
	dec := testenv.NewRecords(t, env, prefix)
	partitions := 0 // of topic, read at the first row batch
	placement := capture.Partitioner().ForTopic(topic)
	var out []*record.Record
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d records from %s", len(out), n, topic)
		}
		for _, kr := range fs.Records() {
			if kr.Value == nil {
				continue // heartbeat
			}
			rows, err := dec.DecodeAll(ctx, kr)
			if err != nil {
				t.Fatalf("decode record at offset %d: %v", kr.Offset, err)
			}
			if kr.Key == nil && partitions == 0 {
				td, err := kadm.NewClient(cl).ListTopics(ctx, topic)
				if err != nil || td[topic].Err != nil {
					t.Fatalf("describe %s: %v %v", topic, err, td[topic].Err)
				}
				partitions = len(td[topic].Partitions)
			}
			for _, r := range rows {
				// A row batch sits where its rows' keys place them.
				if kr.Key == nil {
					if want := placement.Partition(&kgo.Record{Key: []byte(r.PartitionKey())}, partitions); int32(want) != kr.Partition {
						t.Errorf("row %s of a batch is in partition %d, its key hashes to %d", r.PartitionKey(), kr.Partition, want)
					}
				}
				if kr.Key != nil && string(kr.Key) != r.PartitionKey() {
					t.Errorf("kafka key %s, record partition key %s", kr.Key, r.PartitionKey())
				}
				out = append(out, r)
			}
		}
	}
	return out
}

// connectPG requires the services capture's integration tests use
// (PostgreSQL and Kafka) and returns them with a connection to PostgreSQL
// that is closed when the test ends, after the cleanups registered later
// (which use it).
func connectPG(t *testing.T) (testenv.Env, *pgx.Conn) {
	t.Helper()
	env := testenv.Require(t, "pg", "kafka")
	pg, err := pgx.Connect(context.Background(), env.PG)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pg.Close(context.Background()) })
	return env, pg
}

// createTable creates a table with a fresh name that starts with prefix,
// defined by columns, and drops it when the test ends; it returns the name.
func createTable(t *testing.T, pg *pgx.Conn, prefix, columns string) string {
	t.Helper()
	name := testenv.Name(prefix)
	if _, err := pg.Exec(context.Background(), "CREATE TABLE "+name+" "+columns); err != nil {
		t.Fatalf("create table %s: %v", name, err)
	}
	t.Cleanup(func() { _, _ = pg.Exec(context.Background(), "DROP TABLE IF EXISTS "+name) })
	return name
}

// dropAfter removes, when the test ends, the slots, publication and tables
// a test created.
func dropAfter(t *testing.T, pg *pgx.Conn, slots []string, pub string, tables ...string) {
	t.Cleanup(func() {
		ctx := context.Background()
		for _, s := range slots {
			if err := testenv.DropSlot(ctx, pg, s); err != nil {
				t.Errorf("drop slot %s: %v", s, err)
			}
		}
		_, _ = pg.Exec(ctx, "DROP PUBLICATION IF EXISTS "+pub)
		if len(tables) > 0 {
			_, _ = pg.Exec(ctx, "DROP TABLE IF EXISTS "+strings.Join(tables, ", "))
		}
	})
}

// freshSlot names a replication slot, a publication and a topic prefix
// that starts with prefix, all fresh, and drops the slot and publication
// when the test ends.
func freshSlot(t *testing.T, pg *pgx.Conn, prefix string) (slot, pub, topicPrefix string) {
	slot, pub, topicPrefix = testenv.Name("slot"), testenv.Name("pub"), testenv.Name(prefix)
	dropAfter(t, pg, []string{slot}, pub)
	return slot, pub, topicPrefix
}

func TestIntegrationCaptureVersionsAndIdentity(t *testing.T) {
	env, pg := connectPG(t)
	ctx := context.Background()
	table := createTable(t, pg, "cap", "(tenant_id text, id int, v text, PRIMARY KEY (tenant_id, id))")
	slotA, slotB := testenv.Name("slot"), testenv.Name("slot")
	pub := testenv.Name("pub")
	prefixA, prefixB := testenv.Name("a"), testenv.Name("b")
	exec := func(c *pgx.Conn, q string) {
		t.Helper()
		if _, err := c.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	dropAfter(t, pg, []string{slotA, slotB}, pub)
	// The publication must exist before the changes: pgoutput decides what
	// is published with the catalog as of each change.
	exec(pg, fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s", pub, table))
	// Two slots at one position read the same WAL: the second reading is a
	// re-capture of the same changes.
	exec(pg, fmt.Sprintf("SELECT pg_create_logical_replication_slot('%s', 'pgoutput')", slotA))
	exec(pg, fmt.Sprintf("SELECT pg_create_logical_replication_slot('%s', 'pgoutput')", slotB))

	// Interleaved transactions: t1 starts first (a write at a low LSN) but
	// commits last; t2 changes row 1 and commits in between.
	exec(pg, fmt.Sprintf("INSERT INTO %s VALUES ('acme', 1, 'v0'), ('acme', 2, 'v0')", table))
	t1, err := pgx.Connect(ctx, env.PG)
	if err != nil {
		t.Fatal(err)
	}
	defer t1.Close(ctx)
	exec(t1, "BEGIN")
	exec(t1, fmt.Sprintf("UPDATE %s SET v = 't1-early' WHERE id = 2", table))
	exec(pg, fmt.Sprintf("BEGIN; UPDATE %s SET v = 't2-a' WHERE id = 1; UPDATE %s SET v = 't2-b' WHERE id = 1; COMMIT", table, table))
	exec(t1, fmt.Sprintf("UPDATE %s SET v = 't1-late' WHERE id = 1", table))
	exec(t1, "COMMIT")
	exec(pg, fmt.Sprintf("DELETE FROM %s WHERE id = 2", table))
	const changes = 2 + 1 + 2 + 1 + 1

	stop := run(t, env, prefixA, capture.WithSlot(slotA), capture.WithPublication(pub), capture.WithTables(table))
	a := consume(t, env, prefixA+".public."+table, changes)
	stop()
	stop = run(t, env, prefixB, capture.WithSlot(slotB), capture.WithPublication(pub))
	b := consume(t, env, prefixB+".public."+table, changes)
	stop()

	// Kafka orders records per partition only; order them by commit, then
	// position in the transaction, as the stream did.
	for _, rs := range [][]*record.Record{a, b} {
		sort.Slice(rs, func(i, j int) bool {
			if rs[i].CommitLSN != rs[j].CommitLSN {
				return rs[i].CommitLSN < rs[j].CommitLSN
			}
			return rs[i].Ordinal < rs[j].Ordinal
		})
	}
	for i := range a {
		if a[i].EventID != b[i].EventID || a[i].Version != b[i].Version {
			t.Errorf("change %d captured twice differs: %s/%d vs %s/%d", i, a[i].EventID, a[i].Version, b[i].EventID, b[i].Version)
		}
	}
	// Per row, versions increase in commit order; ids are unique.
	last := map[string]uint64{}
	seen := map[string]bool{}
	var row1 []string
	for _, r := range a {
		k := r.PartitionKey()
		if r.Version <= last[k] {
			t.Errorf("row %s: version %d after %d", k, r.Version, last[k])
		}
		last[k] = r.Version
		if seen[r.EventID] {
			t.Errorf("duplicate eventId %s", r.EventID)
		}
		seen[r.EventID] = true
		if r.Values[1].Text == "1" {
			row1 = append(row1, r.Op.String()+":"+r.Values[2].Text)
		}
	}
	if got := fmt.Sprint(row1); got != "[c:v0 u:t2-a u:t2-b u:t1-late]" {
		t.Errorf("row 1 changes in commit order = %s", got)
	}
	if d := a[len(a)-1]; d.Op != record.Delete || d.Values[1].Text != "2" || d.TenantID != "acme" {
		t.Errorf("last change = %+v, want the delete of acme/2", d)
	}
}

func TestIntegrationCaptureRefusesBadTables(t *testing.T) {
	env, pg := connectPG(t)
	ctx := context.Background()
	noKey := createTable(t, pg, "nokey", "(tenant_id text, v text)")
	noTenant := createTable(t, pg, "notenant", "(id int PRIMARY KEY, v text)")
	pub := testenv.Name("pub")
	dropAfter(t, pg, nil, pub)
	cl, err := kgo.NewClient(kgo.SeedBrokers(env.Kafka))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	c, err := capture.New(env.PG, cl, append(withKafka(cl, "walhouse"), capture.WithPublication(pub), capture.WithTables(noKey, noTenant))...)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Setup(ctx)
	// No slot yet, so nothing pins WAL: a clear refusal that names the way
	// out, rather than leaving the tables out from the first start.
	for _, want := range []string{noKey + " has no primary key", noTenant + " has no tenant column", "--exclude-tables public." + noKey + ",public." + noTenant} {
		if err == nil || !contains(err.Error(), want) {
			t.Errorf("Setup error %v does not say %q", err, want)
		}
	}
	bad, err := capture.New("postgres://nobody@127.0.0.1:1/none?connect_timeout=2", cl, withKafka(cl, "walhouse")...)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bad.Setup(ctx); err == nil || !contains(err.Error(), "connect to PostgreSQL") {
		t.Errorf("unreachable PostgreSQL: err = %v", err)
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

func TestIntegrationHeartbeatsAdvanceIdleSlot(t *testing.T) {
	env, pg := connectPG(t)
	ctx := context.Background()
	table := createTable(t, pg, "hb", "(tenant_id text, id int, PRIMARY KEY (tenant_id, id))")
	slot, pub, prefix := freshSlot(t, pg, "hb")
	stop := run(t, env, prefix, capture.WithSlot(slot), capture.WithPublication(pub), capture.WithTables(table),
		capture.WithTopicPartitions(3), capture.WithHeartbeatInterval(100*time.Millisecond))
	defer stop()

	// Another database user writes WAL that capture never sees (no table of
	// ours changes); the slot must still move past it.
	var before string
	if err := pg.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text FROM (SELECT pg_switch_wal()) s").Scan(&before); err != nil {
		t.Fatal(err)
	}
	err := testenv.Eventually(ctx, 30*time.Second, func(ctx context.Context) error {
		var passed bool
		err := pg.QueryRow(ctx, "SELECT confirmed_flush_lsn >= $1::pg_lsn FROM pg_replication_slots WHERE slot_name = $2", before, slot).Scan(&passed)
		if err != nil || !passed {
			return fmt.Errorf("confirmed_flush_lsn not past %s yet (%v)", before, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	cl, err := kgo.NewClient(kgo.SeedBrokers(env.Kafka), kgo.ConsumeTopics(prefix+".public."+table), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	seen := map[int32]bool{}
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for len(seen) < 3 && pctx.Err() == nil {
		cl.PollFetches(pctx).EachRecord(func(r *kgo.Record) {
			hb, ok, err := record.ParseHeartbeat(func(k string) (string, bool) {
				for _, h := range r.Headers {
					if h.Key == k {
						return string(h.Value), true
					}
				}
				return "", false
			})
			if err != nil || !ok {
				t.Errorf("record at %d/%d is not a valid heartbeat: %v", r.Partition, r.Offset, err)
				return
			}
			if hb.Source.Table != table || time.Since(hb.At) > time.Minute {
				t.Errorf("heartbeat %+v", hb)
			}
			seen[r.Partition] = true
		})
	}
	if len(seen) != 3 {
		t.Errorf("heartbeats reached partitions %v, want all 3", seen)
	}
}

// A publication's row filter and column list (PostgreSQL 15+) are
// honoured, but a column list that leaves out a key, tenant or layout
// sorting column is refused, with the ALTER PUBLICATION that adds them and
// keeps the rest of the entry (its filter too): without them a row could
// not be identified, or placed, in ClickHouse. The statement it names
// makes the tables capturable.
func TestIntegrationCaptureRefusesColumnListWithoutKey(t *testing.T) {
	env, pg := connectPG(t)
	ctx := context.Background()
	testenv.SkipBeforePG(t, pg, 15, "publication row filters or column lists")
	rowsTable := createTable(t, pg, "rowfilter", "(tenant_id text, id int, region text, PRIMARY KEY (tenant_id, id))")
	colsTable := createTable(t, pg, "collist", "(tenant_id text, id int, secret text, PRIMARY KEY (tenant_id, id))")
	noKey := createTable(t, pg, "nokey", "(tenant_id text, id int, region text, note text, PRIMARY KEY (tenant_id, id))")
	noTenant := createTable(t, pg, "notenant", "(tenant_id text, id int, note text, PRIMARY KEY (id))")
	// A layout's sorting column places the row in ClickHouse: a list must
	// keep it too.
	noSort := createTable(t, pg, "nosort", "(tenant_id text, id int, status text, note text, PRIMARY KEY (tenant_id, id))")
	if _, err := pg.Exec(ctx, fmt.Sprintf("ALTER TABLE %s REPLICA IDENTITY FULL", pgx.Identifier{"public", noSort}.Sanitize())); err != nil {
		t.Fatal(err)
	}
	sortLayout := capture.WithTableLayout("public."+noSort, schema.Layout{OrderBy: []string{"tenant_id", "status", "id"}})
	// PostgreSQL 15 lists a stored generated column in attnames without
	// publishing them: not a column list.
	wholeTable := createTable(t, pg, "whole", "(tenant_id text, id int, a int, g int GENERATED ALWAYS AS (a * 2) STORED, PRIMARY KEY (tenant_id, id))")
	pub := testenv.Name("pub")
	dropAfter(t, pg, nil, pub)
	q := func(name string) string { return pgx.Identifier{"public", name}.Sanitize() }
	if _, err := pg.Exec(ctx, fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s WHERE (region = 'eu'), %s (tenant_id, id), %s (tenant_id, note) WHERE (region = 'eu'), %s (id, note), %s (tenant_id, id, note), %s",
		pgx.Identifier{pub}.Sanitize(), q(rowsTable), q(colsTable), q(noKey), q(noTenant), q(noSort), q(wholeTable))); err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(env.Kafka))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	// A slot of its own that does not exist: a first start refuses.
	slot := testenv.Name("slot")
	c, err := capture.New(env.PG, cl, append(withKafka(cl, "walhouse"), capture.WithPublication(pub), capture.WithSlot(slot), sortLayout)...)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Setup(ctx)
	for _, want := range []string{
		noKey + `" with a column list that leaves out id`,
		fmt.Sprintf(`ALTER PUBLICATION %s ADD TABLE %s ("tenant_id", "note", "id") WHERE ((region = 'eu'::text)); COMMIT`, pgx.Identifier{pub}.Sanitize(), q(noKey)),
		noTenant + `" with a column list that leaves out tenant_id`,
		fmt.Sprintf(`ADD TABLE %s ("id", "note", "tenant_id"); COMMIT`, q(noTenant)),
		noSort + `" with a column list that leaves out status`,
	} {
		if err == nil || !contains(err.Error(), want) {
			t.Errorf("Setup error %v does not say %q", err, want)
		}
	}
	for _, ok := range []string{rowsTable, colsTable, wholeTable} {
		if err != nil && contains(err.Error(), ok) {
			t.Errorf("Setup refused %s, whose row filter or column list keeps its key and tenant: %v", ok, err)
		}
	}
	// The fix the error names makes the table capturable.
	fixed := pgx.Identifier{pub}.Sanitize()
	for _, stmt := range []string{
		fmt.Sprintf(`BEGIN; ALTER PUBLICATION %s DROP TABLE %s; ALTER PUBLICATION %s ADD TABLE %s ("tenant_id", "note", "id") WHERE ((region = 'eu'::text)); COMMIT`, fixed, q(noKey), fixed, q(noKey)),
		fmt.Sprintf(`BEGIN; ALTER PUBLICATION %s DROP TABLE %s; ALTER PUBLICATION %s ADD TABLE %s ("id", "note", "tenant_id"); COMMIT`, fixed, q(noTenant), fixed, q(noTenant)),
		fmt.Sprintf(`BEGIN; ALTER PUBLICATION %s DROP TABLE %s; ALTER PUBLICATION %s ADD TABLE %s ("tenant_id", "id", "note", "status"); COMMIT`, fixed, q(noSort), fixed, q(noSort)),
	} {
		if _, err := pg.Exec(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	c, err = capture.New(env.PG, cl, append(withKafka(cl, "walhouse"), capture.WithPublication(pub), capture.WithSlot(slot), sortLayout)...)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Setup(ctx); err != nil {
		t.Errorf("Setup after the fix: %v", err)
	}
	if testenv.PGMajor(t, pg) < 18 {
		return
	}
	// PostgreSQL 18 can publish stored generated columns, which the copy
	// does not read.
	genPub := testenv.Name("pub")
	dropAfter(t, pg, nil, genPub)
	if _, err := pg.Exec(ctx, fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s WITH (publish_generated_columns = stored)", pgx.Identifier{genPub}.Sanitize(), q(wholeTable))); err != nil {
		t.Fatal(err)
	}
	c, err = capture.New(env.PG, cl, append(withKafka(cl, "walhouse"), capture.WithPublication(genPub))...)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Setup(ctx); err == nil || !contains(err.Error(), "publishes generated columns of") || !contains(err.Error(), wholeTable) {
		t.Errorf("Setup of a publication with publish_generated_columns = stored: err = %v, want it refused", err)
	}
}

// TestIntegrationExcludedTablesAreNotCaptured captures a publication that
// is not walhouse's own, leaving out tables by pattern: those published at
// start and one that joins while streaming (and has no key, so capturing
// it would fail). Their changes must not reach Kafka; the others' must.
func TestIntegrationExcludedTablesAreNotCaptured(t *testing.T) {
	env, pg := connectPG(t)
	ctx := context.Background()
	kept := createTable(t, pg, "keep", `(tenant_id text, id int, PRIMARY KEY (tenant_id, id))`)
	skipped := createTable(t, pg, "skip", `(tenant_id text, id int, PRIMARY KEY (tenant_id, id))`)
	joined := createTable(t, pg, "skip", `(tenant_id text, id int)`) // no key: refused if captured
	slot, pubName, prefix := freshSlot(t, pg, "wh")
	pub := pgx.Identifier{pubName}.Sanitize()
	if _, err := pg.Exec(ctx, fmt.Sprintf(`CREATE PUBLICATION %s FOR TABLE %s, %s`, pub, kept, skipped)); err != nil {
		t.Fatal(err)
	}
	stop := run(t, env, prefix, capture.WithSlot(slot), capture.WithPublication(pubName),
		capture.WithExcludeTables("public.skip_*"), capture.WithHeartbeatInterval(200*time.Millisecond))
	defer stop()
	for _, q := range []string{
		fmt.Sprintf(`ALTER PUBLICATION %s ADD TABLE %s`, pub, joined),
		fmt.Sprintf(`INSERT INTO %s VALUES ('t', 1)`, skipped),
		fmt.Sprintf(`INSERT INTO %s VALUES ('t', 1)`, joined),
		fmt.Sprintf(`INSERT INTO %s VALUES ('t', 1), ('t', 2)`, kept),
	} {
		if _, err := pg.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	recs := consume(t, env, prefix+".public."+kept, 2)
	if len(recs) != 2 {
		t.Fatalf("%s: got %d records, want 2", kept, len(recs))
	}
	// Let a publication poll and the heartbeats pass, then look for the
	// excluded tables' topics: they must not even exist.
	time.Sleep(time.Second)
	cl, err := kgo.NewClient(kgo.SeedBrokers(env.Kafka))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	topics, err := kadm.NewClient(cl).ListTopics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, tb := range []string{skipped, joined} {
		if topics.Has(prefix + ".public." + tb) {
			t.Errorf("excluded table %s has a topic", tb)
		}
	}
	if !topics.Has(prefix + ".public." + kept) {
		t.Errorf("table %s has no topic", kept)
	}
}

// TestIntegrationIdempotencyKeysLeftOut publishes Layer 1's key table next
// to a table: capture leaves the key table out (no topic, no records)
// unless asked with WithIdempotencyKeys.
func TestIntegrationIdempotencyKeysLeftOut(t *testing.T) {
	env, pg := connectPG(t)
	ctx := context.Background()
	if err := idempotency.Migrate(ctx, pg); err != nil {
		t.Fatal(err)
	}
	kept := createTable(t, pg, "keep", `(tenant_id text, id int, PRIMARY KEY (tenant_id, id))`)
	pubName := testenv.Name("pub")
	pub := pgx.Identifier{pubName}.Sanitize()
	slots := []string{testenv.Name("slot"), testenv.Name("slot")}
	dropAfter(t, pg, slots, pub)
	if _, err := pg.Exec(ctx, fmt.Sprintf(`CREATE PUBLICATION %s FOR TABLE %s, %s`, pub, kept, idempotency.KeyTable)); err != nil {
		t.Fatal(err)
	}
	// Superuser: row-level security does not apply to this insert.
	if _, err := pg.Exec(ctx, `INSERT INTO `+idempotency.KeyTable+` (tenant_id, idempotency_key, fingerprint) VALUES ('t', $1, sha256('x'))`, idempotency.NewKey()); err != nil {
		t.Fatal(err)
	}
	keysTopic := func(prefix string) string { return prefix + "." + idempotency.KeyTable }
	for i, include := range []bool{false, true} {
		prefix := testenv.Name("wh")
		opts := []capture.Option{capture.WithSlot(slots[i]), capture.WithPublication(pubName)}
		if include {
			opts = append(opts, capture.WithIdempotencyKeys())
		}
		stop := run(t, env, prefix, opts...)
		if _, err := pg.Exec(ctx, fmt.Sprintf(`INSERT INTO %s VALUES ('t', %d)`, kept, i)); err != nil {
			t.Fatal(err)
		}
		consume(t, env, prefix+".public."+kept, i+1)
		stop()
		cl, err := kgo.NewClient(kgo.SeedBrokers(env.Kafka))
		if err != nil {
			t.Fatal(err)
		}
		topics, err := kadm.NewClient(cl).ListTopics(ctx)
		cl.Close()
		if err != nil {
			t.Fatal(err)
		}
		if got := topics.Has(keysTopic(prefix)); got != include {
			t.Errorf("WithIdempotencyKeys %v: the key table has a topic: %v", include, got)
		}
	}
}

// A first start refuses a table whose layout sorts by a column outside
// its replica identity, or by a column it lacks, naming the fix; the same
// layout over a REPLICA IDENTITY FULL table is accepted.
func TestIntegrationCaptureRefusesLayoutOutsideIdentity(t *testing.T) {
	env, pg := connectPG(t)
	ctx := context.Background()
	plain := createTable(t, pg, "laydef", "(tenant_id text, id int, status text, PRIMARY KEY (tenant_id, id))")
	missing := createTable(t, pg, "laymiss", "(tenant_id text, id int, status text, PRIMARY KEY (tenant_id, id))")
	full := createTable(t, pg, "layfull", "(tenant_id text, id int, status text, PRIMARY KEY (tenant_id, id))")
	if _, err := pg.Exec(ctx, "ALTER TABLE "+full+" REPLICA IDENTITY FULL"); err != nil {
		t.Fatal(err)
	}
	pub := testenv.Name("pub")
	dropAfter(t, pg, nil, pub)
	cl, err := kgo.NewClient(kgo.SeedBrokers(env.Kafka))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	layout := schema.Layout{OrderBy: []string{"tenant_id", "status", "id"}}
	c, err := capture.New(env.PG, cl, append(withKafka(cl, "walhouse"), capture.WithPublication(pub), capture.WithTables(plain, missing, full),
		capture.WithTableLayout(plain, layout), capture.WithTableLayout(full, layout),
		capture.WithTableLayout(missing, schema.Layout{OrderBy: []string{"tenant_id", "nope", "id"}}))...)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Setup(ctx)
	for _, want := range []string{plain + ": its layout sorts by status, outside the replica identity", "REPLICA IDENTITY FULL", missing + " has no column nope"} {
		if err == nil || !contains(err.Error(), want) {
			t.Errorf("Setup error %v does not say %q", err, want)
		}
	}
	if err != nil && contains(err.Error(), "table public."+full) {
		t.Errorf("Setup refused %s, whose identity is FULL: %v", full, err)
	}
}
