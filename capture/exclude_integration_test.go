package capture_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walhouse/walhouse/capture"
	"github.com/walhouse/walhouse/idempotency"
	"github.com/walhouse/walhouse/internal/testenv"
)

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
	slot, pubName, prefix := testenv.Name("slot"), testenv.Name("pub"), testenv.Name("wh")
	pub := pgx.Identifier{pubName}.Sanitize()
	dropAfter(t, pg, []string{slot}, pub)
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
