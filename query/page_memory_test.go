package query

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/walhouse/walhouse/harness/testenv"
	"github.com/walhouse/walhouse/schema"
)

// TestIntegrationQueryPageMemoryBounded reads one page of 1,000 rows of
// 32 KiB of '<' (32 MiB): the page is streamed, unescaped ('<' stays one
// byte, not the six of json.Marshal's \u003c), and the server's heap stays
// far below what the page buffered whole cost (a 192 MiB buffer).
func TestIntegrationQueryPageMemoryBounded(t *testing.T) {
	if raceDetector {
		t.Skip("measures memory on a 32 MiB page: make test runs it without the race detector")
	}
	f := newCHFixtureWith(t, func(c *Config) {
		c.TenantLimits = map[string]Limits{"acme": {MaxResultBytes: 256 << 20}}
	})
	const rows, width = 1000, 32 << 10
	f.exec(t, fmt.Sprintf(`INSERT INTO %s.orders (tenant_id, id, status, _version, _is_deleted, _commit_ts)
		SELECT 'acme', number, repeat('<', %d), 1, 0, now64(6) FROM numbers(%d)`, schema.QuoteIdent(f.db), width, rows))

	stopSampling := testenv.SampleHeap()
	resp := send(t, "POST", f.srv.URL+"/v1/tables/orders/query", keyAcme, strings.NewReader(`{"columns":["id","status"],"limit":1000}`))
	var tail bytes.Buffer
	size, err := io.Copy(&lastBytes{buf: &tail, keep: 4096}, resp.Body)
	resp.Body.Close()
	peak := stopSampling()
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d, %v", resp.StatusCode, err)
	}
	raw := int64(rows * width)
	t.Logf("page of %d rows: %d MiB of JSON; peak heap in use %d MiB", rows, size>>20, peak>>20)
	if size > raw+raw/10 {
		t.Errorf("the page is %d bytes for %d bytes of '<': HTML-escaped", size, raw)
	}
	if !strings.Contains(tail.String(), `"rows":1000`) {
		t.Errorf("the page does not end with its meta: …%s", tail.String())
	}
	// The driver holds the result (its block, decompressed, and its
	// strings: about 3×32 MiB); the page adds a pageCommitBytes buffer.
	// Buffered whole and escaped it peaked at 463 MiB.
	if peak > uint64(4*raw) {
		t.Errorf("peak heap %d MiB for a %d MiB page: the page is buffered, not streamed", peak>>20, raw>>20)
	}
}

// lastBytes keeps the last keep bytes written to it.
type lastBytes struct {
	buf  *bytes.Buffer
	keep int
}

func (l *lastBytes) Write(p []byte) (int, error) {
	l.buf.Write(p)
	if l.buf.Len() > 2*l.keep {
		rest := append([]byte(nil), l.buf.Bytes()[l.buf.Len()-l.keep:]...)
		l.buf.Reset()
		l.buf.Write(rest)
	}
	return len(p), nil
}

// TestIntegrationQueryPageOverLimit: a page whose JSON passes
// MaxPageBytes is refused with 400 over_limit while nothing of it was
// sent, and cut off, with the error as its last member, once it streams.
func TestIntegrationQueryPageOverLimit(t *testing.T) {
	f := newCHFixtureWith(t, func(c *Config) {
		c.TenantLimits = map[string]Limits{"acme": {MaxPageBytes: 100 << 10}, "globex": {MaxPageBytes: pageCommitBytes + 100<<10}}
	})
	f.exec(t, fmt.Sprintf(`INSERT INTO %s.orders (tenant_id, id, status, _version, _is_deleted, _commit_ts)
		SELECT if(number %% 2 = 0, 'acme', 'globex'), number, repeat('x', 1024), 1, 0, now64(6) FROM numbers(2000)`, schema.QuoteIdent(f.db)))

	// A small page passes; one over 100 KiB is a 400 before any row.
	if out, code := f.query(t, keyAcme, "orders", map[string]any{"columns": []string{"id", "status"}, "limit": 10}); code != 200 || len(out.Data) != 10 {
		t.Fatalf("a page under the limit: %d %+v", code, out.Error)
	}
	out, code := f.query(t, keyAcme, "orders", map[string]any{"columns": []string{"id", "status"}, "limit": 1000})
	if code != 400 || out.Error == nil || out.Error.Code != "over_limit" || out.Data != nil {
		t.Fatalf("a page over MaxPageBytes: %d %+v, want 400 over_limit", code, out.Error)
	}

	// Over the limit after the 200 was sent: the body ends with the error
	// and is cut off, so no client reads it as a whole page.
	resp := send(t, "POST", f.srv.URL+"/v1/tables/orders/query", keyGlobex, strings.NewReader(`{"columns":["id","status"],"limit":1000}`))
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || err == nil {
		t.Fatalf("a streamed page over MaxPageBytes: status %d, read error %v; want 200 and a body cut off", resp.StatusCode, err)
	}
	if json.Valid(body) {
		t.Errorf("the cut-off page is valid JSON")
	}
	if !bytes.Contains(body, []byte(`],"error":{"code":"over_limit"`)) || bytes.Contains(body, []byte(`"meta"`)) {
		t.Errorf("the cut-off page ends with …%s; want the over_limit error and no meta", body[max(0, len(body)-300):])
	}
	if int64(len(body)) > pageCommitBytes+100<<10+1024 {
		t.Errorf("%d bytes sent, beyond the limit", len(body))
	}
}
