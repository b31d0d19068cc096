package capture_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walhouse/walhouse/capture"
	"github.com/walhouse/walhouse/harness/testenv"
)

// TestIntegrationLargeTransactionBoundedMemory streams one transaction of
// 1,000,000 rows. PostgreSQL hands it over only at commit (protocol 1,
// spilling to disk on its side); capture must pass it through with bounded
// memory: the pending-bytes bound pauses reading while Kafka catches up.
func TestIntegrationLargeTransactionBoundedMemory(t *testing.T) {
	env, pg := connectPG(t)
	ctx := context.Background()
	table := createTable(t, pg, "big", "(tenant_id text, id int, payload text, PRIMARY KEY (tenant_id, id))")
	slot, pub, prefix := freshSlot(t, pg, "big")

	stopSampling := testenv.SampleHeap()
	stop := run(t, env, prefix, capture.WithSlot(slot), capture.WithPublication(pub), capture.WithTables(table),
		capture.WithMaxPendingBytes(32<<20))
	defer stop()

	const rows = 1_000_000
	if _, err := pg.Exec(ctx, fmt.Sprintf("INSERT INTO %s SELECT 't' || (g %% 10), g, repeat('x', 100) FROM generate_series(1, %d) g", table, rows)); err != nil {
		t.Fatal(err)
	}
	var end string
	if err := pg.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&end); err != nil {
		t.Fatal(err)
	}
	err := testenv.Eventually(ctx, 5*time.Minute, func(ctx context.Context) error {
		var done bool
		if err := pg.QueryRow(ctx, "SELECT confirmed_flush_lsn >= $1::pg_lsn FROM pg_replication_slots WHERE slot_name = $2", end, slot).Scan(&done); err != nil || !done {
			return fmt.Errorf("slot not past %s yet (%v)", end, err)
		}
		return nil
	})
	peak := stopSampling()
	if err != nil {
		t.Fatal(err)
	}

	cl, err := kgo.NewClient(kgo.SeedBrokers(env.Kafka))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, prefix+".public."+table)
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	ends.Each(func(o kadm.ListedOffset) { total += o.Offset })
	// Heartbeats may add a few records per partition.
	if total < rows || total > rows+1000 {
		t.Errorf("topic holds %d records, want %d rows (plus heartbeats)", total, rows)
	}
	t.Logf("peak heap in use while streaming %d rows in one transaction: %d MiB", rows, peak>>20)
	if peak > 256<<20 {
		t.Errorf("peak heap %d MiB: memory is not bounded by the pending-bytes limit", peak>>20)
	}
}
