// Package writeapi is a small HTTP API that writes orders to PostgreSQL
// through Layer 1 (the idempotency package): the demo's client retries
// and the fault tests' "client HTTP retry of the same write" drive it. It
// is an example application, not a stage of walhouse.
//
// Orders live in a table with at least (tenant_id text, id bigint, customer
// text, amount numeric, status text), primary key (tenant_id, id). Routes,
// each under the Idempotency-Key header (required) and X-Tenant:
//
//	POST   /orders        {"id":1,"customer":"c","amount":"9.50","status":"new"} → 201 {"id":1,…}
//	PATCH  /orders/{id}   {"add":"4.99","status":"shipped"} → 200 the order (amount += add: not idempotent by itself)
//	DELETE /orders/{id}   → 200 the deleted order, 404 if there is none
package writeapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walhouse/walhouse/idempotency"
	"github.com/walhouse/walhouse/internal/backoff"
)

// TenantHeader names the request's tenant. A real application takes it
// from the caller's authentication instead.
const TenantHeader = "X-Tenant"

// Order is an order as the API reads and answers it.
type Order struct {
	ID       int64  `json:"id"`
	Customer string `json:"customer"`
	Amount   string `json:"amount"` // numeric, as text: no float rounding
	Status   string `json:"status"`
}

// Handler returns the API over table ("schema.table" or "table"), its
// writes made idempotent by store (an *idempotency.Keys).
func Handler(store idempotency.Store, table string) http.Handler {
	t := pgx.Identifier{table}.Sanitize()
	if s, n, ok := strings.Cut(table, "."); ok {
		t = pgx.Identifier{s, n}.Sanitize()
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /orders", func(w http.ResponseWriter, r *http.Request) {
		var o Order
		if err := json.NewDecoder(r.Body).Decode(&o); err != nil {
			http.Error(w, "body: "+err.Error(), http.StatusBadRequest)
			return
		}
		row := tx(r).QueryRow(r.Context(), `INSERT INTO `+t+` (tenant_id, id, customer, amount, status)
			VALUES (current_setting('`+idempotency.TenantSetting+`'), $1, $2, $3::numeric, $4)
			RETURNING id, customer, amount::text, status`, o.ID, o.Customer, o.Amount, o.Status)
		answer(w, http.StatusCreated, row)
	})
	mux.HandleFunc("PATCH /orders/{id}", func(w http.ResponseWriter, r *http.Request) {
		var p struct{ Add, Status string }
		if err := json.NewDecoder(r.Body).Decode(&p); err != nil {
			http.Error(w, "body: "+err.Error(), http.StatusBadRequest)
			return
		}
		row := tx(r).QueryRow(r.Context(), `UPDATE `+t+` SET amount = amount + coalesce(nullif($2, '')::numeric, 0), status = coalesce(nullif($3, ''), status)
			WHERE tenant_id = current_setting('`+idempotency.TenantSetting+`') AND id = $1
			RETURNING id, customer, amount::text, status`, r.PathValue("id"), p.Add, p.Status)
		answer(w, http.StatusOK, row)
	})
	mux.HandleFunc("DELETE /orders/{id}", func(w http.ResponseWriter, r *http.Request) {
		row := tx(r).QueryRow(r.Context(), `DELETE FROM `+t+` WHERE tenant_id = current_setting('`+idempotency.TenantSetting+`') AND id = $1
			RETURNING id, customer, amount::text, status`, r.PathValue("id"))
		answer(w, http.StatusOK, row)
	})
	return idempotency.Middleware(store, func(r *http.Request) (string, error) { return r.Header.Get(TenantHeader), nil }, idempotency.RequireKey())(mux)
}

func tx(r *http.Request) pgx.Tx { return idempotency.TxFromContext(r.Context()) }

// answer writes the order row as JSON with status, 404 when there is no row.
func answer(w http.ResponseWriter, status int, row pgx.Row) {
	var o Order
	err := row.Scan(&o.ID, &o.Customer, &o.Amount, &o.Status)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		http.Error(w, "no such order", http.StatusNotFound)
		return
	case err != nil:
		http.Error(w, err.Error(), http.StatusInternalServerError) // rolled back
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(o)
}

// LoseFirstResponses wraps h so that the first response to each
// idempotency key is lost on its way back: the request is served to the
// end (its transaction committed), then the connection is closed without
// a byte of the response, as when a network or a proxy fails. The client
// sees an error and retries with the same key.
func LoseFirstResponses(h http.Handler) http.Handler {
	var mu sync.Mutex
	seen := map[string]bool{}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get(idempotency.HeaderName)
		mu.Lock()
		first := key != "" && !seen[key]
		seen[key] = true
		mu.Unlock()
		if !first {
			h.ServeHTTP(w, r)
			return
		}
		h.ServeHTTP(&discard{header: http.Header{}}, r)
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				_ = conn.Close()
				return
			}
		}
		panic(http.ErrAbortHandler) // closes the connection too
	})
}

type discard struct{ header http.Header }

func (d *discard) Header() http.Header         { return d.header }
func (d *discard) Write(p []byte) (int, error) { return len(p), nil }
func (d *discard) WriteHeader(int)             {}

// Client calls the API.
type Client struct {
	BaseURL string
	HTTP    *http.Client // nil: a client without keep-alives
}

// Response is what one call got back.
type Response struct {
	Status   int
	Order    Order
	Body     []byte
	Replayed bool // Idempotency-Replayed: true
	// Token is the write's consistency token (Walhouse-Consistency-Token),
	// for a read that must include it; empty when none was sent.
	Token string
}

// Call sends one request with key and body (nil for none) for tenant.
func (c Client) Call(ctx context.Context, tenant string, key idempotency.Key, method, path string, body any) (Response, error) {
	var rd io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			return Response{}, err
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.BaseURL+path, rd)
	if err != nil {
		return Response{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(TenantHeader, tenant)
	req.Header.Set(idempotency.HeaderName, key.Header())
	hc := c.HTTP
	if hc == nil {
		hc = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	}
	resp, err := hc.Do(req)
	if err != nil {
		return Response{}, err
	}
	defer resp.Body.Close()
	out := Response{Status: resp.StatusCode, Replayed: resp.Header.Get(idempotency.ReplayedHeader) == "true", Token: resp.Header.Get(idempotency.TokenHeader)}
	if out.Body, err = io.ReadAll(resp.Body); err != nil {
		return out, err
	}
	if resp.StatusCode < 300 {
		if err := json.Unmarshal(out.Body, &out.Order); err != nil {
			return out, fmt.Errorf("%s %s: answer %s: %w", method, path, out.Body, err)
		}
	}
	return out, nil
}

// CallRetrying is Call repeated with the same key, with a growing pause,
// until a response other than 409 (in flight) arrives, at most attempts
// times: a lost response is an error, and retried. It returns the response
// and how many attempts it took.
func (c Client) CallRetrying(ctx context.Context, attempts int, tenant string, key idempotency.Key, method, path string, body any) (Response, int, error) {
	var err error
	for i := 1; i <= attempts; i++ {
		var resp Response
		if resp, err = c.Call(ctx, tenant, key, method, path, body); err == nil && resp.Status != http.StatusConflict {
			return resp, i, nil
		}
		if err == nil {
			err = errors.New("409: the first attempt is still in flight")
		}
		if serr := backoff.Sleep(ctx, backoff.Exponential(10*time.Millisecond, time.Second, i)); serr != nil {
			return Response{}, i, serr
		}
	}
	return Response{}, attempts, fmt.Errorf("%s %s: no response after %d attempts: %w", method, path, attempts, err)
}

// OrderPath is the path of order id.
func OrderPath(id int64) string { return "/orders/" + strconv.FormatInt(id, 10) }
