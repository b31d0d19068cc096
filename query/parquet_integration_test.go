package query

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/csv"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/parquet-go/parquet-go"

	"github.com/walhouse/walhouse/harness/testenv"
	"github.com/walhouse/walhouse/schema"
)

// TestIntegrationExportParquet exports one subject from two tables of
// different shapes as Parquet, JSON Lines and CSV, reads the Parquet file
// back with parquet-go, and compares it with the JSON Lines export value
// by value (and the row counts of all three): every row, every NULL, every
// type. The Parquet file's row groups stay within their bound, and the
// manifest's sha256 is the file's.
func TestIntegrationExportParquet(t *testing.T) {
	f := newCHFixture(t)
	db := schema.QuoteIdent(f.db)
	const n = 70_000 // more than one row group
	f.exec(t, fmt.Sprintf(`INSERT INTO %s.orders (tenant_id, id, customer_id, status, amount, created_at, due, _version, _is_deleted, _commit_ts)
		SELECT 'acme', number, 'cus_pq', if(number %% 5 = 0, NULL, 'paid'), if(number %% 7 = 0, NULL, toDecimal64(number %% 100000, 2) - 500),
		       if(number %% 11 = 0, NULL, toDateTime64('1969-12-31 23:59:00.123456', 6, 'UTC') + number), if(number %% 13 = 0, NULL, toDate32('1960-01-01') + number %% 40000), 1, 0, now64(6)
		FROM numbers(%d)`, db, n))
	f.exec(t, fmt.Sprintf(`INSERT INTO %s.orders (tenant_id, id, customer_id, status, _version, _is_deleted, _commit_ts) VALUES
		('globex', 1, 'cus_pq', 'other tenant', 1, 0, now64(6)), ('acme', 999999, 'cus_other', 'other subject', 1, 0, now64(6))`, db))
	f.exec(t, fmt.Sprintf(`CREATE TABLE %s.items (tenant_id String, id Int64, customer_id String, qty UInt32, big UInt64, price Float64, ratio Nullable(Float32),
		ok Bool, uid UUID, tags Array(String), huge Int128, small Int8, code LowCardinality(String), note Nullable(String),
		_version UInt64, _is_deleted UInt8, _commit_ts DateTime64(6, 'UTC'), _synced_at DateTime64(6, 'UTC') DEFAULT now64(6))
		ENGINE = ReplacingMergeTree(_version, _is_deleted) ORDER BY (tenant_id, id)`, db))
	f.exec(t, fmt.Sprintf(`INSERT INTO %s.items (tenant_id, id, customer_id, qty, big, price, ratio, ok, uid, tags, huge, small, code, note, _version, _is_deleted, _commit_ts)
		SELECT 'acme', number, 'cus_pq', number, 18446744073709551615 - number, number / 3, if(number %% 2 = 0, NULL, toFloat32(number) / 4), number %% 2 = 0,
		       generateUUIDv4(number), ['a', 'b\t"c"', toString(number)], toInt128('-170141183460469231731687303715884105728') + number, toInt8(number %% 256 - 128), 'lc',
		       if(number = 3, 'line\nbreak, "quoted"', NULL), 1, 0, now64(6)
		FROM numbers(300)`, db))

	export := func(format Format) ([]byte, http.Header, Manifest) {
		t.Helper()
		body := fmt.Sprintf(`{"subject":{"column":"customer_id","value":"cus_pq"},"tables":["orders","items"],"format":%q}`, format)
		resp, data := sendRead(t, "POST", f.srv.URL+"/v1/exports", keyAcme, strings.NewReader(body))
		if resp.StatusCode != http.StatusOK || resp.Trailer.Get(trailerStatus) != "complete" {
			t.Fatalf("%s export: status %d, trailers %v: %.300s", format, resp.StatusCode, resp.Trailer, data)
		}
		var m Manifest
		if r := f.call(t, "GET", resp.Header.Get("X-Walhouse-Manifest"), keyAcme, nil, &m); r.StatusCode != 200 {
			t.Fatalf("%s manifest: %d", format, r.StatusCode)
		}
		sum := sha256.Sum256(data)
		if m.SHA256 != hex.EncodeToString(sum[:]) || resp.Trailer.Get(trailerSHA256) != m.SHA256 || m.Bytes != int64(len(data)) || !m.Complete || m.Format != format {
			t.Errorf("%s: manifest %+v does not describe the %d bytes received (sha256 %x)", format, m, len(data), sum)
		}
		return data, resp.Header, m
	}

	pq, hdr, pm := export(Parquet)
	if ct := hdr.Get("Content-Type"); ct != "application/vnd.apache.parquet" {
		t.Errorf("Parquet export served as %q", ct)
	}
	jl, _, jm := export(JSONL)
	cs, _, cm := export(CSV)
	want := map[string]int64{"orders": n, "items": 300}
	for _, m := range []Manifest{pm, jm, cm} {
		if m.Rows != n+300 || len(m.Tables) != 2 || m.Tables[0].Rows != want[m.Tables[0].Table] || m.Tables[1].Rows != want[m.Tables[1].Table] {
			t.Errorf("%s manifest counts %d rows, tables %+v; want %v", m.Format, m.Rows, m.Tables, want)
		}
	}

	// The JSON Lines rows, by table and id: the reference.
	ref := map[string]map[string]map[string]any{"orders": {}, "items": {}}
	dec := json.NewDecoder(bytes.NewReader(jl))
	dec.UseNumber()
	for {
		var line struct {
			Table string
			Row   map[string]any
		}
		if err := dec.Decode(&line); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		ref[line.Table][fmt.Sprint(line.Row["id"])] = line.Row
	}
	// CSV: same rows per table (a header line per table).
	cr := csv.NewReader(bytes.NewReader(cs))
	cr.FieldsPerRecord = -1 // each table has its own columns
	recs, err := cr.ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	csvRows := map[string]int64{}
	for _, r := range recs {
		if r[0] != "table" {
			csvRows[r[0]]++
		}
	}

	file, err := parquet.OpenFile(bytes.NewReader(pq), int64(len(pq)))
	if err != nil {
		t.Fatalf("parquet-go cannot open the export: %v", err)
	}
	for i, rg := range file.RowGroups() {
		if rg.NumRows() > parquetRowGroupRows {
			t.Errorf("row group %d has %d rows, above the bound %d", i, rg.NumRows(), parquetRowGroupRows)
		}
	}
	if len(file.RowGroups()) < 2 {
		t.Errorf("%d rows in %d row group(s), want them cut at %d rows", n+300, len(file.RowGroups()), parquetRowGroupRows)
	}
	tables := map[string]*Table{}
	for _, name := range []string{"orders", "items"} {
		if tables[name], err = f.api.catalog.Table(context.Background(), name); err != nil {
			t.Fatal(err)
		}
	}
	paths := file.Schema().Columns()
	r := parquet.NewReader(bytes.NewReader(pq))
	defer r.Close()
	pqRows := map[string]int64{}
	rows := make([]parquet.Row, 512)
	mismatches := 0
	for {
		k, err := r.ReadRows(rows)
		for _, row := range rows[:k] {
			got := map[string]parquet.Value{}
			var table string
			for _, v := range row {
				p := paths[v.Column()]
				if len(p) == 1 && p[0] == parquetTableColumn {
					table = v.String()
				} else if len(p) == 2 {
					got[strings.Join(p, ".")] = v
				}
			}
			pqRows[table]++
			tbl := tables[table]
			id := fmt.Sprint(got[table+".id"].Int64())
			want, ok := ref[table][id]
			if !ok {
				t.Fatalf("Parquet row %s %s is not in the JSON Lines export", table, id)
			}
			for _, c := range exportColumns(tbl) {
				g, w := canonicalParquet(c.typ, got[table+"."+c.Name]), canonicalJSON(c.typ, want[c.Name])
				if g != w && mismatches < 10 {
					mismatches++
					t.Errorf("%s id %s column %s (%s): Parquet %q, JSON Lines %q", table, id, c.Name, c.Type, g, w)
				}
			}
			// Columns of the other table are absent from this row.
			for path, v := range got {
				if !strings.HasPrefix(path, table+".") && !v.IsNull() {
					t.Fatalf("%s row %s has a value in %s", table, id, path)
				}
			}
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	for name, w := range want {
		if pqRows[name] != w || int64(len(ref[name])) != w || csvRows[name] != w {
			t.Errorf("%s: %d Parquet rows, %d JSON Lines rows, %d CSV rows; want %d each", name, pqRows[name], len(ref[name]), csvRows[name], w)
		}
	}
	t.Logf("%d rows: Parquet %d KiB in %d row groups, JSON Lines %d KiB, CSV %d KiB", n+300, len(pq)>>10, len(file.RowGroups()), len(jl)>>10, len(cs)>>10)

	// A table whose name is the Parquet file's table column is refused
	// before anything streams.
	f.exec(t, fmt.Sprintf("CREATE TABLE %s.%s (tenant_id String, id Int64, customer_id String, _version UInt64, _is_deleted UInt8) ENGINE = ReplacingMergeTree(_version, _is_deleted) ORDER BY (tenant_id, id)", db, schema.QuoteIdent(parquetTableColumn)))
	f.exec(t, fmt.Sprintf("INSERT INTO %s.%s VALUES ('acme', 1, 'cus_pq', 1, 0)", db, schema.QuoteIdent(parquetTableColumn)))
	var e queryResp
	if resp := f.call(t, "POST", "/v1/exports", keyAcme, `{"subject":{"column":"customer_id","value":"cus_pq"},"format":"parquet"}`, &e); resp.StatusCode != 400 || e.Error == nil || !strings.Contains(e.Error.Message, parquetTableColumn) {
		t.Errorf("Parquet export with a table named %s: %d %+v", parquetTableColumn, resp.StatusCode, e.Error)
	}
}

// canonicalParquet renders a Parquet value of a column of type t as text
// comparable with canonicalJSON.
func canonicalParquet(t colType, v parquet.Value) string {
	if v.IsNull() {
		return "NULL"
	}
	switch t.Kind {
	case kindInt:
		switch {
		case t.intBits > 64:
			return v.String()
		case t.unsigned:
			return strconv.FormatUint(v.Uint64(), 10)
		default:
			return strconv.FormatInt(v.Int64(), 10)
		}
	case kindFloat:
		if t.Param == "Float32" {
			return strconv.FormatFloat(float64(v.Float()), 'g', -1, 32)
		}
		return strconv.FormatFloat(v.Double(), 'g', -1, 64)
	case kindDecimal:
		if t.precision > 18 {
			return ratText(v.String())
		}
		return new(big.Rat).SetFrac(big.NewInt(v.Int64()), new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(t.scale)), nil)).RatString()
	case kindBool:
		return strconv.FormatBool(v.Boolean())
	case kindUUID:
		u, _ := uuid.FromBytes(v.ByteArray())
		return u.String()
	case kindDate:
		return time.Unix(int64(v.Int32())*86400, 0).UTC().Format(time.DateOnly)
	case kindDateTime:
		return time.UnixMicro(v.Int64()).UTC().Format(time.RFC3339Nano)
	default:
		return v.String()
	}
}

// canonicalJSON renders a JSON Lines value (decoded with UseNumber) of a
// column of type t as canonicalParquet does.
func canonicalJSON(t colType, v any) string {
	if v == nil {
		return "NULL"
	}
	switch t.Kind {
	case kindDecimal:
		return ratText(fmt.Sprint(v))
	case kindFloat:
		f, _ := strconv.ParseFloat(fmt.Sprint(v), 64)
		if t.Param == "Float32" {
			return strconv.FormatFloat(f, 'g', -1, 32)
		}
		return strconv.FormatFloat(f, 'g', -1, 64)
	case kindOther:
		b, _ := json.Marshal(v)
		return string(b)
	default:
		return fmt.Sprint(v)
	}
}

func ratText(s string) string {
	r, ok := new(big.Rat).SetString(s)
	if !ok {
		return "not a number: " + s
	}
	return r.RatString()
}

// TestIntegrationExportCommandParquet runs `walhouse export` to a .parquet
// file: the format follows the extension, the manifest next to it has the
// file's sha256 and row counts, and parquet-go reads the rows back.
func TestIntegrationExportCommandParquet(t *testing.T) {
	f := newCHFixture(t)
	env := testenv.Require(t, "clickhouse")
	f.exec(t, fmt.Sprintf(`INSERT INTO %s.orders (tenant_id, id, customer_id, status, amount, _version, _is_deleted, _commit_ts)
		SELECT if(number < 40000, 'acme', 'globex'), number, 'cus_cli', 'paid', toDecimal64(number, 2), 1, 0, now64(6) FROM numbers(40100)`, schema.QuoteIdent(f.db)))
	dir := t.TempDir()
	bin, err := testenv.BuildBinary(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "subject.parquet")
	cmd := exec.Command(bin, "export", "--clickhouse", env.ClickHouse, "--database", f.db,
		"--tenant", "acme", "--subject-column", "customer_id", "--subject", "cus_cli", "--out", out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("walhouse export: %v\n%s", err, b)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	mb, err := os.ReadFile(out + ".manifest.json")
	if err != nil {
		t.Fatal(err)
	}
	var m Manifest
	if err := json.Unmarshal(mb, &m); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	if m.Format != Parquet || !m.Complete || m.Rows != 40000 || m.SHA256 != hex.EncodeToString(sum[:]) || m.Bytes != int64(len(data)) {
		t.Errorf("manifest %s does not describe the %d-byte file (sha256 %x)", mb, len(data), sum)
	}
	file, err := parquet.OpenFile(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatalf("parquet-go cannot open %s: %v", out, err)
	}
	if file.NumRows() != 40000 {
		t.Errorf("%s has %d rows, want 40000", out, file.NumRows())
	}
}
