package schema

import (
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/walhouse/walhouse/record"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

func numericMod(p, s int) int32 { return int32(p<<16|s) + 4 }

func TestMap(t *testing.T) {
	tests := []struct {
		col      record.Column
		nullable bool
		want     string
		fallback bool
	}{
		{record.Column{Type: "int8", TypMod: -1}, false, "Int64", false},
		{record.Column{Type: "int4", TypMod: -1}, true, "Nullable(Int32)", false},
		{record.Column{Type: "numeric", TypMod: numericMod(12, 2)}, true, "Nullable(Decimal(12, 2))", false},
		{record.Column{Type: "numeric", TypMod: -1}, true, "Nullable(Decimal(76, 38))", false},
		{record.Column{Type: "numeric", TypMod: numericMod(80, 2)}, true, "Nullable(Decimal(76, 38))", false},
		{record.Column{Type: "timestamptz", TypMod: -1}, true, "Nullable(DateTime64(6, 'UTC'))", false},
		{record.Column{Type: "date", TypMod: -1}, false, "Date32", false},
		{record.Column{Type: "uuid", TypMod: -1}, false, "UUID", false},
		{record.Column{Type: "jsonb", TypMod: -1}, true, "Nullable(String)", false},
		{record.Column{Type: "text", Array: true, TypMod: -1}, true, "Array(Nullable(String))", false},
		{record.Column{Type: "int4", Array: true, TypMod: -1}, false, "Array(Nullable(Int32))", false},
		{record.Column{Type: "mood", Enum: true, TypMod: -1}, true, "Nullable(String)", false},
		{record.Column{Type: "hstore", TypMod: -1}, true, "Nullable(String)", true},
		{record.Column{Type: "bool", TypMod: -1}, true, "Nullable(Bool)", false},
	}
	for _, tc := range tests {
		got := Map(tc.col, tc.nullable)
		if got.DDL != tc.want || (got.Fallback != "") != tc.fallback {
			t.Errorf("Map(%+v, %v) = %q (fallback %q), want %q (fallback %v)", tc.col, tc.nullable, got.DDL, got.Fallback, tc.want, tc.fallback)
		}
	}
}

// rfc3339 parses s, an RFC 3339 time the test wrote, or fails the test.
func rfc3339(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestConvert(t *testing.T) {
	ts := func(s string) time.Time { return rfc3339(t, s) }
	str := func(s string) *string { return &s }
	i32 := func(v int32) *int32 { return &v }
	tests := []struct {
		col     record.Column
		text    string
		want    any
		wantErr bool
	}{
		{record.Column{Type: "bool"}, "t", true, false},
		{record.Column{Type: "bool"}, "x", nil, true},
		{record.Column{Type: "int2"}, "-32768", int16(-32768), false},
		{record.Column{Type: "int2"}, "32768", nil, true},
		{record.Column{Type: "int8"}, "9223372036854775807", int64(9223372036854775807), false},
		{record.Column{Type: "float8"}, "NaN", nil, false}, // checked separately
		{record.Column{Type: "float8"}, "-Infinity", nil, false},
		{record.Column{Type: "numeric", TypMod: numericMod(12, 2)}, "12.50", "12.50", false},
		{record.Column{Type: "numeric"}, "NaN", nil, false},
		{record.Column{Type: "bytea"}, `\x00ff41`, "\x00\xffA", false},
		{record.Column{Type: "bytea"}, `plain`, nil, true},
		{record.Column{Type: "timestamptz"}, "2024-01-15 10:00:00.123456+00", ts("2024-01-15T10:00:00.123456Z"), false},
		{record.Column{Type: "timestamptz"}, "2024-01-15 10:00:00+05:30", ts("2024-01-15T04:30:00Z"), false},
		{record.Column{Type: "timestamp"}, "2024-01-15 10:00:00", ts("2024-01-15T10:00:00Z"), false},
		{record.Column{Type: "timestamptz"}, "infinity", maxTime, false},
		{record.Column{Type: "timestamptz"}, "0044-03-15 00:00:00+00 BC", minDate, false},
		{record.Column{Type: "date"}, "1850-06-01", minDate, false},
		{record.Column{Type: "date"}, "2024-02-29", ts("2024-02-29T00:00:00Z"), false},
		{record.Column{Type: "date"}, "-infinity", minDate, false},
		{record.Column{Type: "text", Array: true}, `{a,"b c",NULL,"x\"y",""}`, []*string{str("a"), str("b c"), nil, str(`x"y`), str("")}, false},
		{record.Column{Type: "int4", Array: true}, `{{1,2},{3,NULL}}`, []*int32{i32(1), i32(2), i32(3), nil}, false},
		{record.Column{Type: "int4", Array: true}, `[0:1]={7,8}`, []*int32{i32(7), i32(8)}, false},
		{record.Column{Type: "int4", Array: true}, `{}`, []*int32{}, false},
		{record.Column{Type: "int4", Array: true}, `{"unterminated}`, nil, true},
		{record.Column{Type: "int4", Array: true}, `1,2`, nil, true},
	}
	for _, tc := range tests {
		got, err := Map(tc.col, true).Convert(tc.text)
		if (err != nil) != tc.wantErr {
			t.Errorf("%s %q: err = %v, wantErr %v", tc.col.Type, tc.text, err, tc.wantErr)
			continue
		}
		if tc.wantErr || tc.col.Type == "float8" {
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s %q = %#v, want %#v", tc.col.Type, tc.text, got, tc.want)
		}
	}
	if v, _ := Map(record.Column{Type: "float8"}, true).Convert("NaN"); v.(float64) == v.(float64) {
		t.Errorf("NaN converted to %v", v)
	}
}

func TestNull(t *testing.T) {
	if v := Map(record.Column{Type: "int4", Array: true}, true).Null(); !reflect.DeepEqual(v, []*int32{}) {
		t.Errorf("NULL int4[] = %#v, want an empty []*int32", v)
	}
	if v := Map(record.Column{Type: "text"}, true).Null(); v != nil {
		t.Errorf("NULL text = %#v, want nil", v)
	}
}

func TestColumnComment(t *testing.T) {
	c := columnComment(4, 0x16B3748)
	if c != " COMMENT 'walhouse:attnum=4,lsn=0/16B3748'" {
		t.Errorf("columnComment = %q", c)
	}
	n, l, dropped := parseColumnComment(strings.Trim(strings.TrimPrefix(c, " COMMENT "), "'"))
	if n != 4 || l != 0x16B3748 || dropped {
		t.Errorf("parseColumnComment = %d, %v, %v", n, l, dropped)
	}
	if n, _, dropped := parseColumnComment("walhouse:attnum=7,lsn=0/1,dropped"); n != 7 || !dropped {
		t.Errorf("dropped comment parsed as %d, %v", n, dropped)
	}
	if n, _, _ := parseColumnComment("a user's own comment"); n != 0 {
		t.Errorf("foreign comment parsed as attnum %d", n)
	}
	if columnComment(0, 1) != "" {
		t.Error("a column without attnum got a comment")
	}
}

func TestQuoteIdent(t *testing.T) {
	for in, want := range map[string]string{
		"orders":       "`orders`",
		"Mixed Case":   "`Mixed Case`",
		"we`ird\\":     "`we\\`ird\\\\`",
		"drop;--":      "`drop;--`",
		"zero\x00byte": "`zero\\0byte`",
	} {
		if got := QuoteIdent(in); got != want {
			t.Errorf("QuoteIdent(%q) = %s, want %s", in, got, want)
		}
	}
}

func TestNewTable(t *testing.T) {
	cols := []record.Column{
		{Name: "tenant_id", Type: "text", TypMod: -1, Key: true},
		{Name: "id", Type: "int8", TypMod: -1, Key: true, Attnum: 2},
		{Name: "Amount €", Type: "numeric", TypMod: numericMod(12, 2), Attnum: 4},
		{Name: "created_at", Type: "timestamptz", TypMod: -1},
		{Name: "tags", Type: "text", Array: true, TypMod: -1},
	}
	src := record.Source{ID: "x", Schema: "sales", Table: "orders"}
	tbl, err := NewTable(src, "tenant_id", cols, Options{Database: "walhouse"})
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "orders.sql", tbl.CreateDDL(0x16B3748))

	noTenant, err := NewTable(record.Source{Schema: "public", Table: "plans"}, "", cols[1:], Options{Database: "walhouse"})
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "plans.sql", noTenant.CreateDDL(0x16B3748))

	// Partitions by a hash of the tenant, another granularity; a monthly
	// partition column wins over tenant partitions.
	for name, opts := range map[string]Options{
		"orders_tenant_partitions.sql": {Database: "walhouse", TenantPartitions: 8, IndexGranularity: 8192},
		"orders_monthly.sql":           {Database: "walhouse", PartitionBy: "created_at", TenantPartitions: 8},
	} {
		c := slices.Clone(cols)
		c[3].Key = true // created_at, for the monthly partition
		tbl, err := NewTable(src, "tenant_id", c, opts)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		golden(t, name, tbl.CreateDDL(0x16B3748))
	}

	for name, tc := range map[string]struct {
		cols []record.Column
		opts Options
		want string
	}{
		"no key":            {[]record.Column{{Name: "tenant_id", Type: "text", Key: true}, {Name: "v", Type: "text"}}, Options{}, "no primary key"},
		"meta clash":        {append(cols[:2:2], record.Column{Name: "_version", Type: "int8"}), Options{}, "clashes"},
		"array key":         {[]record.Column{{Name: "tenant_id", Type: "text", Key: true}, {Name: "ids", Type: "int8", Array: true, Key: true}}, Options{}, "its key or tenant column \"ids\" is an array"},
		"array tenant":      {[]record.Column{{Name: "tenant_id", Type: "text", Array: true, Key: true}, {Name: "id", Type: "int8", Key: true}}, Options{}, "its key or tenant column \"tenant_id\" is an array"},
		"partition missing": {cols, Options{PartitionBy: "nope"}, "does not exist"},
		"partition not key": {cols, Options{PartitionBy: "created_at"}, "must be part of the primary key"},
		"partition type":    {cols, Options{PartitionBy: "id"}, "date or timestamp"},
		"negative buckets":  {cols, Options{TenantPartitions: -1}, "must not be negative"},
		"negative granule":  {cols, Options{IndexGranularity: -8192}, "must not be negative"},
	} {
		if _, err := NewTable(src, "tenant_id", tc.cols, tc.opts); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", name, err, tc.want)
		}
	}
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./schema -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs:\n got:\n%s\nwant:\n%s", name, got, want)
	}
}
