package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/walhouse/walhouse/query"
)

// api is the query API served in-process on a loopback port, with one
// read key per tenant.
type api struct {
	url     string
	secrets []string // secrets[i] reads tenant(i)
	client  *http.Client
	srv     *http.Server
	done    chan error
}

// startAPI serves query.NewServer over database on 127.0.0.1:0.
func startAPI(ctx context.Context, conn query.Conn, database string, tenants int) (*api, error) {
	a := &api{secrets: make([]string, tenants), done: make(chan error, 1)}
	list := make([]query.Key, tenants)
	for i := range tenants {
		s, err := query.NewSecret()
		if err != nil {
			return nil, err
		}
		a.secrets[i] = s
		list[i] = query.Key{ID: tenant(i), Hash: query.HashKey(s), Tenant: tenant(i), Scopes: []query.Scope{query.ScopeRead}}
	}
	data, err := json.Marshal(list)
	if err != nil {
		return nil, fmt.Errorf("encode the API keys: %w", err)
	}
	keys, err := query.ParseKeys(data)
	if err != nil {
		return nil, fmt.Errorf("the generated API keys: %w", err)
	}
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return nil, fmt.Errorf("generate a cursor secret: %w", err)
	}
	h, err := query.NewServer(query.Config{Conn: conn, Database: database, Keys: keys, CursorSecret: secret, Logger: slog.Default()})
	if err != nil {
		return nil, err
	}
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen on a loopback port: %w", err)
	}
	a.url = "http://" + ln.Addr().String()
	a.srv = &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { a.done <- a.srv.Serve(ln) }()
	// One connection, kept alive: the requests run one at a time, as the
	// embedded engine serializes them anyway.
	a.client = &http.Client{Timeout: time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
	return a, nil
}

// close stops the server and waits for it.
func (a *api) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = a.srv.Shutdown(ctx)
	<-a.done
}

// queryResponse is the part of a read response the benchmark checks.
type queryResponse struct {
	Data []map[string]json.RawMessage `json:"data"`
	Meta struct {
		LastSyncAt  *time.Time `json:"lastSyncAt"`
		Consistency string     `json:"consistency"`
		Rows        int        `json:"rows"`
	} `json:"meta"`
	Error *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// query posts req to table as tenant i and decodes the response; anything
// but a 200 with the requested consistency and a lastSyncAt is an error.
func (a *api) query(ctx context.Context, table string, i int, req query.Request) (queryResponse, error) {
	var out queryResponse
	body, err := json.Marshal(req)
	if err != nil {
		return out, fmt.Errorf("encode the request: %w", err)
	}
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, a.url+"/v1/tables/"+table+"/query", bytes.NewReader(body))
	if err != nil {
		return out, err
	}
	hr.Header.Set("Authorization", "Bearer "+a.secrets[i])
	hr.Header.Set("Content-Type", "application/json")
	resp, err := a.client.Do(hr)
	if err != nil {
		return out, fmt.Errorf("POST /v1/tables/%s/query: %w", table, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return out, fmt.Errorf("read the response: %w", err)
	}
	if err := json.Unmarshal(data, &out); err != nil {
		return out, fmt.Errorf("HTTP %d: decode %.200q: %w", resp.StatusCode, data, err)
	}
	switch {
	case resp.StatusCode != http.StatusOK && out.Error != nil:
		return out, fmt.Errorf("HTTP %d %s: %s", resp.StatusCode, out.Error.Code, out.Error.Message)
	case resp.StatusCode != http.StatusOK:
		return out, fmt.Errorf("HTTP %d: %.200s", resp.StatusCode, data)
	case out.Meta.LastSyncAt == nil:
		return out, errors.New("meta.lastSyncAt is null although _walhouse_sync has rows for the table")
	}
	want := req.Consistency
	if want == "" {
		want = query.Final
	}
	if out.Meta.Consistency != string(want) {
		return out, fmt.Errorf("asked for consistency %q, meta.consistency is %q", want, out.Meta.Consistency)
	}
	return out, nil
}
