package idempotency

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
)

// fakeStore is a Store in memory: a key is in flight from Begin to Commit
// or Rollback, then done with its result.
type fakeStore struct {
	mu   sync.Mutex
	keys map[string]*fakeKey
	down bool
}

type fakeKey struct {
	fp       Fingerprint
	result   []byte
	inFlight bool
}

func (s *fakeStore) Begin(_ context.Context, r Request) (Attempt, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down {
		return nil, errors.New("store down")
	}
	if r.Tenant == "" {
		return nil, ErrNoTenant
	}
	a := &fakeAttempt{s: s, id: r.Tenant + "/" + r.Key.String(), keyed: !r.Key.IsZero()}
	if !a.keyed {
		return a, nil
	}
	k, ok := s.keys[a.id]
	switch {
	case !ok:
		s.keys[a.id] = &fakeKey{fp: r.boundFingerprint(), inFlight: true}
		return a, nil
	case k.inFlight:
		return nil, ErrInFlight
	case k.fp != r.boundFingerprint():
		return nil, &MismatchError{Tenant: r.Tenant, Key: r.Key, Detail: "fingerprint"}
	}
	a.replay = k.result
	return a, nil
}

type fakeAttempt struct {
	s      *fakeStore
	id     string
	keyed  bool
	replay []byte
	ended  bool
}

func (a *fakeAttempt) Replayed() ([]byte, bool) { return a.replay, a.replay != nil }
func (a *fakeAttempt) Tx() pgx.Tx               { return nil }

func (a *fakeAttempt) Commit(_ context.Context, result []byte) error {
	a.s.mu.Lock()
	defer a.s.mu.Unlock()
	if a.ended {
		return errors.New("attempt ended twice")
	}
	a.ended = true
	if a.keyed && a.replay == nil {
		k := a.s.keys[a.id]
		k.inFlight, k.result = false, append([]byte{}, result...)
	}
	return nil
}

func (a *fakeAttempt) Rollback(context.Context) error {
	a.s.mu.Lock()
	defer a.s.mu.Unlock()
	if !a.ended && a.keyed && a.replay == nil {
		delete(a.s.keys, a.id)
	}
	a.ended = true
	return nil
}

// TestMiddleware drives the middleware's state machine through sequences
// of requests against the fake store: what the client gets, and how often
// the handler ran (its effects).
func TestMiddleware(t *testing.T) {
	key := NewKey().Header()
	other := NewKey().Header()
	type req struct {
		key, method, target, body, tenant string
		// ctype is the Content-Type (default application/json);
		// principal the X-Principal header (WithPrincipal).
		ctype, principal string
		// status the handler answers with; 0: 201 with a body naming the call
		status int
	}
	type want struct {
		status   int
		replayed bool
		bodyHas  string
		problem  bool
	}
	post := func(key, body string) req {
		return req{key: key, method: "POST", target: "/orders", body: body, tenant: "t1"}
	}
	for _, tc := range []struct {
		name    string
		opts    []MiddlewareOption
		reqs    []req
		want    []want
		effects int
	}{
		{"first attempt runs", nil, []req{post(key, `{"a":1}`)}, []want{{status: 201, bodyHas: "call 1"}}, 1},
		{"retry replays the first response", nil,
			[]req{post(key, `{"a":1}`), post(key, `{"a":1}`), post(key, `{"a":1}`)},
			[]want{{status: 201, bodyHas: "call 1"}, {status: 201, replayed: true, bodyHas: "call 1"}, {status: 201, replayed: true, bodyHas: "call 1"}}, 1},
		{"same JSON spelled otherwise is the same request", nil,
			[]req{post(key, `{"a":1,"b":"x"}`), post(key, ` { "b" : "x", "a" : 1.0 } `)},
			[]want{{status: 201}, {status: 201, replayed: true, bodyHas: "call 1"}}, 1},
		{"another body is 422", nil,
			[]req{post(key, `{"a":1}`), post(key, `{"a":2}`)},
			[]want{{status: 201}, {status: 422, problem: true, bodyHas: "already used"}}, 1},
		{"another target is 422", nil,
			[]req{post(key, `{"a":1}`), {key: key, method: "POST", target: "/orders?dry=1", body: `{"a":1}`, tenant: "t1"}},
			[]want{{status: 201}, {status: 422, problem: true}}, 1},
		{"another method is 422", nil,
			[]req{post(key, `{"a":1}`), {key: key, method: "PATCH", target: "/orders", body: `{"a":1}`, tenant: "t1"}},
			[]want{{status: 201}, {status: 422, problem: true}}, 1},
		{"another content type is 422", nil,
			[]req{post(key, `{"a":1}`), {key: key, method: "POST", target: "/orders", body: `{"a":1}`, tenant: "t1", ctype: "text/plain"}},
			[]want{{status: 201}, {status: 422, problem: true}}, 1},
		{"a content type spelled otherwise is the same", nil,
			[]req{{key: key, method: "POST", target: "/orders", body: `{"a":1}`, tenant: "t1", ctype: "application/json; charset=utf-8"},
				{key: key, method: "POST", target: "/orders", body: `{"a":1}`, tenant: "t1", ctype: "Application/JSON;Charset=utf-8"}},
			[]want{{status: 201}, {status: 201, replayed: true, bodyHas: "call 1"}}, 1},
		{"another principal's key is 422, never its response", []MiddlewareOption{WithPrincipal(func(r *http.Request) string { return r.Header.Get("X-Principal") })},
			[]req{{key: key, method: "POST", target: "/orders", body: `{"a":1}`, tenant: "t1", principal: "alice"},
				{key: key, method: "POST", target: "/orders", body: `{"a":1}`, tenant: "t1", principal: "mallory"},
				{key: key, method: "POST", target: "/orders", body: `{"a":1}`, tenant: "t1", principal: "alice"}},
			[]want{{status: 201, bodyHas: "call 1"}, {status: 422, problem: true}, {status: 201, replayed: true, bodyHas: "call 1"}}, 1},
		{"another tenant's key is its own", nil,
			[]req{post(key, `{"a":1}`), {key: key, method: "POST", target: "/orders", body: `{"a":2}`, tenant: "t2"}},
			[]want{{status: 201, bodyHas: "call 1"}, {status: 201, bodyHas: "call 2"}}, 2},
		{"two keys are two requests", nil,
			[]req{post(key, `{"a":1}`), post(other, `{"a":1}`)},
			[]want{{status: 201, bodyHas: "call 1"}, {status: 201, bodyHas: "call 2"}}, 2},
		{"missing key runs unkeyed", nil,
			[]req{post("", `{"a":1}`), post("", `{"a":1}`)},
			[]want{{status: 201, bodyHas: "call 1"}, {status: 201, bodyHas: "call 2"}}, 2},
		{"missing key where required is 400", []MiddlewareOption{RequireKey()},
			[]req{post("", `{"a":1}`)}, []want{{status: 400, problem: true, bodyHas: "missing"}}, 0},
		{"malformed key is 400", nil,
			[]req{post("not-a-uuid", `{"a":1}`), post(`"0190a6d5"`, `{"a":1}`)},
			[]want{{status: 400, problem: true, bodyHas: "malformed"}, {status: 400, problem: true}}, 0},
		{"5xx rolls back, the retry runs", nil,
			[]req{{key: key, method: "POST", target: "/orders", body: "{}", tenant: "t1", status: 503}, post(key, "{}")},
			[]want{{status: 503}, {status: 201, bodyHas: "call 2"}}, 1},
		{"4xx is stored like any answer", nil,
			[]req{{key: key, method: "POST", target: "/orders", body: "{}", tenant: "t1", status: 404}, post(key, "{}")},
			[]want{{status: 404}, {status: 404, replayed: true}}, 1},
		{"no tenant is 401", nil,
			[]req{{key: key, method: "POST", target: "/orders", body: "{}"}}, []want{{status: 401, problem: true}}, 0},
		{"body over the bound is 413", []MiddlewareOption{WithMaxBody(4)},
			[]req{post(key, `{"a":1}`)}, []want{{status: 413, problem: true}}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := &fakeStore{keys: map[string]*fakeKey{}}
			calls, effects := 0, 0
			var cur req
			h := Middleware(store, func(r *http.Request) (string, error) { return r.Header.Get("X-Tenant"), nil }, tc.opts...)(
				http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					calls++
					if b, _ := io.ReadAll(r.Body); string(b) != cur.body {
						t.Errorf("handler read body %q, want %q", b, cur.body)
					}
					if cur.status >= 500 {
						w.WriteHeader(cur.status)
						return
					}
					effects++
					w.Header().Set("Content-Type", "application/json")
					w.Header().Set("X-Dropped", "not kept")
					w.Header().Set("Location", "/orders/1")
					st := cur.status
					if st == 0 {
						st = 201
					}
					w.WriteHeader(st)
					_, _ = io.WriteString(w, `{"made by":"call `+string(rune('0'+calls))+`"}`)
				}))
			for i, rq := range tc.reqs {
				cur = rq
				r := httptest.NewRequest(rq.method, rq.target, strings.NewReader(rq.body))
				r.Header.Set("Content-Type", "application/json")
				if rq.ctype != "" {
					r.Header.Set("Content-Type", rq.ctype)
				}
				if rq.principal != "" {
					r.Header.Set("X-Principal", rq.principal)
				}
				if rq.key != "" {
					r.Header.Set(HeaderName, rq.key)
				}
				if rq.tenant != "" {
					r.Header.Set("X-Tenant", rq.tenant)
				}
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				want := tc.want[i]
				if w.Code != want.status {
					t.Fatalf("request %d: status %d, want %d; body %s", i, w.Code, want.status, w.Body)
				}
				if got := w.Header().Get(ReplayedHeader) == "true"; got != want.replayed {
					t.Errorf("request %d: replayed %v, want %v", i, got, want.replayed)
				}
				if !strings.Contains(w.Body.String(), want.bodyHas) {
					t.Errorf("request %d: body %s lacks %q", i, w.Body, want.bodyHas)
				}
				if want.problem {
					var p struct {
						Type, Title string
						Status      int
					}
					if ct := w.Header().Get("Content-Type"); ct != "application/problem+json" {
						t.Errorf("request %d: Content-Type %q", i, ct)
					}
					if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil || p.Status != want.status || p.Title == "" || p.Type == "" {
						t.Errorf("request %d: problem %s (%v)", i, w.Body, err)
					}
				}
				if want.replayed {
					if w.Header().Get("X-Dropped") != "" || w.Header().Get("Location") != "/orders/1" || w.Header().Get("Content-Type") != "application/json" {
						t.Errorf("request %d: replayed headers %v: want the kept ones only", i, w.Header())
					}
				}
			}
			if effects != tc.effects {
				t.Errorf("the handler took effect %d times, want %d", effects, tc.effects)
			}
		})
	}
}

// TestMiddlewareInFlightAndFailures covers what needs a request to be held
// or the store to fail: 409 while the first attempt runs, 503 when the
// store is down, and a panic leaving no key behind.
func TestMiddlewareInFlightAndFailures(t *testing.T) {
	store := &fakeStore{keys: map[string]*fakeKey{}}
	key := NewKey().Header()
	entered, release := make(chan struct{}), make(chan struct{})
	panics := false
	h := Middleware(store, func(*http.Request) (string, error) { return "t1", nil })(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if panics {
			panic("handler bug")
		}
		if r.URL.Path == "/slow" {
			close(entered)
			<-release
		}
		w.WriteHeader(201)
	}))
	do := func(path string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("POST", path, strings.NewReader("{}"))
		r.Header.Set(HeaderName, key)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	done := make(chan *httptest.ResponseRecorder)
	go func() { done <- do("/slow") }()
	<-entered
	if w := do("/slow"); w.Code != http.StatusConflict || !strings.Contains(w.Body.String(), "outstanding") {
		t.Errorf("second request while the first runs: %d %s, want 409", w.Code, w.Body)
	}
	close(release)
	if w := <-done; w.Code != 201 {
		t.Errorf("first request: %d", w.Code)
	}
	if w := do("/slow"); w.Code != 201 || w.Header().Get(ReplayedHeader) != "true" {
		t.Errorf("retry after the first ended: %d replayed=%q, want the replay", w.Code, w.Header().Get(ReplayedHeader))
	}

	key = NewKey().Header()
	panics = true
	func() {
		defer func() {
			if recover() == nil {
				t.Error("the handler's panic was swallowed")
			}
		}()
		do("/x")
	}()
	panics = false
	if w := do("/x"); w.Code != 201 || w.Header().Get(ReplayedHeader) != "" {
		t.Errorf("retry after a panic: %d replayed=%q, want a fresh run", w.Code, w.Header().Get(ReplayedHeader))
	}

	store.down = true
	if w := do("/y"); w.Code != http.StatusServiceUnavailable {
		t.Errorf("store down: %d, want 503", w.Code)
	}
}
