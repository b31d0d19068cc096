package query

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/walhouse/walhouse/internal/testenv"
	"github.com/walhouse/walhouse/schema"
)

// TestIntegrationExportMemoryBounded exports a subject with half a million
// rows (about 128 MiB of JSON Lines) and checks that the server streams
// them: its heap stays well below the size of the export.
func TestIntegrationExportMemoryBounded(t *testing.T) {
	f := newCHFixture(t)
	db := schema.QuoteIdent(f.db)
	const n = 500_000
	f.exec(t, fmt.Sprintf(`INSERT INTO %s.orders (tenant_id, id, customer_id, status, amount, created_at, due, _version, _is_deleted, _commit_ts)
		SELECT 'acme', number, 'cus_big', 'paid', toDecimal64(number %% 100000, 2), toDateTime64('2024-05-01 00:00:00', 6, 'UTC') + number, toDate32('2024-06-01'), 1, 0, now64(6)
		FROM numbers(%d)`, db, n))

	stopSampling := testenv.SampleHeap()
	req, _ := http.NewRequest("POST", f.srv.URL+"/v1/exports", strings.NewReader(`{"subject":{"column":"customer_id","value":"cus_big"},"tables":["orders"],"format":"jsonl"}`))
	req.Header.Set("Authorization", "Bearer "+keyAcme)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	size, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	peak := stopSampling()
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("export: status %d, %v", resp.StatusCode, err)
	}
	if rows := resp.Trailer.Get(trailerRows); rows != fmt.Sprint(n) {
		t.Errorf("exported %s rows, want %d (export status %q)", rows, n, resp.Trailer.Get(trailerStatus))
	}
	t.Logf("exported %d rows, %d MiB; peak heap in use %d MiB", n, size>>20, peak>>20)
	if peak > uint64(size)*3/4 {
		t.Errorf("peak heap %d MiB for a %d MiB export: the export is buffered, not streamed", peak>>20, size>>20)
	}
}
