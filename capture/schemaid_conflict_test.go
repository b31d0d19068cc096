package capture

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/walhouse/walhouse/record"
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
