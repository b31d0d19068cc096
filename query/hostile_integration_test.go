package query

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/walhouse/walhouse/harness/testenv"
	"github.com/walhouse/walhouse/schema"
)

// TestIntegrationClickHouseLimits: the per-query limits reach the engine
// behind the HTTP front and a read over them fails with a clear JSON
// error instead of succeeding.
func TestIntegrationClickHouseLimits(t *testing.T) {
	f := newCHFixtureWith(t, func(c *Config) {
		c.TenantLimits = map[string]Limits{
			"acme": {MaxResultBytes: 1000},
			// No spilling to disk: the GROUP BY must fit in 1 MiB.
			"globex": {MaxMemoryUsage: 1 << 20, MaxBytesBeforeExternalGroupBy: 1 << 40},
		}
	})
	f.exec(t, fmt.Sprintf(`INSERT INTO %s.orders (tenant_id, id, customer_id, status, _version, _is_deleted, _commit_ts)
		SELECT if(number %% 2 = 0, 'acme', 'globex'), number, concat('cus_', toString(number)), 'paid', 1, 0, now64(6) FROM numbers(400000)`, schema.QuoteIdent(f.db)))

	out, code := f.query(t, keyAcme, "orders", map[string]any{"columns": []string{"id", "customer_id", "status"}, "limit": 1000})
	if code != 400 || out.Error == nil || out.Error.Code != "over_limit" || out.Data != nil {
		t.Errorf("a page over max_result_bytes: %d %+v, want 400 over_limit", code, out.Error)
	}
	if out, code := f.query(t, keyAcme, "orders", map[string]any{"columns": []string{"id"}, "limit": 5}); code != 200 || len(out.Data) != 5 {
		t.Errorf("a small page under max_result_bytes: %d %+v", code, out.Error)
	}
	out, code = f.query(t, keyGlobex, "orders", map[string]any{"groupBy": []string{"customer_id"}, "aggregates": []map[string]any{{"fn": "count"}}, "limit": 10})
	if code != 400 || out.Error == nil || out.Error.Code != "over_limit" || !strings.Contains(out.Error.Message, "memory") {
		t.Errorf("a GROUP BY over max_memory_usage: %d %+v, want 400 over_limit about memory", code, out.Error)
	}
}

// TestIntegrationTablesOnlyTenants: a key lists, reads and exports only
// the tables that hold its tenant's rows; another tenant's table answers
// exactly as a table that does not exist.
func TestIntegrationTablesOnlyTenants(t *testing.T) {
	f := newCHFixture(t)
	db := schema.QuoteIdent(f.db)
	f.exec(t, fmt.Sprintf("INSERT INTO %s.orders (tenant_id, id, _version, _is_deleted, _commit_ts) VALUES ('acme', 1, 1, 0, now64(6))", db))
	f.exec(t, fmt.Sprintf("INSERT INTO %s.%s (tenant_id, id, _version, _is_deleted, _commit_ts) VALUES ('globex', 1, 1, 0, now64(6))", db, schema.QuoteIdent("crm__odd names")))
	for key, want := range map[string]string{keyAcme: "orders", keyGlobex: "crm__odd names"} {
		var out struct{ Tables []tableInfo }
		if r := f.call(t, "GET", "/v1/tables", key, nil, &out); r.StatusCode != 200 || len(out.Tables) != 1 || out.Tables[0].Name != want {
			t.Errorf("GET /v1/tables: %d %+v, want only %s", r.StatusCode, out.Tables, want)
		}
	}
	other, code := f.query(t, keyAcme, "crm__odd names", map[string]any{})
	none, code2 := f.query(t, keyAcme, "nope", map[string]any{})
	if code != 400 || other.Error == nil || other.Error.Code != "unknown_table" || code2 != 400 || none.Error == nil ||
		strings.ReplaceAll(other.Error.Message, "crm__odd names", "nope") != none.Error.Message {
		t.Errorf("another tenant's table: %d %+v; a table that does not exist: %d %+v; want the same answer", code, other.Error, code2, none.Error)
	}
	resp := f.call(t, "POST", "/v1/exports", keyAcme, `{"subject":{"column":"id","value":1}}`, nil)
	var m Manifest
	f.call(t, "GET", resp.Header.Get("X-Walhouse-Manifest"), keyAcme, nil, &m)
	if len(m.Tables) != 1 || m.Tables[0].Table != "orders" || m.Rows != 1 {
		t.Errorf("an export of every table: manifest tables %+v, rows %d; want only orders, 1 row", m.Tables, m.Rows)
	}
}

// export runs POST /v1/exports and returns the body, trailers and manifest.
func (f *chFixture) export(t *testing.T, key, body string) ([]byte, http.Header, Manifest) {
	t.Helper()
	resp, data := sendRead(t, "POST", f.srv.URL+"/v1/exports", key, strings.NewReader(body))
	if resp.StatusCode != 200 {
		t.Fatalf("export: %d %s", resp.StatusCode, data)
	}
	var m Manifest
	f.call(t, "GET", resp.Header.Get("X-Walhouse-Manifest"), key, nil, &m)
	return data, resp.Trailer, m
}

// TestIntegrationExportCaps: an export over its tenant's row or byte cap
// stops with the cap named in its trailer, manifest and audit entry; the
// audit entry holds the subject's keyed hash, never the value; CSV cells
// that a spreadsheet would run are neutralised.
func TestIntegrationExportCaps(t *testing.T) {
	logs := &testenv.SyncBuffer{}
	f := newCHFixtureWith(t, func(c *Config) {
		c.TenantLimits = map[string]Limits{"acme": {MaxExportRows: 100}, "globex": {MaxExportBytes: 2000}}
		c.Logger = slog.New(slog.NewJSONHandler(logs, nil))
	})
	db := schema.QuoteIdent(f.db)
	f.exec(t, fmt.Sprintf(`INSERT INTO %s.orders (tenant_id, id, customer_id, status, amount, _version, _is_deleted, _commit_ts)
		SELECT tenant, number, 'cus_secret_1', if(number = 0, '=HYPERLINK("http://evil")', '@cmd'), toDecimal64(-5, 2), 1, 0, now64(6)
		FROM numbers(500) ARRAY JOIN ['acme', 'globex'] AS tenant`, db))

	body, tr, m := f.export(t, keyAcme, `{"subject":{"column":"customer_id","value":"cus_secret_1"},"format":"jsonl"}`)
	if n := bytes.Count(body, []byte("\n")); n != 100 || m.Rows != 100 || m.Complete || !strings.Contains(m.Error, "limit of 100 rows") ||
		!strings.HasPrefix(tr.Get(trailerStatus), "failed: the export reached its limit of 100 rows") {
		t.Errorf("export over the row cap: %d lines, manifest %+v, trailers %v", n, m, tr)
	}
	body, tr, m = f.export(t, keyGlobex, `{"subject":{"column":"customer_id","value":"cus_secret_1"},"format":"csv"}`)
	if len(body) != 2000 || m.Bytes != int64(len(body)) || m.Complete || !strings.Contains(m.Error, "limit of 2000 bytes") ||
		!strings.HasPrefix(tr.Get(trailerStatus), "failed: the export reached its limit of 2000 bytes") {
		t.Errorf("export over the byte cap: %d bytes, manifest %+v, trailers %v", len(body), m, tr)
	}
	lines := strings.Split(string(body), "\n")
	if len(lines) < 3 || !strings.Contains(lines[1], `,"'=HYPERLINK(""http://evil"")"`) || !strings.Contains(lines[1], ",-5,") && !strings.Contains(lines[1], ",-5.00,") ||
		!strings.Contains(lines[2], ",'@cmd,") {
		t.Errorf("CSV cells not neutralised (or numbers changed): %q", lines[:min(3, len(lines))])
	}

	want := AuditHash(AuditKey(nil, []byte(testCursorSecret)), "cus_secret_1")
	var audits int
	for _, line := range strings.Split(logs.String(), "\n") {
		if !strings.Contains(line, "audit: subject export") {
			continue
		}
		audits++
		var e map[string]any
		_ = json.Unmarshal([]byte(line), &e)
		if strings.Contains(line, "cus_secret_1") || e["subject_hmac"] != want || !strings.Contains(fmt.Sprint(e["err"]), "the export reached its limit") {
			t.Errorf("audit entry %s: want subject_hmac %s, the cap in err, and no subject value", line, want)
		}
	}
	if audits != 2 {
		t.Errorf("%d audit entries, want 2:\n%s", audits, logs)
	}
}

// TestIntegrationExportWriteDeadlines: an export streams for longer than
// the server's WriteTimeout to a client that keeps reading, and stops
// (manifest complete=false) for one that stopped reading.
func TestIntegrationExportWriteDeadlines(t *testing.T) {
	f := newCHFixtureWith(t, func(c *Config) { c.HTTP.WriteTimeout = 2 * time.Second })
	f.exec(t, fmt.Sprintf(`INSERT INTO %s.orders (tenant_id, id, customer_id, status, _version, _is_deleted, _commit_ts)
		SELECT 'acme', number, if(number < 40000, 'cus_small', 'cus_big'), repeat('x', 200), 1, 0, now64(6) FROM numbers(240000)`, schema.QuoteIdent(f.db)))

	// A slow reader: 64 KiB every 10 ms (18 MB: about 3 s in all), never
	// a pause near the WriteTimeout.
	resp := send(t, "POST", f.srv.URL+"/v1/exports", keyAcme, strings.NewReader(`{"subject":{"column":"customer_id","value":"cus_small"}}`))
	start := time.Now()
	lines, buf := 0, make([]byte, 64<<10)
	for {
		n, err := resp.Body.Read(buf)
		lines += bytes.Count(buf[:n], []byte("\n"))
		if err != nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	resp.Body.Close()
	if lines != 40000 || resp.Trailer.Get(trailerStatus) != "complete" || time.Since(start) < 2*time.Second {
		t.Errorf("slow reader: %d lines in %s, status %q; want 40000, complete, after more than the 2 s WriteTimeout", lines, time.Since(start), resp.Trailer.Get(trailerStatus))
	}

	// A client that stops reading: the export gives up on it.
	c, err := net.Dial("tcp", f.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	body := `{"subject":{"column":"customer_id","value":"cus_big"}}`
	fmt.Fprintf(c, "POST /v1/exports HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: %d\r\n\r\n%s", keyAcme, len(body), body)
	hdr, err := http.ReadResponse(bufio.NewReader(c), nil) // headers only; the body is never read
	if err != nil {
		t.Fatal(err)
	}
	manifest := hdr.Header.Get("X-Walhouse-Manifest")
	deadline := time.Now().Add(time.Minute)
	for {
		var m Manifest
		if r := f.call(t, "GET", manifest, keyAcme, nil, nil); r.StatusCode == 200 {
			f.call(t, "GET", manifest, keyAcme, nil, &m)
			if m.Complete || m.Rows >= 200000 {
				t.Errorf("an export to a client that stopped reading: manifest %+v, want it stopped early", m)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the export to a client that stopped reading has not ended after a minute")
		}
		time.Sleep(100 * time.Millisecond)
	}
}
