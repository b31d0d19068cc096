package capture

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pglogrepl"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/walhouse/walhouse/capture/pgoutput"
)

func TestRefusalReasons(t *testing.T) {
	noKey := refusal(reasonNoKey, "no key")
	filter := refusal(reasonColumnList, "a column list")
	tests := []struct {
		name string
		err  error
		want []string
	}{
		{"none", nil, nil},
		{"a failed query", errors.New("connection reset"), nil},
		{"one", noKey, []string{reasonNoKey}},
		{"joined, twice, wrapped", errors.Join(filter, fmt.Errorf("since 0/10: %w", errors.Join(noKey, noKey))), []string{reasonColumnList, reasonNoKey}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := refusalReasons(tt.err); !slices.Equal(got, tt.want) {
				t.Errorf("reasons %q, want %q", got, tt.want)
			}
			if tt.want != nil && !errors.Is(tt.err, errUncapturable) {
				t.Errorf("%v is not errUncapturable", tt.err)
			}
		})
	}
}

// The gauge has one series per table and reason while the table is left
// out, none after; /status lists the tables and keeps the first error
// (which says since when) and time while the reasons stay.
func TestRefusedTables(t *testing.T) {
	var logged strings.Builder
	r := newRefusedTables(slog.New(slog.NewTextHandler(&logged, nil)))
	r.leave("public.a", "pub", fmt.Errorf("captured until 0/10: %w", errors.Join(refusal(reasonNoKey, "no key"), refusal(reasonNoTenant, "no tenant"))))
	r.leave("public.b", "pub", refusal(reasonColumnList, "a column list"))
	r.leave("public.a", "pub", errors.Join(refusal(reasonNoKey, "no key"), refusal(reasonNoTenant, "no tenant")))
	if n := strings.Count(logged.String(), "table left out"); n != 2 {
		t.Errorf("logged %d times, want once per table:\n%s", n, logged.String())
	}
	if got := series(t, r.gauge); len(got) != 3 || got[reasonNoTenant+"/public.a"] != 1 || got[reasonColumnList+"/public.b"] != 1 {
		t.Errorf("gauge %v", got)
	}
	list := r.list()
	if len(list) != 2 || list[0].Table != "public.a" || !strings.Contains(list[0].Error, "captured until 0/10") ||
		!slices.Equal(list[0].Reasons, []string{reasonNoKey, reasonNoTenant}) || list[1].Table != "public.b" {
		t.Errorf("list %+v", list)
	}
	r.leave("public.a", "pub", refusal(reasonNoKey, "no key")) // the tenant column is back
	if got := series(t, r.gauge); len(got) != 2 || got[reasonNoKey+"/public.a"] != 1 {
		t.Errorf("gauge %v after public.a lost a reason", got)
	}
	if !r.rejoin("public.a") || r.rejoin("public.a") {
		t.Error("rejoin: want true once, then false")
	}
	r.retain(func(string) bool { return false })
	if got := series(t, r.gauge); len(got) != 0 || len(r.list()) != 0 {
		t.Errorf("gauge %v, tables %+v after every table left the publication", got, r.list())
	}
	r.counter("public.b").Inc()
	if got := series(t, r.changes); got["public.b"] != 1 {
		t.Errorf("changes %v", got)
	}
}

// series returns the values of c's series by their label values joined by
// "/", in the order of the label names.
func series(t *testing.T, c prometheus.Collector) map[string]float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetValue())
			}
			out[strings.Join(labels, "/")] = m.GetGauge().GetValue() + m.GetCounter().GetValue()
		}
	}
	return out
}

// savedState is a StateStore of fixed contents.
type savedState map[string][]byte

func (s savedState) Load(_ context.Context, key string) ([]byte, error) { return s[key], nil }
func (s savedState) Save(context.Context, string, []byte) error         { return errors.New("read only") }

// Of two tables that would share a name, the one captured before is kept
// at a start: it goes first.
func TestCapturedFirst(t *testing.T) {
	tables := []string{"public.a", "public.b", "public.c", "public.d"}
	tests := []struct {
		name  string
		state StateStore
		want  []string
	}{
		{"no state store", nil, tables},
		{"nothing saved", savedState{}, tables},
		{"some saved", savedState{stateKey("s", "public.c"): []byte("{}"), stateKey("s", "public.b"): []byte("{}")}, []string{"public.b", "public.c", "public.a", "public.d"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := &config{slot: "s", state: tt.state}
			got, err := capturedFirst(context.Background(), cfg, tables)
			if err != nil || !slices.Equal(got, tt.want) {
				t.Errorf("capturedFirst = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

// TestRelationKey: a Relation message says its table's key as of its place
// in the WAL; the catalog (here, a key that came later) is asked only
// under REPLICA IDENTITY FULL.
func TestRelationKey(t *testing.T) {
	later := scriptedCatalog{keys: map[uint32][]string{1: {"tenant_id", "id", "v"}}}
	for _, tc := range []struct {
		name   string
		msg    *pglogrepl.RelationMessage
		want   []string
		reason string
	}{
		{"default: the flagged columns", relationMsg(1, "t", 'd', "tenant_id:text*", "id:int8*", "v:text"), []string{"id", "tenant_id"}, ""},
		{"using index: the flagged columns", relationMsg(1, "t", 'i', "tenant_id:text*", "id:int8*", "v:text"), []string{"id", "tenant_id"}, ""},
		{"full: the catalog's key", relationMsg(1, "t", pgoutput.ReplicaIdentityFull, "tenant_id:text*", "id:int8*", "v:text*"), []string{"id", "tenant_id", "v"}, ""},
		{"full without a key", relationMsg(2, "t", pgoutput.ReplicaIdentityFull, "tenant_id:text*", "id:int8*"), nil, reasonNoKey},
		{"default without a key then", relationMsg(1, "t", 'd', "tenant_id:text", "id:int8", "v:text"), nil, reasonNoKey},
		{"nothing", relationMsg(1, "t", pgoutput.ReplicaIdentityNothing, "tenant_id:text", "id:int8"), nil, reasonIdentity},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key, err := relationKey(context.Background(), later, tc.msg)
			if got := refusalReasons(err); tc.reason != "" && !slices.Equal(got, []string{tc.reason}) {
				t.Fatalf("err = %v (reasons %v), want reason %s", err, got, tc.reason)
			}
			if tc.reason == "" && err != nil {
				t.Fatalf("err = %v", err)
			}
			if got := slices.Sorted(maps.Keys(key)); !slices.Equal(got, tc.want) {
				t.Errorf("key = %v, want %v", got, tc.want)
			}
		})
	}
}
