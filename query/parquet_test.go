package query

import (
	"strings"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go"
)

func TestUnscaledDecimal(t *testing.T) {
	tests := []struct {
		in      string
		scale   int
		want    int64
		wantErr string
	}{
		{"0", 2, 0, ""},
		{"12.5", 2, 1250, ""},
		{"-12.5", 2, -1250, ""},
		{"-0.01", 2, -1, ""},
		{"123", 0, 123, ""},
		{"0012.30", 3, 12300, ""},
		{"999999999999999999", 0, 999999999999999999, ""},
		{"9223372036854775808", 0, 0, "64-bit"},
		{"1.234", 2, 0, "decimal places"},
		{"1e5", 0, 0, "not a decimal"},
		{"", 2, 0, "not a decimal"},
	}
	for _, tt := range tests {
		got, err := unscaledDecimal(tt.in, tt.scale)
		switch {
		case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
			t.Errorf("unscaledDecimal(%q, %d) = %d, %v; want an error about %q", tt.in, tt.scale, got, err, tt.wantErr)
		case tt.wantErr == "" && (err != nil || got != tt.want):
			t.Errorf("unscaledDecimal(%q, %d) = %d, %v; want %d", tt.in, tt.scale, got, err, tt.want)
		}
	}
}

func TestDaysSinceEpoch(t *testing.T) {
	tests := []struct {
		in   time.Time
		want int64
	}{
		{time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC), 0},
		{time.Date(1970, 1, 2, 23, 59, 59, 0, time.UTC), 1},
		{time.Date(1969, 12, 31, 12, 0, 0, 0, time.UTC), -1},
		{time.Date(1900, 1, 1, 0, 0, 0, 0, time.UTC), -25567},
		{time.Date(2024, 6, 1, 0, 0, 0, 0, time.UTC), 19875},
		{time.Date(2024, 6, 1, 1, 0, 0, 0, time.FixedZone("CEST", 2*3600)), 19874}, // 23:00 UTC the day before
	}
	for _, tt := range tests {
		if got := daysSinceEpoch(tt.in); got != tt.want {
			t.Errorf("daysSinceEpoch(%v) = %d, want %d", tt.in, got, tt.want)
		}
	}
}

func TestParquetNode(t *testing.T) {
	tests := []struct {
		chType string
		want   string // the Parquet logical or physical type
	}{
		{"String", "STRING"},
		{"LowCardinality(Nullable(String))", "STRING"},
		{"FixedString(3)", "STRING"},
		{"Int8", "INT(8,true)"},
		{"Int64", "INT(64,true)"},
		{"UInt32", "INT(32,false)"},
		{"UInt64", "INT(64,false)"},
		{"Int128", "STRING"},
		{"Float32", "FLOAT"},
		{"Float64", "DOUBLE"},
		{"Decimal(9, 2)", "DECIMAL(9,2)"},
		{"Nullable(Decimal(12, 2))", "DECIMAL(12,2)"},
		{"Decimal(38, 10)", "STRING"},
		{"Bool", "BOOLEAN"},
		{"UUID", "UUID"},
		{"Date32", "DATE"},
		{"DateTime64(6, 'UTC')", "TIMESTAMP(isAdjustedToUTC=true,unit=MICROS)"},
		{"Array(String)", "STRING"},
		{"Map(String, UInt64)", "STRING"},
	}
	for _, tt := range tests {
		if got := parquetNode(parseColType(tt.chType)).Type().String(); got != tt.want {
			t.Errorf("%s: Parquet type %s, want %s", tt.chType, got, tt.want)
		}
	}
}

func TestParquetSchemaRefusesTableColumnName(t *testing.T) {
	_, err := parquetSchema([]*Table{{Name: parquetTableColumn}})
	if err == nil {
		t.Fatalf("a table named %s was accepted", parquetTableColumn)
	}
	sch, err := parquetSchema([]*Table{{Name: "orders", Columns: []Column{{Name: "id", typ: parseColType("Int64")}, {Name: "note", typ: parseColType("Nullable(String)")}, {Name: "_is_deleted", typ: parseColType("UInt8")}}}})
	if err != nil {
		t.Fatal(err)
	}
	for path, def := range map[string]int{"orders.id": 1, "orders.note": 2, parquetTableColumn: 0} {
		leaf, ok := sch.Lookup(strings.Split(path, ".")...)
		if !ok || leaf.MaxDefinitionLevel != def {
			t.Errorf("%s: present %v, definition level %d, want %d", path, ok, leaf.MaxDefinitionLevel, def)
		}
	}
	if _, ok := sch.Lookup("orders", "_is_deleted"); ok {
		t.Error("the schema has _is_deleted, which exports leave out")
	}
	var _ parquet.Node = sch
}
