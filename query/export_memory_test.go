package query

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/walhouse/walhouse/harness/testenv"
	"github.com/walhouse/walhouse/schema"
)

// TestIntegrationExportMemoryBounded exports a subject with a million rows
// (about 256 MiB of JSON Lines) as JSON Lines and as Parquet, and checks
// that the server streams them: its heap stays well below the size of the
// data. Under the race detector the exports take minutes, so `make test`
// runs this test in a second pass without it (the embedded engine's HTTP
// front serves slow readers to the end all the same: see harness/chdb
// TestIntegrationHTTPSlowReader).
func TestIntegrationExportMemoryBounded(t *testing.T) {
	if raceDetector {
		t.Skip("measures memory on a million rows: make test runs it without the race detector")
	}
	f := newCHFixture(t)
	db := schema.QuoteIdent(f.db)
	const n = 1_000_000
	f.exec(t, fmt.Sprintf(`INSERT INTO %s.orders (tenant_id, id, customer_id, status, amount, created_at, due, _version, _is_deleted, _commit_ts)
		SELECT 'acme', number, 'cus_big', 'paid', toDecimal64(number %% 100000, 2), toDateTime64('2024-05-01 00:00:00', 6, 'UTC') + number, toDate32('2024-06-01'), 1, 0, now64(6)
		FROM numbers(%d)`, db, n))

	// JSON Lines first: its size is the size of the data. Parquet is far
	// smaller (columnar, zstd) but holds a row group in memory before
	// writing it, so its bound is the same share of the data's size.
	var jsonlSize int64
	for _, format := range []Format{JSONL, Parquet} {
		stopSampling := testenv.SampleHeap()
		resp := send(t, "POST", f.srv.URL+"/v1/exports", keyAcme, strings.NewReader(`{"subject":{"column":"customer_id","value":"cus_big"},"tables":["orders"],"format":"`+string(format)+`"}`))
		size, err := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		peak := stopSampling()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("%s export: status %d, %v", format, resp.StatusCode, err)
		}
		if rows := resp.Trailer.Get(trailerRows); rows != fmt.Sprint(n) {
			t.Errorf("%s: exported %s rows, want %d (export status %q)", format, rows, n, resp.Trailer.Get(trailerStatus))
		}
		if format == JSONL {
			jsonlSize = size
		}
		t.Logf("%s: exported %d rows, %d MiB; peak heap in use %d MiB", format, n, size>>20, peak>>20)
		if peak > uint64(jsonlSize)*3/4 {
			t.Errorf("%s: peak heap %d MiB for %d MiB of data: the export is buffered, not streamed", format, peak>>20, jsonlSize>>20)
		}
	}
}
