package query

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/walhouse/walhouse/erasure"
)

// fakeEraser records the requests it gets and refuses them with err, or
// begins them: their runs block until release is closed (when set) and
// report on ran the context they ran with.
type fakeEraser struct {
	mu      sync.Mutex
	got     []erasure.Request
	err     error
	release chan struct{}
	ran     chan runSeen
	// untilCut makes a run wait for its context to end.
	untilCut bool
}

// runSeen is what a fakeEraser's run saw of its context while it ran.
type runSeen struct {
	err      error
	deadline bool
}

func (f *fakeEraser) Begin(_ context.Context, req erasure.Request) (string, func(context.Context) (erasure.Manifest, error), error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.got = append(f.got, req)
	if f.err != nil {
		return "", nil, f.err
	}
	id := fmt.Sprintf("era_%d", len(f.got))
	return id, func(ctx context.Context) (erasure.Manifest, error) {
		if f.release != nil {
			<-f.release
		}
		if f.untilCut {
			<-ctx.Done()
		}
		if f.ran != nil {
			_, ok := ctx.Deadline()
			f.ran <- runSeen{err: ctx.Err(), deadline: ok}
		}
		return erasure.Manifest{ID: id, Tenant: req.Tenant, Verified: true, Signature: "sig"}, nil
	}, nil
}

func (f *fakeEraser) Status(_ context.Context, tenant, id string) (erasure.Status, error) {
	if tenant != "acme" || id != "era_1" {
		return erasure.Status{}, erasure.ErrNoErasure
	}
	return erasure.Status{ID: id, State: erasure.StateFailed, Error: "code: 241, DB::Exception: Memory limit exceeded in globex_invoices"}, nil
}

func TestErasureEndpoint(t *testing.T) {
	const keyErase, keyReadExport = "wh_erase_acme", "wh_read_export_acme"
	b, _ := json.Marshal([]Key{
		{ID: "acme-erase", Hash: HashKey(keyErase), Tenant: "acme", Scopes: []Scope{ScopeErase}},
		{ID: "acme-rx", Hash: HashKey(keyReadExport), Tenant: "acme", Scopes: []Scope{ScopeRead, ScopeExport}},
		{ID: "ops", Hash: HashKey(keyAdmin), Scopes: []Scope{ScopeAdmin}},
	})
	keys, err := ParseKeys(b)
	if err != nil {
		t.Fatal(err)
	}
	serve := func(e Eraser) *httptest.Server {
		s, err := NewServer(Config{Conn: failingConn{err: errConnRefused}, Database: "walhouse", Keys: keys, CursorSecret: []byte("0123456789abcdef"), Eraser: e})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(s)
		t.Cleanup(srv.Close)
		return srv
	}
	fake := &fakeEraser{}
	srv := serve(fake)
	body := `{"subject": {"column": "customer_id", "value": 12345678901234567890}}`
	for _, tc := range []struct {
		name, key, body string
		status          int
		code            string
	}{
		{"read and export scopes", keyReadExport, body, 403, "forbidden"},
		{"admin scope", keyAdmin, body, 403, "forbidden"},
		{"no key", "", body, 401, "unauthenticated"},
		{"another tenant in the body", keyErase, `{"tenant": "globex", "subject": {"column": "customer_id", "value": 1}}`, 400, "bad_request"},
		{"no value", keyErase, `{"subject": {"column": "customer_id"}}`, 400, "bad_request"},
	} {
		resp, out := do(t, srv, "POST", "/v1/erasures", tc.key, tc.body)
		if e, _ := out["error"].(map[string]any); resp.StatusCode != tc.status || e["code"] != tc.code {
			t.Errorf("%s: %d %v, want %d %s", tc.name, resp.StatusCode, out, tc.status, tc.code)
		}
	}
	if len(fake.got) != 0 {
		t.Fatalf("refused requests reached the eraser: %+v", fake.got)
	}
	resp, out := do(t, srv, "POST", "/v1/erasures", keyErase, body)
	if resp.StatusCode != 202 || out["id"] != "era_1" || resp.Header.Get("Location") != "/v1/erasures/era_1" {
		t.Fatalf("erase: %d %v, want 202 with the id", resp.StatusCode, out)
	}
	if want := (erasure.Request{Tenant: "acme", Column: "customer_id", Value: "12345678901234567890", RequestedBy: "acme-erase"}); len(fake.got) != 1 ||
		fake.got[0].Tenant != want.Tenant || fake.got[0].Value != want.Value || fake.got[0].Column != want.Column || fake.got[0].RequestedBy != want.RequestedBy {
		t.Errorf("the eraser got %+v, want %+v (the tenant of the key, the number as written)", fake.got, want)
	}

	still := serve(&fakeEraser{err: &erasure.StillInSourceError{Rows: map[string]int64{`"public"."orders"`: 3}}})
	if resp, out := do(t, still, "POST", "/v1/erasures", keyErase, body); resp.StatusCode != 409 {
		t.Errorf("subject still in PostgreSQL: %d %v, want 409", resp.StatusCode, out)
	}
	short := serve(&fakeEraser{err: &erasure.SettleTooShortError{Settle: 15 * time.Second, Reader: "g@host/1", MaxAge: 20 * time.Second}})
	if resp, out := do(t, short, "POST", "/v1/erasures", keyErase, body); resp.StatusCode != 503 || !strings.Contains(fmt.Sprint(out), "settle_too_short") {
		t.Errorf("settle time below a sink's ledger bound: %d %v, want 503 settle_too_short", resp.StatusCode, out)
	}
	// A refusal's detail (another table, its column types) stays in the
	// log: the answer says only what the caller named.
	bad := serve(&fakeEraser{err: &erasure.RequestError{Msg: "the subject value is not a value of the type of column \"customer_id\"", Detail: `"public"."globex_invoices".customer_id is bigint`}})
	if resp, out := do(t, bad, "POST", "/v1/erasures", keyErase, body); resp.StatusCode != 400 || strings.Contains(fmt.Sprint(out), "globex") || strings.Contains(fmt.Sprint(out), "bigint") {
		t.Errorf("a refused value: %d %v, want 400 naming no table or type", resp.StatusCode, out)
	}
	rated := serve(&fakeEraser{err: &erasure.RateError{Max: 10}})
	if resp, out := do(t, rated, "POST", "/v1/erasures", keyErase, body); resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" {
		t.Errorf("past the tenant's erasures per minute: %d %v, want 429 with Retry-After", resp.StatusCode, out)
	}
	none := serve(nil)
	if resp, out := do(t, none, "POST", "/v1/erasures", keyErase, body); resp.StatusCode != 503 {
		t.Errorf("no eraser: %d %v, want 503", resp.StatusCode, out)
	}
}

// An erasure runs detached: the answer is 202 with its id before it ends,
// its run keeps going when the client is gone, a second one of the tenant
// waits for the first (429), and GET /v1/erasures/{id} answers for the
// tenant's erasures only, without the server's error text.
func TestErasureRunsDetached(t *testing.T) {
	const keyErase, keyGlobex = "wh_erase_acme", "wh_erase_globex"
	b, _ := json.Marshal([]Key{
		{ID: "acme-erase", Hash: HashKey(keyErase), Tenant: "acme", Scopes: []Scope{ScopeErase}},
		{ID: "globex-erase", Hash: HashKey(keyGlobex), Tenant: "globex", Scopes: []Scope{ScopeErase}},
	})
	keys, err := ParseKeys(b)
	if err != nil {
		t.Fatal(err)
	}
	fake := &fakeEraser{release: make(chan struct{}), ran: make(chan runSeen, 2)}
	s, err := NewServer(Config{Conn: failingConn{err: errConnRefused}, Database: "walhouse", Keys: keys, CursorSecret: []byte("0123456789abcdef"), Eraser: fake})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s)
	defer srv.Close()
	body := `{"subject": {"column": "customer_id", "value": 42}}`
	if resp, out := do(t, srv, "POST", "/v1/erasures", keyErase, body); resp.StatusCode != 202 || out["id"] != "era_1" || out["state"] != "started" {
		t.Fatalf("erase: %d %v, want 202 while it runs", resp.StatusCode, out)
	}
	if resp, out := do(t, srv, "POST", "/v1/erasures", keyErase, body); resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" {
		t.Errorf("a second erasure of the tenant while one runs: %d %v, want 429 with Retry-After", resp.StatusCode, out)
	}
	if resp, out := do(t, srv, "POST", "/v1/erasures", keyGlobex, body); resp.StatusCode != 202 {
		t.Errorf("another tenant's erasure meanwhile: %d %v, want 202", resp.StatusCode, out)
	}
	close(fake.release) // the requests are long answered
	for range 2 {
		select {
		case seen := <-fake.ran:
			if seen.err != nil {
				t.Errorf("the run's context ended with its request: %v", seen.err)
			}
			if !seen.deadline {
				t.Error("the run has no deadline of its own")
			}
		case <-time.After(time.Minute):
			t.Fatal("the erasure never ran")
		}
	}
	resp, out := do(t, srv, "GET", "/v1/erasures/era_1", keyErase, "")
	if resp.StatusCode != 200 || out["state"] != "failed" || strings.Contains(fmt.Sprint(out), "globex") || strings.Contains(fmt.Sprint(out), "DB::Exception") {
		t.Errorf("status of a failed erasure: %d %v, want 200 failed without the server's error text", resp.StatusCode, out)
	}
	if resp, out := do(t, srv, "GET", "/v1/erasures/era_1", keyGlobex, ""); resp.StatusCode != 404 {
		t.Errorf("another tenant's erasure: %d %v, want 404", resp.StatusCode, out)
	}
}

// When the server stops, an erasure still running is cut short once the
// wait's context ends, and WaitErasures returns only after its run has
// ended (it records its failure then).
func TestErasureCutShortAtShutdown(t *testing.T) {
	const keyErase = "wh_erase_acme"
	b, _ := json.Marshal([]Key{{ID: "acme-erase", Hash: HashKey(keyErase), Tenant: "acme", Scopes: []Scope{ScopeErase}}})
	keys, err := ParseKeys(b)
	if err != nil {
		t.Fatal(err)
	}
	fake := &fakeEraser{untilCut: true, ran: make(chan runSeen, 1)}
	s, err := NewServer(Config{Conn: failingConn{err: errConnRefused}, Database: "walhouse", Keys: keys, CursorSecret: []byte("0123456789abcdef"), Eraser: fake})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s)
	defer srv.Close()
	if resp, out := do(t, srv, "POST", "/v1/erasures", keyErase, `{"subject": {"column": "customer_id", "value": 42}}`); resp.StatusCode != 202 {
		t.Fatalf("erase: %d %v", resp.StatusCode, out)
	}
	ended, cancel := context.WithCancel(context.Background())
	cancel() // no more time to wait
	s.WaitErasures(ended)
	select {
	case seen := <-fake.ran:
		if !errors.Is(seen.err, context.Canceled) {
			t.Errorf("the run ended with %v, want it cut short", seen.err)
		}
	default:
		t.Error("WaitErasures returned while the erasure still ran")
	}
}

// Once the server stops (WaitErasures began), a request still being served
// starts no erasure: its run would outlive the wait and the connections.
// It is refused with 503 before anything is recorded.
func TestErasureRefusedWhileStopping(t *testing.T) {
	const keyErase = "wh_erase_acme"
	b, _ := json.Marshal([]Key{{ID: "acme-erase", Hash: HashKey(keyErase), Tenant: "acme", Scopes: []Scope{ScopeErase}}})
	keys, err := ParseKeys(b)
	if err != nil {
		t.Fatal(err)
	}
	fake := &fakeEraser{}
	s, err := NewServer(Config{Conn: failingConn{err: errConnRefused}, Database: "walhouse", Keys: keys, CursorSecret: []byte("0123456789abcdef"), Eraser: fake})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s)
	defer srv.Close()
	s.WaitErasures(context.Background()) // nothing runs: returns at once
	if resp, out := do(t, srv, "POST", "/v1/erasures", keyErase, `{"subject": {"column": "customer_id", "value": 42}}`); resp.StatusCode != 503 {
		t.Errorf("erase while the server stops: %d %v, want 503", resp.StatusCode, out)
	}
	fake.mu.Lock()
	defer fake.mu.Unlock()
	if len(fake.got) != 0 {
		t.Errorf("erase while the server stops began %d erasures, want none", len(fake.got))
	}
}
