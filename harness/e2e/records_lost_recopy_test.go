package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/walhouse/walhouse/harness/testenv"
)

// TestIntegrationSinkRecopiesAfterARetentionGap is issue 24's gap with the
// re-copy option: the sink is stopped, rows are inserted, UPDATEd and
// DELETEd, retention deletes records of a partition the sink has not read
// (DELETEs among them), and the sink starts again with --recopy-on-gap
// while writes go on. The sink asks capture to copy the table again and
// loads on; the sink and capture are both restarted in the middle of the
// recovery. At the end ClickHouse FINAL equals PostgreSQL exactly (the
// lost DELETEs too), and the table's lastSyncAt never moved while it was
// recovering.
func TestIntegrationSinkRecopiesAfterARetentionGap(t *testing.T) {
	p, tb, capture := capturedSinkTable(t)
	ctx := context.Background()
	metrics := testenv.FreeAddr(t)
	sink := p.sink("--recopy-on-gap", "--metrics-addr", metrics)
	p.change(tb, 2001)
	p.converge(tb.pgQuery, tb.chQuery, capture, sink)
	before := p.syncedThenKilled(t, tb.name, sink)
	// DELETEs and UPDATEs first, so that some of them are among the
	// records retention removes from partition 0.
	n := p.execCount(fmt.Sprintf(`DELETE FROM %s WHERE id %% 4 = 1`, tb.quoted))
	n += p.execCount(fmt.Sprintf(`UPDATE %s SET note = 'lost update' WHERE id %% 4 = 2`, tb.quoted))
	n += p.change(tb, 2002) + p.change(tb, 2003)
	p.waitProduced(tb.topic, n)
	committed, start := p.deleteRecordsMidway(tb.topic, 0)

	// lastSyncAt must not move while the table recovers: every sample of
	// _walhouse_sync taken before the sink logged the end of the recovery
	// (it does so before it writes a mark again) must be at the marks of
	// before the gap.
	var (
		mu       sync.Mutex
		current  = sink
		ahead    []string
		sampling = make(chan struct{})
		sampled  = make(chan struct{})
	)
	const released = "re-copy of the table loaded in every partition and swept"
	releasedIn := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return strings.Contains(current.Output(), released)
	}
	go func() {
		defer close(sampled)
		for {
			select {
			case <-sampling:
				return
			case <-time.After(100 * time.Millisecond):
			}
			if releasedIn() {
				continue
			}
			marks, err := p.loadedThrough(ctx, tb.name)
			if err != nil || releasedIn() {
				continue
			}
			for part, at := range marks {
				if !at.Equal(before[part]) {
					ahead = append(ahead, fmt.Sprintf("partition %d loaded through %v, before the gap %v", part, at, before[part]))
				}
			}
		}
	}()
	stopSampling := sync.OnceFunc(func() { close(sampling); <-sampled })
	defer stopSampling()

	w := p.startWriter(tb)
	sink = p.sink("--recopy-on-gap", "--metrics-addr", metrics)
	mu.Lock()
	current = sink
	mu.Unlock()
	waitLog(t, sink, "asked capture to copy the table again", "topic="+tb.topic, "partition=0",
		fmt.Sprintf("lost_from=%d", committed), fmt.Sprintf("lost_to=%d", start-1), "table=public."+tb.name)
	lost := fmt.Sprintf(`walhouse_sink_offsets_lost_total{partition="0",topic=%q}`, tb.topic)
	if v := waitMetric(t, metrics, lost, 1, sink); v != float64(start-committed) {
		t.Errorf("%s = %v, want %d", lost, v, start-committed)
	}
	pending := fmt.Sprintf(`walhouse_sink_recopies_pending{table="public.%s"}`, tb.name)

	// The sink restarts before the copy is loaded: it learns the pending
	// request from the re-copy topic (its offset may be past the gap).
	sink.Kill()
	sink = p.sink("--recopy-on-gap", "--metrics-addr", metrics)
	mu.Lock()
	current = sink
	mu.Unlock()
	// Capture restarts once it noticed the request in the WAL: the copy
	// resumes from its saved plan.
	waitLog(t, capture, "noticed in the WAL", "table=public."+tb.name)
	capture.Kill()
	capture = killAtEnd(t, p.runCapture(p.captureArgs([]string{tb.name})))
	w.waitOps(t, 20)
	if err := w.stop(); err != nil {
		t.Fatal(err)
	}
	p.convergeWithin(3*time.Minute, tb.pgQuery, tb.chQuery, capture, sink)
	waitLog(t, sink, released, "table=public."+tb.name)
	waitHealth(t, sink, metrics, "/readyz", 200, `"records lost","ok":true`)
	if v := metric(t, metrics, pending); v != 0 {
		t.Errorf("%s = %v after the recovery, want 0", pending, v)
	}
	// And lastSyncAt moves again, past the gap.
	if err := testenv.Eventually(ctx, 60*time.Second, func(ctx context.Context) error {
		marks, err := p.loadedThrough(ctx, tb.name)
		if err != nil {
			return err
		}
		for part := int32(0); part < 3; part++ {
			if !marks[part].After(before[part]) {
				return fmt.Errorf("partition %d loaded through %v, not past %v yet", part, marks[part], before[part])
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	stopSampling()
	if len(ahead) > 0 {
		t.Errorf("lastSyncAt moved while the table was recovering: %d samples, first %s", len(ahead), ahead[0])
	}
}
