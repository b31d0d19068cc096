package capture

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pglogrepl"

	"github.com/walhouse/walhouse/record"
	"github.com/walhouse/walhouse/schema"
)

// conflictingRegistry answers every schema as registry.Writer answers one
// whose schemaId another schema holds.
type conflictingRegistry struct{}

func (conflictingRegistry) Register(_ context.Context, s record.Schema) error {
	return fmt.Errorf("schema %s: %w", s.ID(), record.ErrSchemaIDConflict)
}

// TestSchemaIDConflictLeavesTableOut: a table whose schema's id collides
// with another's is left out (reason invalid_columns), never a reason to
// stop capture.
func TestSchemaIDConflictLeavesTableOut(t *testing.T) {
	cfg := defaults()
	cfg.topicPrefix = "wh"
	cfg.schemas = conflictingRegistry{}
	var log []string
	cat := scriptedCatalog{keys: map[uint32][]string{relOrders: {"tenant_id", "id"}}, log: &log}
	_, err := buildRelation(context.Background(), cat, &cfg, "src", ordersRel)
	if !errors.Is(err, errUncapturable) || !slices.Contains(refusalReasons(err), reasonColumns) || !errors.Is(err, record.ErrSchemaIDConflict) {
		t.Fatalf("buildRelation with a colliding schemaId: %v (reasons %v); want the table left out as %s", err, refusalReasons(err), reasonColumns)
	}
}

// TestLayoutRefusals: a layout whose sorting columns are outside the
// replica identity, missing, or not led by the tenant leaves the table
// out with the fix; one inside it (REPLICA IDENTITY FULL) is captured
// with those columns watched for moves.
func TestLayoutRefusals(t *testing.T) {
	tests := []struct {
		name   string
		rel    *pglogrepl.RelationMessage
		order  []string
		reason string // "": captured
		says   string
	}{
		{"outside the identity", ordersRel, []string{"tenant_id", "body", "id"}, reasonIdentity, "REPLICA IDENTITY FULL"},
		{"missing column", ordersRel, []string{"tenant_id", "nope", "id"}, reasonLayout, "no column nope"},
		{"tenant not first", ordersRel, []string{"id", "tenant_id"}, reasonLayout, "starts with id"},
		{"identity full", docsRel, []string{"tenant_id", "body", "id"}, "", ""},
		{"exclude key", ordersRel, nil, reasonLayout, "excludes id, a key or tenant column"},
		{"exclude missing", ordersRel, nil, reasonLayout, "no column secret, which its layout's exclude_columns names"},
		{"key columns only", ordersRel, []string{"tenant_id", "id"}, "", ""},
	}
	for _, tc := range tests {
		cfg := defaults()
		cfg.topicPrefix = "wh"
		cfg.schemas = &memRegistry{}
		l := schema.Layout{OrderBy: tc.order}
		switch tc.name {
		case "exclude key":
			l.ExcludeColumns = []string{"id"}
		case "exclude missing":
			l.ExcludeColumns = []string{"secret"}
		}
		WithTableLayout("public."+tc.rel.RelationName, l)(&cfg)
		var log []string
		cat := scriptedCatalog{keys: map[uint32][]string{relOrders: {"tenant_id", "id"}, relDocs: {"id"}}, log: &log}
		r, err := buildRelation(context.Background(), cat, &cfg, "src", tc.rel)
		if tc.reason == "" {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			} else if tc.rel == docsRel && !slices.Equal(r.moveIdx, []int{2}) {
				t.Errorf("%s: moveIdx = %v, want [2] (body)", tc.name, r.moveIdx)
			}
			continue
		}
		if !errors.Is(err, errUncapturable) || !slices.Contains(refusalReasons(err), tc.reason) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: err = %v (reasons %v), want the table left out as %s saying %q", tc.name, err, refusalReasons(err), tc.reason, tc.says)
		}
	}
}

// TestArrayKeyLeavesTableOut: a table keyed by an array column (or whose
// tenant column is an array) is left out with the fix: ClickHouse cannot
// sort by an array of Nullable elements, so its table could never be
// created, and the sink retried that for ever.
func TestArrayKeyLeavesTableOut(t *testing.T) {
	for _, tc := range []struct {
		name string
		rel  *pglogrepl.RelationMessage
		keys []string
		says string
	}{
		{"array key", relationMsg(relLater, "tags", 'd', "tenant_id:text*", "id:int8[]*"), []string{"tenant_id", "id"}, "its key column id is an array"},
		{"array tenant", relationMsg(relLater, "tags", 'd', "tenant_id:int8[]*", "id:int8*"), []string{"tenant_id", "id"}, "its tenant column tenant_id is an array"},
	} {
		cfg := defaults()
		cfg.topicPrefix = "wh"
		cfg.schemas = &memRegistry{}
		var log []string
		cat := scriptedCatalog{keys: map[uint32][]string{relLater: tc.keys}, log: &log}
		_, err := buildRelation(context.Background(), cat, &cfg, "src", tc.rel)
		if !errors.Is(err, errUncapturable) || !slices.Contains(refusalReasons(err), reasonColumns) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: err = %v (reasons %v), want the table left out as %s saying %q", tc.name, err, refusalReasons(err), reasonColumns, tc.says)
		}
	}
}
