package writeapi_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/walhouse/walhouse/harness/testenv"
	"github.com/walhouse/walhouse/harness/writeapi"
	"github.com/walhouse/walhouse/idempotency"
)

// TestIntegrationLostResponsesAreRetried sends a create, a non-idempotent
// update and a delete over HTTP, each of whose first response is lost
// after its transaction committed: the client's retry with the same key
// gets the first response replayed, and the table holds exactly one run
// of each write.
func TestIntegrationLostResponsesAreRetried(t *testing.T) {
	env := testenv.Require(t, "pg")
	ctx := context.Background()
	pool := testenv.Layer1PG(t, env.PG)
	table := testenv.Name("orders")
	if _, err := pool.Exec(ctx, `CREATE TABLE `+table+` (tenant_id text, id bigint, customer text NOT NULL, amount numeric(12,2) NOT NULL, status text NOT NULL, PRIMARY KEY (tenant_id, id))`); err != nil {
		t.Fatal(err)
	}
	defer pool.Exec(ctx, `DROP TABLE `+table)
	srv := httptest.NewServer(writeapi.LoseFirstResponses(writeapi.Handler(idempotency.New(pool), table)))
	defer srv.Close()
	c := writeapi.Client{BaseURL: srv.URL}
	tenant := testenv.Name("t")
	for _, step := range []struct {
		method, path string
		body         any
		status       int
		want         writeapi.Order
	}{
		{"POST", "/orders", writeapi.Order{ID: 1, Customer: "c1", Amount: "10.00", Status: "new"}, 201, writeapi.Order{ID: 1, Customer: "c1", Amount: "10.00", Status: "new"}},
		{"POST", "/orders", writeapi.Order{ID: 2, Customer: "c2", Amount: "20.00", Status: "new"}, 201, writeapi.Order{ID: 2, Customer: "c2", Amount: "20.00", Status: "new"}},
		{"PATCH", writeapi.OrderPath(1), map[string]string{"add": "4.99", "status": "shipped"}, 200, writeapi.Order{ID: 1, Customer: "c1", Amount: "14.99", Status: "shipped"}},
		{"DELETE", writeapi.OrderPath(2), nil, 200, writeapi.Order{ID: 2, Customer: "c2", Amount: "20.00", Status: "new"}},
	} {
		resp, attempts, err := c.CallRetrying(ctx, 5, tenant, idempotency.NewKey(), step.method, step.path, step.body)
		if err != nil {
			t.Fatal(err)
		}
		if attempts != 2 || !resp.Replayed || resp.Status != step.status || resp.Order != step.want {
			t.Errorf("%s %s: %d attempts, replayed %v, %d %+v; want 2 attempts, the first response %d %+v replayed", step.method, step.path, attempts, resp.Replayed, resp.Status, resp.Order, step.status, step.want)
		}
	}
	rows, err := pool.Query(ctx, `SELECT id || ':' || customer || ':' || amount || ':' || status FROM `+table+` WHERE tenant_id = $1 ORDER BY id`, tenant)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"1:c1:14.99:shipped"}; !slices.Equal(got, want) {
		t.Errorf("orders %q, want %q", got, want)
	}
	// Without a key the API refuses: 400, problem+json.
	req, _ := http.NewRequest("POST", srv.URL+"/orders", nil)
	req.Header.Set(writeapi.TenantHeader, tenant)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 400 || resp.Header.Get("Content-Type") != "application/problem+json" {
		t.Errorf("no key: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
}
