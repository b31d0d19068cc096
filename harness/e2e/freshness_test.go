package e2e

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"

	"github.com/walhouse/walhouse/harness/testenv"
)

// TestIntegrationLastSyncAtFollowsTheSink checks the freshness the query
// API reports (meta.lastSyncAt: the minimum loaded_through over the table's
// partitions in _walhouse_sync): it moves forward while the sink loads,
// also when the table is idle (heartbeats), and stops when the sink stops.
func TestIntegrationLastSyncAtFollowsTheSink(t *testing.T) {
	p := newPipeline(t)
	table, qt := p.table("fresh", `(tenant_id text, id int, v int, PRIMARY KEY (tenant_id, id))`)
	capture := p.startCapture(table)
	sink := p.startSink()
	p.exec(fmt.Sprintf(`INSERT INTO %s SELECT 't', g, 0 FROM generate_series(1, 100) g`, qt))

	ctx := context.Background()
	// lastSyncAt is known once every partition has loaded something.
	lastSync := func(ctx context.Context) (time.Time, error) {
		var n uint64
		var at time.Time
		q := fmt.Sprintf("SELECT count(), min(loaded_through) FROM `%s`._walhouse_sync FINAL WHERE source_table = {t:String}", p.database)
		err := p.ch.QueryRow(ch.Context(ctx, ch.WithParameters(ch.Parameters{"t": table})), q).Scan(&n, &at)
		if err != nil {
			return time.Time{}, err
		}
		if n < 3 {
			return time.Time{}, fmt.Errorf("%d of 3 partitions recorded", n)
		}
		return at, nil
	}
	var first time.Time
	if err := testenv.Eventually(ctx, 60*time.Second, func(ctx context.Context) (err error) {
		first, err = lastSync(ctx)
		return err
	}); err != nil {
		t.Fatalf("no lastSyncAt: %v", err)
	}
	// Idle table, running sink: heartbeats move it forward.
	var later time.Time
	if err := testenv.Eventually(ctx, 60*time.Second, func(ctx context.Context) (err error) {
		if later, err = lastSync(ctx); err == nil && !later.After(first) {
			err = fmt.Errorf("lastSyncAt still %v", later)
		}
		return err
	}); err != nil {
		t.Fatalf("lastSyncAt does not move while the sink runs: %v", err)
	}
	if time.Since(later) > time.Minute || later.After(time.Now()) {
		t.Errorf("lastSyncAt %v is not a recent past time", later)
	}

	// Sink stopped: changes and heartbeats pile up in Kafka, and lastSyncAt
	// must stay where the sink left it.
	sink.Stop()
	stopped, err := lastSync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p.exec(fmt.Sprintf(`UPDATE %s SET v = v + 1`, qt))
	err = testenv.Eventually(ctx, 4*time.Second, func(ctx context.Context) error {
		now, err := lastSync(ctx)
		if err == nil && now.After(stopped) {
			return nil // moved: wrong
		}
		return errors.New("unchanged")
	})
	if err == nil {
		t.Fatalf("lastSyncAt moved past %v with the sink stopped", stopped)
	}
	if done, _ := capture.Exited(); done {
		t.Fatal("capture exited")
	}
}
