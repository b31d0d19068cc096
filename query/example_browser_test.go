package query

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walhouse/walhouse/clickhouse"
	"github.com/walhouse/walhouse/harness/testenv"
	"github.com/walhouse/walhouse/harness/writeapi"
	"github.com/walhouse/walhouse/idempotency"
	"github.com/walhouse/walhouse/record"
	"github.com/walhouse/walhouse/schema"
)

// exampleState is what the example dashboard shows, read from its DOM.
type exampleState struct {
	Err     string         `json:"err"`
	AsOf    string         `json:"asOf"`
	Seq     string         `json:"seq"`
	State   string         `json:"state"`
	ID      string         `json:"id"`
	Written string         `json:"written"`
	Counts  map[string]int `json:"counts"` // status → orders over the days shown
	Bars    int            `json:"bars"`
	Href    string         `json:"href"`
}

const readExampleJS = `JSON.stringify({
  err: document.getElementById("err").textContent,
  asOf: document.getElementById("asof").textContent,
  seq: document.getElementById("asof").dataset.seq || "",
  state: document.getElementById("written").dataset.state || "",
  id: document.getElementById("written").dataset.id || "",
  written: document.getElementById("written").textContent,
  counts: [...document.querySelectorAll("#counts td[data-status]")].reduce((m, td) => {
    m[td.dataset.status] = (m[td.dataset.status] || 0) + Number(td.textContent); return m; }, {}),
  bars: document.querySelectorAll("#chart rect").length,
  href: location.href,
})`

// exampleState polls the example page's DOM until check accepts it.
func (p *page) exampleState(ctx context.Context, check func(exampleState) error) (exampleState, error) {
	var s exampleState
	err := testenv.Eventually(ctx, 30*time.Second, func(ctx context.Context) error {
		var text string
		if err := p.eval(ctx, readExampleJS, &text); err != nil {
			return err
		}
		s = exampleState{}
		if err := json.Unmarshal([]byte(text), &s); err != nil {
			return fmt.Errorf("decode the page state %q: %w", text, err)
		}
		return check(s)
	})
	return s, err
}

// TestIntegrationExampleDashboard runs a real pipeline (capture and sink
// on PostgreSQL, Kafka and ClickHouse), the query API with the example
// dashboard, and the Layer 1 write API on another origin (CORS). In
// headless Chromium it opens /examples/orders with a read key in its
// fragment and writes 20 orders through the page's form while another
// tenant writes to the same table every few milliseconds: each order is in
// the chart the page draws from its first read after the write (the one
// with the write's consistency token), every time. Capture's heartbeats
// are a minute apart: a read is made fresh by its write's consistency
// mark or by the load's later writes, never by waiting for a heartbeat.
func TestIntegrationExampleDashboard(t *testing.T) {
	bin := requireChromium(t)
	env := testenv.Require(t, "pg", "kafka", "clickhouse")
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	walhouse, err := testenv.BuildBinary(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	pool := testenv.Layer1PG(t, env.PG)
	name := testenv.Name("exorders")
	slot, pub, prefix, group, db := name, name, name, name, name
	quoted := pgx.Identifier{name}.Sanitize()
	pgExec := func(sql string, args ...any) {
		t.Helper()
		if _, err := pool.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	pgExec(`CREATE TABLE ` + quoted + ` (tenant_id text NOT NULL, id bigint NOT NULL, customer text NOT NULL,
		amount numeric(12,2) NOT NULL, status text NOT NULL, created_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (tenant_id, id))`)
	conn, err := clickhouse.Open(ctx, env.ClickHouse)
	if err != nil {
		t.Fatal(err)
	}
	// Cleanups run last-registered first: these run after the processes
	// below have stopped.
	t.Cleanup(func() {
		cctx := context.Background()
		if err := testenv.DropSlot(cctx, pool, slot); err != nil {
			t.Errorf("drop slot %s: %v", slot, err)
		}
		_, _ = pool.Exec(cctx, "DROP PUBLICATION IF EXISTS "+pgx.Identifier{pub}.Sanitize())
		_, _ = pool.Exec(cctx, "DROP TABLE IF EXISTS "+quoted)
		if cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(env.Kafka, ",")...)); err == nil {
			_ = testenv.DeleteTopicsWithPrefix(cctx, kadm.NewClient(cl), prefix)
			cl.Close()
		}
		_ = conn.Exec(cctx, "DROP DATABASE IF EXISTS "+schema.QuoteIdent(db))
		conn.Close()
	})
	capture := testenv.Start(t, "capture", walhouse, "capture", "--pg", env.PG, "--kafka", env.Kafka,
		"--slot", slot, "--publication", pub, "--tables", "public."+name, "--topic-prefix", prefix,
		"--partitions", "3", "--status-interval", "1s", "--heartbeat-interval", "60s")
	sink := testenv.Start(t, "sink", walhouse, "sink", "--kafka", env.Kafka, "--clickhouse", env.ClickHouse,
		"--database", db, "--group", group, "--topic-prefix", prefix)
	running := func() error {
		for _, p := range []*testenv.Proc{capture, sink} {
			if done, err := p.Exited(); done {
				return fmt.Errorf("%s exited (%v):\n%s", p.Name, err, p.Output())
			}
		}
		return nil
	}

	// The query API, and the write API on another origin that allows it.
	const tenant = "acme"
	secret, err := NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal([]Key{{ID: "dash", Hash: HashKey(secret), Tenant: tenant, Scopes: []Scope{ScopeRead}}})
	keys, err := ParseKeys(raw)
	if err != nil {
		t.Fatal(err)
	}
	source, err := idempotency.ReadToken(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	source.LSN = 0
	api, err := NewServer(Config{Conn: conn, Database: db, Keys: keys, CursorSecret: []byte("example-test-cursor-secret"), TokenSource: source})
	if err != nil {
		t.Fatal(err)
	}
	apiSrv := httptest.NewServer(api)
	t.Cleanup(apiSrv.Close)
	writes, err := writeapi.AllowOrigins([]string{apiSrv.URL}, writeapi.Handler(idempotency.New(pool), name))
	if err != nil {
		t.Fatal(err)
	}
	writeSrv := httptest.NewServer(writes)
	t.Cleanup(writeSrv.Close)

	// A first order of the tenant, so that the table exists in ClickHouse
	// before the page opens; then wait for it to be loaded.
	pgExec(`INSERT INTO `+quoted+` (tenant_id, id, customer, amount, status) VALUES ($1, 1, 'c0', 1, 'new')`, tenant)
	chTable := schema.TableName(record.Source{Schema: "public", Table: name})
	err = testenv.Eventually(ctx, 2*time.Minute, func(ctx context.Context) error {
		if err := running(); err != nil {
			return err
		}
		var n uint64
		if err := conn.QueryRow(ctx, "SELECT count() FROM "+schema.QuoteIdent(db)+"."+schema.QuoteIdent(chTable)+" FINAL WHERE tenant_id = 'acme'").Scan(&n); err != nil || n != 1 {
			return fmt.Errorf("the first order is not loaded yet: %d rows, %v", n, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	// Another tenant writes to the same table all along: the WAL moves on
	// between each write and its token, and the sink stays busy.
	loadCtx, stopLoad := context.WithCancel(ctx)
	loadDone := make(chan struct{})
	go func() {
		defer close(loadDone)
		for k := 0; loadCtx.Err() == nil; k++ {
			_, _ = pool.Exec(loadCtx, `INSERT INTO `+quoted+` (tenant_id, id, customer, amount, status) VALUES ('globex', $1, 'g', 2, 'paid')
				ON CONFLICT (tenant_id, id) DO UPDATE SET amount = `+quoted+`.amount + 1`, k%500)
			time.Sleep(5 * time.Millisecond)
		}
	}()
	defer func() { stopLoad(); <-loadDone }()

	b := startBrowser(ctx, t, bin)
	pageURL := apiSrv.URL + "/examples/orders?" + url.Values{"table": {chTable}, "write": {writeSrv.URL}, "tenant": {tenant}}.Encode() + "#key=" + url.QueryEscape(secret)
	pg, err := b.open(ctx, pageURL)
	if err != nil {
		t.Fatal(err)
	}
	asOf := regexp.MustCompile(`^Data as of \d\d:\d\d:\d\d$`)
	want := map[string]int{"new": 1}
	first, err := pg.exampleState(ctx, func(s exampleState) error {
		if s.Err != "" {
			return fmt.Errorf("the page shows the error %q", s.Err)
		}
		if !asOf.MatchString(s.AsOf) || fmt.Sprint(s.Counts) != fmt.Sprint(want) {
			return fmt.Errorf("the page shows %q and counts %v, want the time and %v", s.AsOf, s.Counts, want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(first.Href, "#") || strings.Contains(first.Href, secret) {
		t.Errorf("the address bar still holds the key: %s", first.Href)
	}

	statuses := []string{"new", "paid", "shipped"}
	var waits []string
	for i := range 20 {
		if err := running(); err != nil {
			t.Fatal(err)
		}
		status := statuses[i%len(statuses)]
		lit, _ := json.Marshal(status)
		var before string
		if err := pg.eval(ctx, `(() => {
  const id = document.getElementById("written").dataset.id || "";
  document.getElementById("status").value = `+string(lit)+`;
  document.querySelector("#order button[type=submit]").click();
  return id;
})()`, &before); err != nil {
			t.Fatal(err)
		}
		want[status]++
		s, err := pg.exampleState(ctx, func(s exampleState) error {
			if s.ID == before || s.State == "writing" {
				return fmt.Errorf("write %d not done yet: %q", i+1, s.Written)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		// The chart now is the one drawn from the read with the token:
		// the page reads nothing else after a write.
		if s.State != "shown" || fmt.Sprint(s.Counts) != fmt.Sprint(want) {
			t.Fatalf("write %d (%s): the page says %q (%s) and shows %v; want it shown with %v", i+1, status, s.Written, s.State, s.Counts, want)
		}
		if !asOf.MatchString(s.AsOf) || s.Err != "" || s.Bars == 0 {
			t.Errorf("write %d: %q, error %q, %d bars", i+1, s.AsOf, s.Err, s.Bars)
		}
		waits = append(waits, s.Written[strings.LastIndex(s.Written, " in ")+4:])
	}
	t.Logf("20 orders, each in the chart of the first read after its write; token reads took %s", strings.Join(waits, ", "))
	if shot, err := pg.screenshot(ctx); err == nil {
		path := filepath.Join(shotDir(t), "example-orders.png")
		t.Logf("screenshot %s (%v)", path, os.WriteFile(path, shot, 0o644))
	}

	// A write API that does not allow serve's origin: the browser sends no
	// write, and the page says why it may have failed.
	closed := httptest.NewServer(writeapi.Handler(idempotency.New(pool), name))
	t.Cleanup(closed.Close)
	other, err := b.open(ctx, apiSrv.URL+"/examples/orders?"+url.Values{"table": {chTable}, "write": {closed.URL}, "tenant": {tenant}}.Encode()+"#key="+url.QueryEscape(secret))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.exampleState(ctx, func(s exampleState) error {
		if s.Seq == "" {
			return fmt.Errorf("no read yet (error %q)", s.Err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := other.eval(ctx, `document.querySelector("#order button[type=submit]").click()`, nil); err != nil {
		t.Fatal(err)
	}
	s, err := other.exampleState(ctx, func(s exampleState) error {
		if s.State != "failed" {
			return fmt.Errorf("the write has not failed: %s %q", s.State, s.Written)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(s.Written, "does it allow this page's origin?") {
		t.Errorf("the page says %q after a write the write API's CORS refused", s.Written)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+quoted+` WHERE tenant_id = $1`, tenant).Scan(&n); err != nil || n != 21 {
		t.Errorf("%s has %d orders (%v), want the 21 written before", tenant, n, err)
	}

	// The write API refuses a preflight from any other origin.
	req, _ := http.NewRequestWithContext(ctx, http.MethodOptions, writeSrv.URL+"/orders", nil)
	req.Header.Set("Origin", "http://elsewhere.example")
	req.Header.Set("Access-Control-Request-Method", "POST")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || resp.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("a preflight from another origin: %d %v", resp.StatusCode, resp.Header)
	}
}
