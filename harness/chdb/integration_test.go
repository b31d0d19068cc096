package chdb

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/google/uuid"
	"golang.org/x/sync/errgroup"
)

// startServer serves the shared engine on a free loopback port for the
// duration of the test and returns its address.
func startServer(t *testing.T, opts ...Option) string {
	t.Helper()
	e := testEngine(t)
	srv, err := NewServer(e, opts...)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return ln.Addr().String()
}

func openHTTP(t *testing.T, addr, database string) driver.Conn {
	t.Helper()
	conn, err := clickhouse.Open(&clickhouse.Options{
		Protocol: clickhouse.HTTP,
		Addr:     []string{addr},
		Auth:     clickhouse.Auth{Database: database},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// typedRow is one row of the many-types table.
type typedRow struct {
	ID      uint64
	I32     int32
	S       string
	NS      *string
	Dec     string
	TS      time.Time
	D32     time.Time
	U       uuid.UUID
	B       bool
	AS      []string
	AI      []int64
	M       map[string]string
	Tenant  string
	Payload string
	Version uint64
	Deleted uint8
}

const typedColumns = "id, i32, s, ns, dec, ts, d32, u, b, as, ai, m, tenant, payload, _version, _is_deleted"

const typedDDL = `CREATE TABLE %s.typed (
	id UInt64, i32 Int32, s String, ns Nullable(String), dec Decimal(38, 10),
	ts DateTime64(6, 'UTC'), d32 Date32, u UUID, b Bool,
	as Array(String), ai Array(Int64), m Map(String, String),
	tenant LowCardinality(String), payload String,
	_version UInt64, _is_deleted UInt8
) ENGINE = ReplacingMergeTree(_version, _is_deleted) ORDER BY id`

// makeRow derives every column from id and version, with the awkward
// values a CDC stream carries: NULLs, empty arrays and maps, negative
// numbers, NUL bytes and blank lines inside strings.
func makeRow(id, version uint64) typedRow {
	r := typedRow{
		ID:      id,
		I32:     int32(id*7919%200000) - 100000,
		S:       fmt.Sprintf("name-%d-v%d", id, version),
		Dec:     fmt.Sprintf("%d.%010d", int64(id*1234567)-1_000_000_000, id*7919%10_000_000_000),
		TS:      time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(id)*time.Hour + time.Duration(id*37%1_000_000)*time.Microsecond),
		D32:     time.Date(1900+int(id%399), time.Month(1+id%12), 1+int(id%28), 0, 0, 0, 0, time.UTC),
		U:       uuid.NewSHA1(uuid.NameSpaceOID, []byte(fmt.Sprint(id))),
		B:       id%3 == 0,
		AS:      []string{},
		AI:      []int64{},
		M:       map[string]string{},
		Tenant:  fmt.Sprintf("tenant-%d", id%4),
		Payload: fmt.Sprintf("{\"id\":%d,\"v\":%d,\"note\":\"line1\n\nline3\\u0000\x00tab\t\"}", id, version),
		Version: version,
	}
	if id%5 != 0 {
		ns := fmt.Sprintf("opt-%d", id)
		r.NS = &ns
	}
	for i := uint64(0); i < id%4; i++ {
		r.AS = append(r.AS, fmt.Sprintf("tag%d", i))
		r.AI = append(r.AI, int64(i)-int64(id))
		r.M[fmt.Sprintf("k%d", i)] = fmt.Sprintf("v%d", id+i)
	}
	return r
}

func (r typedRow) values() []any {
	return []any{r.ID, r.I32, r.S, r.NS, r.Dec, r.TS, r.D32, r.U, r.B, r.AS, r.AI, r.M, r.Tenant, r.Payload, r.Version, r.Deleted}
}

// canonicalDecimal drops the trailing zeros ClickHouse does not print.
func canonicalDecimal(s string) string {
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	return s
}

func sendBatch(ctx context.Context, t *testing.T, conn driver.Conn, table string, rows [][]any) {
	t.Helper()
	b, err := conn.PrepareBatch(ctx, "INSERT INTO "+table)
	if err != nil {
		t.Fatalf("prepare batch for %s: %v", table, err)
	}
	for _, r := range rows {
		if err := b.Append(r...); err != nil {
			t.Fatalf("append to %s: %v", table, err)
		}
	}
	if err := b.Send(); err != nil {
		t.Fatalf("send batch to %s: %v", table, err)
	}
}

func countRows(ctx context.Context, t *testing.T, conn driver.Conn, query string) uint64 {
	t.Helper()
	var n uint64
	if err := conn.QueryRow(ctx, query).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

func TestIntegrationHTTPFront(t *testing.T) {
	addr := startServer(t)
	ctx := context.Background()
	conn := openHTTP(t, addr, "")
	if err := conn.Ping(ctx); err != nil {
		t.Fatalf("ping: %v", err)
	}
	if v, err := conn.ServerVersion(); err != nil || v.Version.Major < 24 {
		t.Fatalf("server version = %v, %v; want the engine's version", v, err)
	}
	db := fmt.Sprintf("front_%d", time.Now().UnixNano())
	if err := conn.Exec(ctx, "CREATE DATABASE "+db); err != nil {
		t.Fatal(err)
	}

	t.Run("types round trip through ReplacingMergeTree FINAL", func(t *testing.T) {
		if err := conn.Exec(ctx, fmt.Sprintf(typedDDL, db)); err != nil {
			t.Fatal(err)
		}
		want := map[uint64]typedRow{}
		for batch := 0; batch < 3; batch++ {
			var rows [][]any
			for id := uint64(batch*1000 + 1); id <= uint64(batch*1000+1000); id++ {
				r := makeRow(id, 1)
				want[id] = r
				rows = append(rows, r.values())
			}
			sendBatch(ctx, t, conn, db+".typed", rows)
		}
		// Updates and deletes arrive later with higher versions, as CDC does.
		var changes [][]any
		for id := uint64(1); id <= 3000; id++ {
			switch {
			case id%11 == 0:
				r := makeRow(id, 3)
				r.Deleted = 1
				delete(want, id)
				changes = append(changes, r.values())
			case id%7 == 0:
				r := makeRow(id, 2)
				want[id] = r
				changes = append(changes, r.values())
			}
		}
		sendBatch(ctx, t, conn, db+".typed", changes)

		rows, err := conn.Query(ctx, "SELECT "+strings.Replace(typedColumns, "dec", "toString(dec)", 1)+" FROM "+db+".typed FINAL ORDER BY id")
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		got := 0
		for rows.Next() {
			var r typedRow
			if err := rows.Scan(&r.ID, &r.I32, &r.S, &r.NS, &r.Dec, &r.TS, &r.D32, &r.U, &r.B, &r.AS, &r.AI, &r.M, &r.Tenant, &r.Payload, &r.Version, &r.Deleted); err != nil {
				t.Fatal(err)
			}
			got++
			w, ok := want[r.ID]
			if !ok {
				t.Errorf("row %d is in FINAL but was deleted or never written", r.ID)
				continue
			}
			if canonicalDecimal(r.Dec) != canonicalDecimal(w.Dec) {
				t.Errorf("row %d: dec = %s, want %s", r.ID, r.Dec, w.Dec)
			}
			if !r.TS.Equal(w.TS) || r.D32.Format(time.DateOnly) != w.D32.Format(time.DateOnly) {
				t.Errorf("row %d: ts, d32 = %v, %v; want %v, %v", r.ID, r.TS, r.D32, w.TS, w.D32)
			}
			r.Dec, w.Dec = "", ""
			r.TS, w.TS, r.D32, w.D32 = time.Time{}, time.Time{}, time.Time{}, time.Time{}
			if !reflect.DeepEqual(r, w) {
				t.Errorf("row %d:\n got %+v\nwant %+v", r.ID, r, w)
			}
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		if got != len(want) {
			t.Errorf("FINAL has %d rows, want %d", got, len(want))
		}
	})

	t.Run("database parameter and database/sql", func(t *testing.T) {
		scoped := openHTTP(t, addr, db)
		if n := countRows(ctx, t, scoped, "SELECT count() FROM typed FINAL"); n == 0 {
			t.Errorf("unqualified count through database=%s = 0", db)
		}
		sqlDB := clickhouse.OpenDB(&clickhouse.Options{Protocol: clickhouse.HTTP, Addr: []string{addr}, Auth: clickhouse.Auth{Database: db}})
		defer sqlDB.Close()
		var viaSQL, viaNative uint64
		if err := sqlDB.QueryRowContext(ctx, "SELECT count() FROM typed FINAL WHERE tenant = {tenant:String}", clickhouse.Named("tenant", "tenant-1")).Scan(&viaSQL); err != nil {
			t.Fatal(err)
		}
		if err := conn.QueryRow(clickhouse.Context(ctx, clickhouse.WithParameters(clickhouse.Parameters{"tenant": "tenant-1"})),
			"SELECT count() FROM "+db+".typed FINAL WHERE tenant = {tenant:String}").Scan(&viaNative); err != nil {
			t.Fatal(err)
		}
		if viaSQL == 0 || viaSQL != viaNative {
			t.Errorf("count for tenant-1: database/sql %d, native API %d; want equal and non-zero", viaSQL, viaNative)
		}
		if _, err := sqlDB.ExecContext(ctx, "CREATE TABLE sqlt (a UInt8) ENGINE = Memory"); err != nil {
			t.Fatal(err)
		}
		var name string
		if err := sqlDB.QueryRowContext(ctx, "SELECT name FROM system.tables WHERE database = currentDatabase() AND name = 'sqlt'").Scan(&name); err != nil || name != "sqlt" {
			t.Errorf("table created through database/sql: %q, %v", name, err)
		}
		// A connection without the parameter is back in "default".
		var cur string
		if err := conn.QueryRow(ctx, "SELECT currentDatabase()").Scan(&cur); err != nil || cur != "default" {
			t.Errorf("currentDatabase() without the parameter = %q, %v; want default", cur, err)
		}
	})

	t.Run("settings apply to one query only", func(t *testing.T) {
		limited := clickhouse.Context(ctx, clickhouse.WithSettings(clickhouse.Settings{"max_result_rows": 10, "result_overflow_mode": "throw"}))
		rows, err := conn.Query(limited, "SELECT number FROM numbers(100)")
		if err == nil {
			for rows.Next() {
			}
			err = rows.Err()
			rows.Close()
		}
		var ex *clickhouse.Exception
		if !errors.As(err, &ex) || ex.Code != 396 {
			t.Fatalf("query over max_result_rows: err = %v, want exception 396 (TOO_MANY_ROWS_OR_BYTES)", err)
		}
		if n := countRows(ctx, t, conn, "SELECT count() FROM (SELECT number FROM numbers(100))"); n != 100 {
			t.Errorf("count after the limited query = %d, want 100", n)
		}
		var v string
		if err := conn.QueryRow(ctx, "SELECT toString(getSetting('max_result_rows'))").Scan(&v); err != nil {
			t.Fatal(err)
		}
		if v != "0" {
			t.Errorf("max_result_rows leaked into the next query: %s", v)
		}
		var unknown *clickhouse.Exception
		err = conn.Exec(clickhouse.Context(ctx, clickhouse.WithSettings(clickhouse.Settings{"no_such_setting_xyz": 1})), "SELECT 1")
		if !errors.As(err, &unknown) || unknown.Code != 115 {
			t.Errorf("unknown setting: err = %v, want exception 115", err)
		}
	})

	t.Run("insert_deduplication_token makes a resend harmless", func(t *testing.T) {
		if err := conn.Exec(ctx, "CREATE TABLE "+db+".dedup (id UInt64, v String) ENGINE = MergeTree ORDER BY id SETTINGS non_replicated_deduplication_window = 100"); err != nil {
			t.Fatal(err)
		}
		batch := func(from uint64) [][]any {
			var rows [][]any
			for id := from; id < from+100; id++ {
				rows = append(rows, []any{id, fmt.Sprintf("v%d", id)})
			}
			return rows
		}
		withToken := func(tok string) context.Context {
			return clickhouse.Context(ctx, clickhouse.WithSettings(clickhouse.Settings{"insert_deduplication_token": tok}))
		}
		count := func() uint64 { return countRows(ctx, t, conn, "SELECT count() FROM "+db+".dedup") }
		sendBatch(withToken("batch-1"), t, conn, db+".dedup", batch(0))
		sendBatch(withToken("batch-1"), t, conn, db+".dedup", batch(0))
		if n := count(); n != 100 {
			t.Fatalf("after sending batch-1 twice: %d rows, want 100", n)
		}
		sendBatch(withToken("batch-2"), t, conn, db+".dedup", batch(0))
		if n := count(); n != 200 {
			t.Fatalf("same rows under token batch-2: %d rows, want 200", n)
		}
		// A batch without a token must not inherit batch-2's.
		sendBatch(ctx, t, conn, db+".dedup", batch(1000))
		if n := count(); n != 300 {
			t.Fatalf("untokened batch after batch-2: %d rows, want 300 (token leaked?)", n)
		}
	})

	t.Run("engine errors are clickhouse exceptions", func(t *testing.T) {
		var ex *clickhouse.Exception
		err := conn.Exec(ctx, "SELECT * FROM "+db+".no_such_table")
		if !errors.As(err, &ex) || ex.Code != 60 {
			t.Errorf("Exec on unknown table: err = %v, want exception 60", err)
		}
		_, err = conn.Query(ctx, "SELECT * FROM "+db+".no_such_table")
		if !errors.As(err, &ex) || ex.Code != 60 {
			t.Errorf("Query on unknown table: err = %v, want exception 60", err)
		}
		if err := openHTTP(t, addr, "no_such_db").Ping(ctx); !errors.As(err, &ex) || ex.Code != 81 {
			t.Errorf("unknown database: err = %v, want exception 81", err)
		}
		// A failure after rows were sent arrives in-band.
		rows, err := conn.Query(ctx, "SELECT throwIf(number = 300000) FROM numbers(1000000)")
		if err == nil {
			for rows.Next() {
			}
			err = rows.Err()
			rows.Close()
		}
		if !errors.As(err, &ex) || ex.Code != 395 {
			t.Errorf("mid-stream failure: err = %v, want exception 395", err)
		}
		// An INSERT the engine rejects while the body is still arriving.
		if err := conn.Exec(ctx, "CREATE TABLE "+db+".checked (i UInt64, p String, CONSTRAINT small CHECK i < 1000) ENGINE = MergeTree ORDER BY i"); err != nil {
			t.Fatal(err)
		}
		b, err := conn.PrepareBatch(ctx, "INSERT INTO "+db+".checked")
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 200_000; i++ {
			if err := b.Append(uint64(i), strings.Repeat("q", 50)); err != nil {
				t.Fatal(err)
			}
		}
		if err := b.Send(); !errors.As(err, &ex) || ex.Code != 469 {
			t.Errorf("insert violating a constraint: err = %v, want exception 469 (VIOLATED_CONSTRAINT)", err)
		}
		if err := conn.Ping(ctx); err != nil {
			t.Errorf("ping after failures: %v", err)
		}
	})

	t.Run("concurrent batches and queries", func(t *testing.T) {
		if err := conn.Exec(ctx, "CREATE TABLE "+db+".conc (g UInt8, i UInt32, payload String) ENGINE = MergeTree ORDER BY (g, i)"); err != nil {
			t.Fatal(err)
		}
		const goroutines, rounds, per = 8, 10, 200
		eg, gctx := errgroup.WithContext(ctx)
		for g := 0; g < goroutines; g++ {
			eg.Go(func() error {
				for round := 0; round < rounds; round++ {
					b, err := conn.PrepareBatch(gctx, "INSERT INTO "+db+".conc")
					if err != nil {
						return err
					}
					for i := 0; i < per; i++ {
						if err := b.Append(uint8(g), uint32(round*per+i), strings.Repeat("x", i)); err != nil {
							return err
						}
					}
					if err := b.Send(); err != nil {
						return err
					}
					var n uint64
					if err := conn.QueryRow(gctx, "SELECT count() FROM "+db+".conc WHERE g = ?", uint8(g)).Scan(&n); err != nil {
						return err
					}
					if n != uint64((round+1)*per) {
						return fmt.Errorf("goroutine %d sees %d of its rows after round %d, want %d", g, n, round, (round+1)*per)
					}
				}
				return nil
			})
		}
		if err := eg.Wait(); err != nil {
			t.Fatal(err)
		}
		if n := countRows(ctx, t, conn, "SELECT count() FROM "+db+".conc"); n != goroutines*rounds*per {
			t.Errorf("rows = %d, want %d", n, goroutines*rounds*per)
		}
	})

	t.Run("large batch streams through", func(t *testing.T) {
		if err := conn.Exec(ctx, "CREATE TABLE "+db+".big (i UInt64, payload String) ENGINE = MergeTree ORDER BY i"); err != nil {
			t.Fatal(err)
		}
		const n = 300_000
		payload := strings.Repeat("p", 100)
		rows := make([][]any, 0, n)
		for i := 0; i < n; i++ {
			rows = append(rows, []any{uint64(i), payload})
		}
		sendBatch(ctx, t, conn, db+".big", rows)
		var cnt, bytesTotal uint64
		if err := conn.QueryRow(ctx, "SELECT count(), sum(length(payload)) FROM "+db+".big").Scan(&cnt, &bytesTotal); err != nil {
			t.Fatal(err)
		}
		if cnt != n || bytesTotal != n*100 {
			t.Errorf("big: %d rows, %d payload bytes; want %d, %d", cnt, bytesTotal, n, n*100)
		}
		// A large result comes back in many chunks.
		all, err := conn.Query(ctx, "SELECT i FROM "+db+".big ORDER BY i")
		if err != nil {
			t.Fatal(err)
		}
		defer all.Close()
		var next uint64
		for all.Next() {
			var i uint64
			if err := all.Scan(&i); err != nil {
				t.Fatal(err)
			}
			if i != next {
				t.Fatalf("row %d: i = %d", next, i)
			}
			next++
		}
		if err := all.Err(); err != nil || next != n {
			t.Errorf("read %d of %d rows: %v", next, n, err)
		}
	})
}

// TestIntegrationHTTPRaw covers what clickhouse-go does not send by default.
func TestIntegrationHTTPRaw(t *testing.T) {
	addr := startServer(t, WithMaxBodySize(1<<20))
	base := "http://" + addr + "/"
	post := func(t *testing.T, query string, body io.Reader, header map[string]string) (*http.Response, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, base+"?"+query, body)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range header {
			req.Header.Set(k, v)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res, string(b)
	}
	q := func(s string) string { return url.Values{"query": {s}}.Encode() }

	res, err := http.Get("http://" + addr + "/ping")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if string(b) != "Ok.\n" {
		t.Errorf("/ping = %q", b)
	}

	tbl := fmt.Sprintf("raw_%d", time.Now().UnixNano())
	if res, body := post(t, "", strings.NewReader("CREATE TABLE "+tbl+" (a UInt32, s String) ENGINE = Memory"), nil); res.StatusCode != 200 {
		t.Fatalf("create: %d %s", res.StatusCode, body)
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = io.WriteString(zw, "1,one\n2,two\n")
	_ = zw.Close()
	if res, body := post(t, q("INSERT INTO "+tbl+" FORMAT CSV"), &gz, map[string]string{"Content-Encoding": "gzip"}); res.StatusCode != 200 {
		t.Fatalf("gzip insert: %d %s", res.StatusCode, body)
	}
	if res, body := post(t, "", strings.NewReader("INSERT INTO "+tbl+" FORMAT TSV\n3\tthree\n"), nil); res.StatusCode != 200 {
		t.Fatalf("insert with the statement in the body: %d %s", res.StatusCode, body)
	}
	if res, body := post(t, q("SELECT a, s FROM "+tbl+" ORDER BY a")+"&default_format=CSV&wait_end_of_query=1", nil, nil); body != "1,\"one\"\n2,\"two\"\n3,\"three\"\n" {
		t.Errorf("select as CSV: %d %q", res.StatusCode, body)
	}
	if _, body := post(t, q("SELECT {n:UInt8} + 1, {s:String}")+"&param_n=41&param_s=x%5Ctab", nil, nil); body != "42\tx\\\\tab\n" && body != "42\tx\\tab\n" {
		t.Errorf("server-side parameters: %q", body)
	}
	if res, body := post(t, "", strings.NewReader("SET max_threads = 1"), nil); res.StatusCode != 200 {
		t.Errorf("SET: %d %s", res.StatusCode, body)
	}
	res, body := post(t, q("INSERT INTO "+tbl+" FORMAT CSV"), strings.NewReader(strings.Repeat("9,x\n", 300_000)), nil)
	if res.StatusCode != http.StatusRequestEntityTooLarge || res.Header.Get("X-ClickHouse-Exception-Code") == "" {
		t.Errorf("oversized body: %d %s", res.StatusCode, body)
	}
	res, body = post(t, q("SELECT 1")+"&compress=1", nil, nil)
	if res.StatusCode != http.StatusBadRequest || !strings.Contains(body, "compress") {
		t.Errorf("compress=1: %d %s", res.StatusCode, body)
	}
	res, body = post(t, q("SELECT 1"), strings.NewReader("x"), map[string]string{"Content-Encoding": "br"})
	if res.StatusCode != http.StatusBadRequest || !strings.Contains(body, "br") {
		t.Errorf("brotli body: %d %s", res.StatusCode, body)
	}
}

// TestIntegrationEngine covers the Engine API directly.
func TestIntegrationEngine(t *testing.T) {
	e := testEngine(t)
	ctx := context.Background()

	if _, err := Open("/nonexistent/libchdb.so", t.TempDir()); err == nil {
		t.Error("Open of a missing library succeeded")
	}
	if _, err := Open(shared.lib, t.TempDir()); !errors.Is(err, ErrAlreadyOpen) {
		t.Errorf("second Open: err = %v, want ErrAlreadyOpen", err)
	}

	tbl := fmt.Sprintf("eng_%d", time.Now().UnixNano())
	if _, err := e.Query(ctx, "CREATE TABLE "+tbl+" (a UInt32, s String) ENGINE = Memory", ""); err != nil {
		t.Fatal(err)
	}
	// RowBinary with a blank line and a NUL inside a string: inline data in
	// a plain query would be cut there.
	var rb []byte
	for i, s := range []string{"a\n\nb", "c\x00d"} {
		rb = binary.LittleEndian.AppendUint32(rb, uint32(i+1))
		rb = appendString(rb, s)
	}
	if err := e.Insert(ctx, "INSERT INTO "+tbl, "RowBinary", bytes.NewReader(rb)); err != nil {
		t.Fatal(err)
	}
	out, err := e.QueryWithParams(ctx, "SELECT groupArray(s) FROM "+tbl+" WHERE a >= {min:UInt32}", "TSV", map[string]string{"min": "1"})
	if err != nil || string(out) != "['a\\n\\nb','c\\0d']\n" {
		t.Errorf("QueryWithParams = %q, %v", out, err)
	}
	// Parameters on the one-shot path (a statement the engine cannot stream).
	if _, err := e.Run(ctx, Statement{SQL: "INSERT INTO " + tbl + " SELECT {a:UInt32}, {s:String}", Params: map[string]string{"a": "3", "s": "p\\tq"}}, io.Discard); err != nil {
		t.Fatal(err)
	}
	if out, err := e.Query(ctx, "SELECT s FROM "+tbl+" WHERE a = 3", "TSVRaw"); err != nil || string(out) != "p\tq\n" {
		t.Errorf("row inserted with parameters = %q, %v", out, err)
	}
	_, err = e.Query(ctx, "SELECT * FROM no_such_table_here", "")
	var ce *Error
	if !errors.As(err, &ce) || ce.Code != CodeUnknownTable {
		t.Errorf("unknown table: err = %v, want *Error with code 60", err)
	}
	if _, err := e.Query(ctx, "SET max_threads = 1", ""); !errors.As(err, &ce) || ce.Code != CodeUnsupportedMethod {
		t.Errorf("SET through Run: err = %v, want code %d", err, CodeUnsupportedMethod)
	}
	for _, multi := range []string{"SELECT 1; SELECT 2", "CREATE TABLE IF NOT EXISTS " + tbl + "_m (a UInt8) ENGINE = Memory; SET max_threads = 1"} {
		if _, err := e.Query(ctx, multi, ""); !errors.As(err, &ce) || ce.Code != CodeSyntaxError {
			t.Errorf("%q: err = %v, want code %d", multi, err, CodeSyntaxError)
		}
	}
	if out, err := e.Query(ctx, "SELECT toString(getSetting('max_threads')) != '1', currentDatabase()", ""); err != nil || string(out) != "1\tdefault\n" {
		t.Errorf("session after refused statements = %q, %v", out, err)
	}
	if _, err := e.Query(ctx, "CREATE TABLE "+tbl+"_s (a UInt8) ENGINE = Memory;", ""); err != nil {
		t.Errorf("one statement with a trailing semicolon: %v", err)
	}

	// A caller waiting for the engine gives up when its context ends, and a
	// running query stops at its next chunk when its context ends.
	started := make(chan struct{})
	longCtx, cancelLong := context.WithCancel(ctx)
	longDone := make(chan error, 1)
	go func() {
		_, err := e.Run(longCtx, Statement{SQL: "SELECT sleepEachRow(0.2) FROM numbers(50) SETTINGS max_block_size = 1, max_threads = 1"}, &signalWriter{started: started})
		longDone <- err
	}()
	<-started
	waitCtx, cancelWait := context.WithTimeout(ctx, 50*time.Millisecond)
	_, err = e.Query(waitCtx, "SELECT 1", "")
	cancelWait()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("query behind a running one: err = %v, want context.DeadlineExceeded", err)
	}
	cancelLong()
	if err := <-longDone; !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled long query: err = %v, want context.Canceled", err)
	}
	if out, err := e.Query(ctx, "SELECT 1", ""); err != nil || string(out) != "1\n" {
		t.Errorf("query after cancellation = %q, %v", out, err)
	}
}

// signalWriter closes started on the first write.
type signalWriter struct {
	started chan struct{}
	wrote   bool
}

func (w *signalWriter) Write(p []byte) (int, error) {
	if !w.wrote {
		w.wrote = true
		close(w.started)
	}
	return len(p), nil
}

// TestIntegrationHTTPSlowReader streams a result of several large blocks
// (about 13 MB each) to a client that reads steadily but slowly, for far
// longer than the front's I/O timeout. As with ClickHouse's
// http_send_timeout, the timeout bounds waiting for the client to accept
// any data, never the whole response nor one block: the client must get
// every row, with no exception. (The front used to cancel such queries
// with code 394 once the request's read deadline, left armed after the
// body was read, expired under net/http's background read, and to fail a
// block that took longer than the timeout to drain.)
func TestIntegrationHTTPSlowReader(t *testing.T) {
	// Long enough that a loaded machine (the race detector, other tests)
	// never stalls the reader for that long; the reader below is slow
	// enough that each block still takes several timeouts to drain.
	const timeout = 2 * time.Second
	addr := startServer(t, WithIOTimeout(timeout))
	const rows = 150_000
	query := url.Values{"query": {fmt.Sprintf("SELECT number, repeat('x', 200) FROM numbers(%d) ORDER BY number FORMAT TabSeparated", rows)}}.Encode()
	res, err := http.Post("http://"+addr+"/?"+query, "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(res.Body)
		t.Fatalf("status %d: %s", res.StatusCode, b)
	}
	// About 2 MB/s: each 13 MB block takes about three timeouts to drain,
	// and the whole response several times that.
	start := time.Now()
	var body bytes.Buffer
	buf := make([]byte, 256<<10)
	for {
		n, err := io.ReadFull(res.Body, buf)
		body.Write(buf[:n])
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			break
		}
		if err != nil {
			t.Fatalf("after %d bytes: %v", body.Len(), err)
		}
		time.Sleep(120 * time.Millisecond)
	}
	elapsed := time.Since(start)
	if bytes.Contains(body.Bytes(), []byte("__exception__")) {
		i := bytes.Index(body.Bytes(), []byte("__exception__"))
		t.Fatalf("the front broke off the result after %d bytes: %.300s", i, body.Bytes()[i:])
	}
	lines := bytes.Count(body.Bytes(), []byte("\n"))
	if lines != rows {
		t.Fatalf("%d rows (%d bytes) in %v, want %d", lines, body.Len(), elapsed, rows)
	}
	if elapsed < 4*timeout {
		t.Fatalf("the client read %d bytes in %v, not slowly enough to outlast the %v timeout: the test proves nothing", body.Len(), elapsed, timeout)
	}
	t.Logf("%d rows, %d MB read in %v with a %v I/O timeout", rows, body.Len()>>20, elapsed, timeout)
}
