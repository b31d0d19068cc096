package query

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walhouse/walhouse/clickhouse"
	"github.com/walhouse/walhouse/harness/testenv"
	"github.com/walhouse/walhouse/schema"
)

// TestIntegrationServeReportsCaptureBacklog runs `walhouse capture` with
// --metrics-addr on a real PostgreSQL and Kafka, and `walhouse serve` with
// --capture-url naming it and a capture that is not running. /v1/lag and
// /metrics must carry the running capture's status (slot, positions,
// producer backlog, records produced, following the writes), and report the
// other one down without failing.
func TestIntegrationServeReportsCaptureBacklog(t *testing.T) {
	env := testenv.Require(t, "pg", "kafka", "clickhouse")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	bin, err := testenv.BuildBinary(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}

	pool, err := pgxpool.New(ctx, env.PG)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close) // after the cleanups below, which use it
	name := testenv.Name("capst")
	table, slot, prefix := "public."+name, name, name
	pgExec := func(sql string, args ...any) {
		t.Helper()
		if _, err := pool.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	pgExec(fmt.Sprintf("CREATE TABLE %s (tenant_id text NOT NULL, id bigint NOT NULL, note text, PRIMARY KEY (tenant_id, id))", table))
	// Cleanups run last-registered first: these run after the processes
	// below have stopped.
	t.Cleanup(func() {
		cctx := context.Background()
		if err := testenv.DropSlot(cctx, pool, slot); err != nil {
			t.Errorf("drop slot %s: %v", slot, err)
		}
		_, _ = pool.Exec(cctx, "DROP PUBLICATION IF EXISTS "+name)
		_, _ = pool.Exec(cctx, "DROP TABLE IF EXISTS "+table)
		if cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(env.Kafka, ",")...)); err == nil {
			_, _ = kadm.NewClient(cl).DeleteTopics(cctx, prefix+"."+table, prefix+"-state")
			cl.Close()
		}
	})
	pgExec(fmt.Sprintf("INSERT INTO %s SELECT 'acme', g, 'before' FROM generate_series(1, 100) g", table))

	metricsAddr := testenv.FreeAddr(t)
	testenv.Start(t, "capture", bin, "capture", "--pg", env.PG, "--kafka", env.Kafka,
		"--slot", slot, "--publication", name, "--tables", table, "--topic-prefix", prefix,
		"--partitions", "2", "--heartbeat-interval", "1s", "--status-interval", "1s", "--metrics-addr", metricsAddr)

	// The database for serve, and an API key file with an admin key.
	conn, err := clickhouse.Open(ctx, env.ClickHouse)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	db := testenv.Name("capst")
	if err := conn.Exec(ctx, "CREATE DATABASE "+schema.QuoteIdent(db)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+schema.QuoteIdent(db)) })
	keys, _ := json.Marshal([]Key{{ID: "ops", Hash: HashKey(keyAdmin), Scopes: []Scope{ScopeAdmin}}})
	keysFile := filepath.Join(t.TempDir(), "keys.json")
	if err := os.WriteFile(keysFile, keys, 0o600); err != nil {
		t.Fatal(err)
	}
	downAddr := testenv.FreeAddr(t) // nothing listens there
	listen := testenv.FreeAddr(t)
	testenv.Start(t, "serve", bin, "serve", "--listen", listen, "--keys", keysFile, "--cursor-secret", "0123456789abcdef0123",
		"--clickhouse", env.ClickHouse, "--database", db, "--pg", env.PG, "--slot", slot, "--kafka", "",
		"--capture-url", metricsAddr+", http://"+downAddr, "--capture-timeout", "1s")
	api := "http://" + listen
	get := func(ctx context.Context, path string) ([]byte, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, api+path, nil)
		req.Header.Set("Authorization", "Bearer "+keyAdmin)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err == nil && resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("GET %s: HTTP %d: %s", path, resp.StatusCode, body)
		}
		return body, err
	}
	up, down := "http://"+metricsAddr+"/status", "http://"+downAddr+"/status"

	// lagUntil polls /v1/lag until the running capture has produced at
	// least rows records and confirmed a position past after.
	lagUntil := func(rows int64, after LSN) LagReport {
		t.Helper()
		var rep LagReport
		err := testenv.Eventually(ctx, 90*time.Second, func(ctx context.Context) error {
			body, err := get(ctx, "/v1/lag")
			if err != nil {
				return err
			}
			rep = LagReport{}
			if err := json.Unmarshal(body, &rep); err != nil {
				return fmt.Errorf("decode %s: %w", body, err)
			}
			if rep.Pipeline == nil || len(rep.Pipeline.Captures) != 2 {
				return fmt.Errorf("want two captures in %s", body)
			}
			c := rep.Pipeline.Captures[0]
			if c.URL != up || !c.Up || c.Status == nil {
				return fmt.Errorf("capture %s not up yet: %+v", up, c)
			}
			if c.Status.Rows < rows || c.Status.ConfirmedLSN <= after {
				return fmt.Errorf("capture has produced %d records and confirmed %s, waiting for %d and past %s", c.Status.Rows, c.Status.ConfirmedLSN, rows, after)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	first := lagUntil(100, 0) // the snapshot
	var walText string
	if err := pool.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&walText); err != nil {
		t.Fatal(err)
	}
	walBefore, err := ParseLSN(walText)
	if err != nil {
		t.Fatal(err)
	}
	pgExec(fmt.Sprintf("INSERT INTO %s SELECT 'acme', g, repeat('x', 500) FROM generate_series(101, 2100) g", table))
	second := lagUntil(2100, walBefore)

	for i, rep := range []LagReport{first, second} {
		pl := rep.Pipeline
		c, d := pl.Captures[0], pl.Captures[1]
		if c.Status.Slot != slot || c.Status.PendingBytes < 0 || c.Status.SlotLagBytes < 0 || c.Status.Now.IsZero() {
			t.Errorf("report %d: capture status %+v", i+1, c.Status)
		}
		if pl.ProducerBacklogBytes == nil || *pl.ProducerBacklogBytes != c.Status.PendingBytes {
			t.Errorf("report %d: producer backlog %v, want the running capture's %d", i+1, pl.ProducerBacklogBytes, c.Status.PendingBytes)
		}
		if d.URL != down || d.Up || d.Status != nil || !strings.Contains(d.Error, "unreachable") {
			t.Errorf("report %d: the capture that is not running shows as %+v, want down and unreachable", i+1, d)
		}
		if !containsPrefix(pl.Errors, "capture "+down+": ") {
			t.Errorf("report %d: errors %q do not name the unreachable capture", i+1, pl.Errors)
		}
		if pl.Slot == nil || pl.Slot.Name != slot || !pl.Slot.Active {
			t.Errorf("report %d: slot %+v, want %s active", i+1, pl.Slot, slot)
		}
	}
	if st := second.Pipeline.Captures[0].Status; st.ReceivedLSN < st.ConfirmedLSN || st.LastEventAt == nil || st.LagSeconds == nil {
		t.Errorf("capture status while streaming: %+v", st)
	}
	t.Logf("capture status after 2,100 rows: %+v", *second.Pipeline.Captures[0].Status)

	metrics, err := get(ctx, "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`walhouse_capture_up{capture="` + up + `"} 1`,
		`walhouse_capture_up{capture="` + down + `"} 0`,
		`walhouse_producer_backlog_bytes{capture="` + up + `",slot="` + slot + `"} `,
		`walhouse_slot_lag_bytes{slot="` + slot + `"} `,
		`walhouse_slot_active{slot="` + slot + `"} 1`,
		`walhouse_slot_wal_status{slot="` + slot + `",wal_status="reserved"} 1`,
	} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

func containsPrefix(list []string, prefix string) bool {
	for _, s := range list {
		if strings.HasPrefix(s, prefix) {
			return true
		}
	}
	return false
}
