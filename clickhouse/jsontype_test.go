package clickhouse

import (
	"strings"
	"testing"

	"github.com/walhouse/walhouse/schema"
)

func TestCheckJSONSupport(t *testing.T) {
	jsonLayout := map[string]schema.Layout{
		"public.t": {Columns: map[string]schema.ColumnLayout{"p": {Type: "JSON"}, "n": {Type: "String"}}},
	}
	for _, tc := range []struct {
		version string
		layouts map[string]schema.Layout
		want    string // "" for no error, else part of it
	}{
		{"24.8.4.13", nil, ""},
		{"24.8.4.13", map[string]schema.Layout{"public.t": {Columns: map[string]schema.ColumnLayout{"n": {Type: "String"}}}}, ""},
		{"26.7.2.1", jsonLayout, ""},
		{"25.3.1.1", jsonLayout, ""},
		{"25.2.9.1", jsonLayout, "ClickHouse 25.2.9.1 has no generally available JSON type, which the layout overrides of public.t.p need: upgrade ClickHouse to 25.3 or later"},
		{"24.8.4.13", jsonLayout, "upgrade ClickHouse to 25.3"},
		{"head", jsonLayout, `ClickHouse's version "head" is not MAJOR.MINOR`},
	} {
		err := checkJSONSupport(tc.version, tc.layouts)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: %v, want %q", tc.version, err, tc.want)
		}
	}
}
