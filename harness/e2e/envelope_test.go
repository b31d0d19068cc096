package e2e

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/walhouse/walhouse/kafka"
	"github.com/walhouse/walhouse/registry"
)

// An upgrade from envelope version 1 to 2 in the middle of a table's
// stream: capture first writes version 1 records (the column list inline),
// then, restarted with the default, version 2 records that refer to the
// schema registry, including after an ADD COLUMN. One sink loads both, and
// ClickHouse equals PostgreSQL. The registry holds every version 2 schema.
func TestIntegrationEnvelopeUpgrade(t *testing.T) {
	p := newPipeline(t)
	tb := p.newSinkTable()
	sink := p.sink()

	old := p.runCapture(p.captureArgs([]string{tb.name}, "--envelope-version", "1"))
	p.change(tb, 0)
	p.converge(tb.pgQuery, tb.chQuery, old, sink)
	old.Stop()

	capture := killAtEnd(t, p.startCapture(tb.name))
	p.change(tb, 1)
	p.exec("ALTER TABLE " + tb.quoted + " ADD COLUMN extra text DEFAULT 'x'")
	p.change(tb, 2)
	p.converge(tb.pgQuery, tb.chQuery, capture, sink)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	recs, err := p.topicRecords(ctx, tb.topic)
	if err != nil {
		t.Fatal(err)
	}
	versions := map[int]int{}
	schemaIDs := map[string]bool{}
	for _, kr := range changes(recs) {
		var head struct {
			EventVersion int             `json:"eventVersion"`
			SchemaID     string          `json:"schemaId"`
			Columns      json.RawMessage `json:"columns"`
		}
		if err := json.Unmarshal(kr.Value, &head); err != nil {
			t.Fatalf("record at %d/%d: %v", kr.Partition, kr.Offset, err)
		}
		versions[head.EventVersion]++
		if (head.EventVersion == 1) != (head.Columns != nil) {
			t.Errorf("version %d record at %d/%d: columns present = %v", head.EventVersion, kr.Partition, kr.Offset, head.Columns != nil)
		}
		if head.EventVersion == 2 {
			schemaIDs[head.SchemaID] = true
		}
	}
	if versions[1] == 0 || versions[2] == 0 || len(versions) != 2 {
		t.Fatalf("records per envelope version %v, want both 1 and 2 and nothing else", versions)
	}
	if len(schemaIDs) < 2 {
		t.Errorf("version 2 records refer to %d schemas, want at least 2 (before and after ADD COLUMN)", len(schemaIDs))
	}
	reader := registry.NewReader(p.kafka(), kafka.SchemasTopic(p.prefix), nil)
	if err := reader.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	for id := range schemaIDs {
		if _, ok := reader.Schema(id); !ok {
			t.Errorf("schema %s is referred to by records but not in the registry", id)
		}
	}
}
