package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/walhouse/walhouse/cli"
	"github.com/walhouse/walhouse/record"
)

func TestRelayoutTables(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		cluster string
		want    []record.Source
		errs    []string // each must be in the error
	}{
		{name: "one", args: []string{"public.orders"}, want: []record.Source{{Schema: "public", Table: "orders"}}},
		{name: "several", args: []string{"public.orders", "sales.items"}, want: []record.Source{{Schema: "public", Table: "orders"}, {Schema: "sales", Table: "items"}}},
		{name: "dot in the table", args: []string{"public.a.b"}, want: []record.Source{{Schema: "public", Table: "a.b"}}},
		{name: "none", errs: []string{"want the tables to relayout"}},
		{name: "no schema", args: []string{"orders", ".x", "public."}, errs: []string{`"orders": want schema.table`, `".x": want schema.table`, `"public.": want schema.table`}},
		{name: "twice", args: []string{"public.orders", "public.orders"}, errs: []string{`"public.orders" is named twice`}},
		{name: "cluster", args: []string{"public.orders"}, cluster: "c1", errs: []string{"not supported on a cluster yet", "EXCHANGE TABLES … ON CLUSTER"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := relayoutTables(tc.args, tc.cluster)
			if len(tc.errs) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				if len(got) != len(tc.want) {
					t.Fatalf("got %v, want %v", got, tc.want)
				}
				for i := range got {
					if got[i] != tc.want[i] {
						t.Errorf("table %d: got %v, want %v", i, got[i], tc.want[i])
					}
				}
				return
			}
			var uerr *cli.UsageError
			if !errors.As(err, &uerr) {
				t.Fatalf("got %v, want a usage error", err)
			}
			for _, e := range tc.errs {
				if !strings.Contains(err.Error(), e) {
					t.Errorf("error %q lacks %q", err, e)
				}
			}
		})
	}
}

// TestRelayoutUsage runs the command line up to its first connection:
// usage errors exit 2 before anything is dialled.
func TestRelayoutUsage(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"relayout"}, "want the tables to relayout"},
		{[]string{"relayout", "--drop-old", "public.orders"}, "unexpected arguments"},
		{[]string{"relayout", "orders"}, "want schema.table"},
		{[]string{"relayout", "public.orders", "--cluster", "c1"}, "not supported on a cluster yet"},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := run(tc.args, &stdout, &stderr); code != cli.ExitUsage {
				t.Fatalf("exit %d, want %d; stderr:\n%s", code, cli.ExitUsage, stderr.String())
			}
			if !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("stderr lacks %q:\n%s", tc.want, stderr.String())
			}
		})
	}
}
