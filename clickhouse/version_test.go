package clickhouse

import (
	"context"
	"strings"
	"testing"

	"github.com/walhouse/walhouse/schema"
)

func TestParseVersion(t *testing.T) {
	for _, tc := range []struct {
		text string
		want serverVersion
		ok   bool
	}{
		{"26.7.2.1", serverVersion{26, 7}, true},
		{"23.3.1.2823", serverVersion{23, 3}, true},
		{"23.8.16.42.altinitystable", serverVersion{23, 8}, true},
		{"24.10", serverVersion{24, 10}, true},
		{" 25.3.1.1\n", serverVersion{25, 3}, true},
		{"24", serverVersion{}, false},
		{"", serverVersion{}, false},
		{"head", serverVersion{}, false},
		{"v24.8.1", serverVersion{}, false},
		{"24.x.1", serverVersion{}, false},
		{"-1.3", serverVersion{}, false},
	} {
		got, ok := parseVersion(tc.text)
		if got != tc.want || ok != tc.ok {
			t.Errorf("parseVersion(%q) = %v, %v; want %v, %v", tc.text, got, ok, tc.want, tc.ok)
		}
	}
}

func TestServerVersionBefore(t *testing.T) {
	for _, tc := range []struct {
		v, o serverVersion
		want bool
	}{
		{serverVersion{23, 2}, serverVersion{23, 3}, true},
		{serverVersion{22, 12}, serverVersion{23, 3}, true},
		{serverVersion{23, 3}, serverVersion{23, 3}, false},
		{serverVersion{23, 10}, serverVersion{23, 3}, false}, // numbers, not text: 10 > 3
		{serverVersion{24, 1}, serverVersion{23, 3}, false},
	} {
		if got := tc.v.before(tc.o); got != tc.want {
			t.Errorf("%v.before(%v) = %v, want %v", tc.v, tc.o, got, tc.want)
		}
	}
}

func TestCheckServer(t *testing.T) {
	plain := map[string]schema.Layout{"public.t": {Columns: map[string]schema.ColumnLayout{"n": {Type: "String"}}}}
	jsonLayout := map[string]schema.Layout{
		"public.t": {Columns: map[string]schema.ColumnLayout{"p": {Type: "JSON"}, "n": {Type: "String"}}},
	}
	for _, tc := range []struct {
		version string
		layouts map[string]schema.Layout
		want    string // "" for no error, else part of it
	}{
		{"26.7.2.1", nil, ""}, // the local engine
		{"23.3.1.2823", nil, ""},
		{"23.10.1.1", plain, ""},
		{"24.8.4.13", plain, ""},
		{"23.2.7.32", nil, "ClickHouse 23.2.7.32 is older than 23.3, which walhouse needs (every insert sets input_format_native_allow_types_conversion, which older servers refuse): upgrade ClickHouse to 23.3 or later"},
		{"22.8.15.25.altinitystable", plain, "ClickHouse 22.8.15.25.altinitystable is older than 23.3"},
		{"head", nil, `ClickHouse's version() is "head", not MAJOR.MINOR…, so walhouse cannot tell whether it is 23.3 or later`},
		{"26.7.2.1", jsonLayout, ""},
		{"25.3.1.1", jsonLayout, ""},
		{"25.2.9.1", jsonLayout, "ClickHouse 25.2.9.1 has no generally available JSON type, which the layout overrides of public.t.p need: upgrade ClickHouse to 25.3 or later"},
		{"24.8.4.13", jsonLayout, "upgrade ClickHouse to 25.3"},
		{"23.1.1.1", jsonLayout, "is older than 23.3"}, // the general minimum first
	} {
		err := checkServer(tc.version, tc.layouts)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: %v, want %q", tc.version, err, tc.want)
		}
	}
}

// TestIntegrationServerVersion: the ClickHouse of the tests passes the
// check a Writer makes at start, for a layout with a JSON override too,
// and its version() is what parseVersion reads.
func TestIntegrationServerVersion(t *testing.T) {
	ctx := context.Background()
	conn := testConn(t)
	var text string
	if err := conn.QueryRow(ctx, "SELECT version()").Scan(&text); err != nil {
		t.Fatal(err)
	}
	if _, ok := parseVersion(text); !ok {
		t.Fatalf("version() %q is not read", text)
	}
	jsonLayout := map[string]schema.Layout{"public.t": {Columns: map[string]schema.ColumnLayout{"p": {Type: "JSON"}}}}
	if err := checkServerVersion(ctx, conn, jsonLayout); err != nil {
		t.Errorf("ClickHouse %s refused: %v", text, err)
	}
}
