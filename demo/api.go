package demo

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"golang.org/x/sync/errgroup"

	"github.com/walhouse/walhouse/harness/writeapi"
	"github.com/walhouse/walhouse/idempotency"
	"github.com/walhouse/walhouse/kafka"
	"github.com/walhouse/walhouse/monitor"
	"github.com/walhouse/walhouse/query"
	"github.com/walhouse/walhouse/record"
	"github.com/walhouse/walhouse/schema"
)

// demoAPIRequest is what the demo's query API and write API are built from.
type demoAPIRequest struct {
	pool        *pgxpool.Pool // the demo's database
	ch          driver.Conn
	kafka       *kadm.Client
	name        string // slot, topic prefix and ClickHouse database
	group       string // the sink's consumer group
	listen      string // the query API's address
	writeListen string // the write API's address
}

// demoAPI is what `walhouse serve` would run for the demo, in process: the
// query API with its status page and example dashboard, and next to it
// the Layer 1 write API (harness/writeapi) the dashboard writes through,
// which allows the query API's origin (CORS).
type demoAPI struct {
	api               *query.Server
	ln, writeLn       net.Listener
	srv, writeSrv     *http.Server
	base, writeBase   string // http://host:port
	readKey, adminKey string // secrets: tenant_1's read key, an admin key
	table             string // demo_orders in ClickHouse
	database          string // the demo's PostgreSQL (and ClickHouse) database
	moved             []string
}

// newDemoAPI listens on both addresses (a free port instead of one that is
// taken) and builds the servers; run serves them.
func newDemoAPI(ctx context.Context, req demoAPIRequest) (*demoAPI, error) {
	a := &demoAPI{table: schema.TableName(record.Source{Schema: "public", Table: "demo_orders"}), database: req.name}
	var err error
	if a.readKey, err = query.NewSecret(); err != nil {
		return nil, err
	}
	if a.adminKey, err = query.NewSecret(); err != nil {
		return nil, err
	}
	raw, err := json.Marshal([]query.Key{
		{ID: "demo-read", Hash: query.HashKey(a.readKey), Tenant: demoTenant, Scopes: []query.Scope{query.ScopeRead}},
		{ID: "demo-admin", Hash: query.HashKey(a.adminKey), Scopes: []query.Scope{query.ScopeAdmin}},
	})
	if err != nil {
		return nil, err
	}
	keys, err := query.ParseKeys(raw)
	if err != nil {
		return nil, err
	}
	// Reads accept the tokens of the demo's database only (as serve's
	// --pg does).
	src, err := idempotency.ReadToken(ctx, req.pool)
	if err != nil {
		return nil, fmt.Errorf("read the demo database's identity for consistency tokens: %w", err)
	}
	src.LSN = 0
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return nil, fmt.Errorf("generate a cursor secret: %w", err)
	}
	probe := monitor.NewProbe(monitor.Config{PG: req.pool, Slot: req.name, Kafka: req.kafka, Group: req.group, Prefix: req.name, DLQTopic: kafka.DeadLetterTopic(req.name)})
	if a.api, err = query.NewServer(query.Config{
		Pipeline: probe, Conn: req.ch, Database: req.name, Keys: keys, CursorSecret: secret,
		TokenSource: src, Logger: slog.Default(),
		// The API starts before the sink creates the demo's tables: a
		// catalog kept for serve's 10 s would answer unknown_table for a
		// while after they appear.
		CatalogTTL: time.Second,
	}); err != nil {
		return nil, err
	}
	if a.ln, err = a.listen(req.listen, "--listen"); err != nil {
		return nil, err
	}
	if a.writeLn, err = a.listen(req.writeListen, "--write-listen"); err != nil {
		a.ln.Close()
		return nil, err
	}
	a.base, a.writeBase = "http://"+a.ln.Addr().String(), "http://"+a.writeLn.Addr().String()
	// The dashboard's page comes from the query API's origin; a browser
	// may name it localhost as well.
	origins := []string{a.base}
	if _, port, err := net.SplitHostPort(a.ln.Addr().String()); err == nil {
		origins = append(origins, "http://localhost:"+port)
	}
	write, err := writeapi.AllowOrigins(origins, writeapi.Handler(idempotency.New(req.pool), "demo_orders"))
	if err != nil {
		a.close()
		return nil, err
	}
	a.srv = a.api.HTTPServer()
	a.writeSrv = &http.Server{Handler: write, ReadHeaderTimeout: 5 * time.Second, ErrorLog: log.New(io.Discard, "", 0)}
	return a, nil
}

// listen listens on addr, or on a free port of its host when addr's port
// is taken (a second demo, or a serve of one's own on 8080).
func (a *demoAPI) listen(addr, flagName string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err == nil {
		return ln, nil
	}
	if !errors.Is(err, syscall.EADDRINUSE) {
		return nil, fmt.Errorf("listen on %s: %w; pass another %s", addr, err, flagName)
	}
	host, _, _ := net.SplitHostPort(addr)
	if ln, err = net.Listen("tcp", net.JoinHostPort(host, "0")); err != nil {
		return nil, fmt.Errorf("listen on %s (taken) or another port of %s: %w; pass another %s", addr, host, err, flagName)
	}
	a.moved = append(a.moved, fmt.Sprintf("%s is taken: %s listens on %s instead", addr, flagName, ln.Addr()))
	return ln, nil
}

// run serves both APIs and the query API's lag history until ctx ends.
func (a *demoAPI) run(ctx context.Context) error {
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return a.api.Run(gctx) })
	for _, s := range []struct {
		srv *http.Server
		ln  net.Listener
	}{{a.srv, a.ln}, {a.writeSrv, a.writeLn}} {
		g.Go(func() error {
			if err := s.srv.Serve(s.ln); !errors.Is(err, http.ErrServerClosed) {
				return fmt.Errorf("demo: serve HTTP on %s: %w", s.ln.Addr(), err)
			}
			return nil
		})
	}
	g.Go(func() error {
		<-gctx.Done()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		return errors.Join(a.srv.Shutdown(sctx), a.writeSrv.Shutdown(sctx))
	})
	return g.Wait()
}

// close releases the listeners when run never ran.
func (a *demoAPI) close() {
	for _, ln := range []net.Listener{a.ln, a.writeLn} {
		if ln != nil {
			_ = ln.Close()
		}
	}
}

// demoAnswer is the part of a read's response the demo prints.
type demoAnswer struct {
	Data []map[string]any `json:"data"`
	Meta struct {
		LastSyncAt *time.Time `json:"lastSyncAt"`
		LSN        *string    `json:"lsn"`
		Fresh      *bool      `json:"fresh"`
	} `json:"meta"`
	Error *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// read posts body to the demo table's query route with the read key (and
// the consistency token, when there is one).
func (a *demoAPI) read(ctx context.Context, body, token string) (demoAnswer, error) {
	var ans demoAnswer
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.base+"/v1/tables/"+a.table+"/query", strings.NewReader(body))
	if err != nil {
		return ans, err
	}
	req.Header.Set("Authorization", "Bearer "+a.readKey)
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set(query.TokenHeader, token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return ans, fmt.Errorf("the demo's query API: %w", err)
	}
	defer resp.Body.Close()
	dec := json.NewDecoder(resp.Body)
	dec.UseNumber()
	if err := dec.Decode(&ans); err != nil {
		return ans, fmt.Errorf("the demo's query API answered %s: %w", resp.Status, err)
	}
	if resp.StatusCode != http.StatusOK {
		if ans.Error != nil {
			return ans, fmt.Errorf("the demo's query API answered %s: %s (%s)", resp.Status, ans.Error.Message, ans.Error.Code)
		}
		return ans, fmt.Errorf("the demo's query API answered %s", resp.Status)
	}
	return ans, nil
}

// demoDashboardQuery is a dashboard's query: the tenant's orders and
// revenue per status. The tenant comes from the key, never the body.
const demoDashboardQuery = `{"groupBy": ["status"],
 "aggregates": [{"fn": "count", "as": "orders"}, {"fn": "sum", "column": "amount", "as": "revenue"}],
 "orderBy": [{"column": "status"}]}`

// dashboardRead reads demoDashboardQuery through the query API and prints
// its rows and how fresh they are.
func (a *demoAPI) dashboardRead(ctx context.Context, out io.Writer) error {
	fmt.Fprintf(out, "\n==> a dashboard's read through the query API (walhouse serve, in this process)\n\n")
	fmt.Fprintf(out, "POST %s/v1/tables/%s/query   (Authorization: Bearer <%s's read key>)\n%s\n\n", a.base, a.table, demoTenant, demoDashboardQuery)
	ans, err := a.read(ctx, demoDashboardQuery, "")
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "status\torders\trevenue\t")
	for _, r := range ans.Data {
		fmt.Fprintf(tw, "%v\t%v\t%v\t\n", r["status"], r["orders"], r["revenue"])
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if ans.Meta.LastSyncAt == nil {
		fmt.Fprintln(out, "\nmeta.lastSyncAt: null (the sink has recorded no progress yet)")
		return nil
	}
	fmt.Fprintf(out, "\nmeta.lastSyncAt: %s, %s ago: every change committed in PostgreSQL by then is in this answer\n"+
		"(a dashboard shows it as \"Data as of %s\")\n",
		ans.Meta.LastSyncAt.UTC().Format(time.RFC3339Nano), time.Since(*ans.Meta.LastSyncAt).Round(time.Millisecond), ans.Meta.LastSyncAt.Local().Format(time.TimeOnly))
	return nil
}

// tokenRead writes order through the write API (Layer 1), then reads it
// back with the write's consistency token and prints how long that read
// waited for the pipeline.
func (a *demoAPI) tokenRead(ctx context.Context, out io.Writer, order writeapi.Order) error {
	fmt.Fprintf(out, "\n==> read your own write: an order through Layer 1, then a read with its consistency token\n")
	c := writeapi.Client{BaseURL: a.writeBase}
	resp, err := c.Call(ctx, demoTenant, idempotency.NewKey(), http.MethodPost, "/orders", order)
	if err != nil {
		return fmt.Errorf("write an order through the demo's write API: %w", err)
	}
	committed := time.Now() // the answer comes after the commit
	if resp.Status != http.StatusCreated || resp.Token == "" {
		return fmt.Errorf("the demo's write API answered %d %s with token %q, want 201 and a %s header", resp.Status, bytes.TrimSpace(resp.Body), resp.Token, idempotency.TokenHeader)
	}
	fmt.Fprintf(out, "    POST %s/orders (order %d of %s): %d %s, %s: %s\n", a.writeBase, order.ID, demoTenant, resp.Status, http.StatusText(resp.Status), idempotency.TokenHeader, resp.Token)
	body := fmt.Sprintf(`{"columns": ["id", "status", "amount"], "filters": [{"column": "id", "op": "=", "value": %d}], "consistencyTokens": [%q], "wait": "10s"}`, order.ID, resp.Token)
	ans, err := a.read(ctx, body, "")
	if err != nil {
		return err
	}
	waited := time.Since(committed)
	found := slices.ContainsFunc(ans.Data, func(r map[string]any) bool { return fmt.Sprint(r["id"]) == fmt.Sprint(order.ID) })
	fresh := ans.Meta.Fresh != nil && *ans.Meta.Fresh
	fmt.Fprintf(out, "    POST %s/v1/tables/%s/query with the token: answered %s after the write's commit, meta.fresh %v, the order %s\n",
		a.base, a.table, waited.Round(time.Millisecond), fresh, map[bool]string{true: "in its rows", false: "NOT in its rows"}[found])
	if !fresh || !found {
		return fmt.Errorf("the read with the write's consistency token did not include the write (fresh %v, found %v): the pipeline did not load it within the 10 s wait", fresh, found)
	}
	fmt.Fprintln(out, "    The server held the read until ClickHouse had loaded the table through the write: never an answer without it.")
	return nil
}

// printDemoLinks prints where to look next: the status page, the example
// dashboard (with the keys in the URLs' fragments, which never reach a
// server) and how the demo ends.
func printDemoLinks(out io.Writer, a *demoAPI, keep bool) {
	fmt.Fprintf(out, "\n==> look around\n")
	for _, m := range a.moved {
		fmt.Fprintf(out, "    (%s)\n", m)
	}
	fmt.Fprintf(out, "    status page (an admin key):           %s/status#key=%s\n", a.base, a.adminKey)
	fmt.Fprintf(out, "    example dashboard (%s's key):   %s/examples/orders?write=%s&tenant=%s#key=%s\n", demoTenant, a.base, a.writeBase, demoTenant, a.readKey)
	fmt.Fprintf(out, "    query API (OpenAPI at /openapi.json): %s\n", a.base)
	fmt.Fprintf(out, "    write API (POST /orders, Layer 1):    %s\n", a.writeBase)
	if keep {
		fmt.Fprintf(out, "\nThe pipeline, the query API and the write API keep running: write an order from the dashboard and watch it\nappear, or change demo_orders in PostgreSQL database %s. Ctrl-C stops the demo.\n", a.database)
		return
	}
	fmt.Fprintf(out, "\nThey stop with the demo, now: `make demo KEEP=1` (walhouse demo --keep) keeps everything running until Ctrl-C.\n")
}
