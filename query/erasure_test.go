package query

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/walhouse/walhouse/erasure"
)

// fakeEraser records the requests it gets and answers with err.
type fakeEraser struct {
	got []erasure.Request
	err error
}

func (f *fakeEraser) Erase(_ context.Context, req erasure.Request) (erasure.Manifest, error) {
	f.got = append(f.got, req)
	return erasure.Manifest{ID: "era_1", Tenant: req.Tenant, Verified: f.err == nil, Signature: "sig"}, f.err
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
	if resp.StatusCode != 200 || out["id"] != "era_1" {
		t.Fatalf("erase: %d %v", resp.StatusCode, out)
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
	none := serve(nil)
	if resp, out := do(t, none, "POST", "/v1/erasures", keyErase, body); resp.StatusCode != 503 {
		t.Errorf("no eraser: %d %v, want 503", resp.StatusCode, out)
	}
}
