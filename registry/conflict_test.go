package registry

import (
	"context"
	"crypto/rand"
	"errors"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walhouse/walhouse/kafka"
	"github.com/walhouse/walhouse/record"
)

// collided makes every schema's id the same, as a 64-bit collision (or a
// forged entry) would for two schemas.
func collided(record.Schema) string { return "c011151011c011" }

func twoSchemas() (a, b record.Schema) {
	cols := func(name string) []record.Column {
		return []record.Column{
			{Name: "tenant_id", Type: "text", TypMod: -1, Key: true, Attnum: 1},
			{Name: "id", Type: "int8", TypMod: -1, Key: true, Attnum: 2},
			{Name: name, Type: "text", TypMod: -1, Attnum: 3},
		}
	}
	return record.Schema{TenantColumn: "tenant_id", Columns: cols("email")}, record.Schema{TenantColumn: "tenant_id", Columns: cols("note")}
}

// TestReaderRefusesConflictingEntries: a second entry under an id, for
// another schema, is no longer first-entry-wins: the id becomes unknown
// (its records go to the dead letters), and stays so. The same schema
// registered again (a restart) changes nothing.
func TestReaderRefusesConflictingEntries(t *testing.T) {
	a, b := twoSchemas()
	id := collided(a)
	r := &Reader{log: slog.New(slog.DiscardHandler), idOf: collided}
	entry := func(s record.Schema) kafka.Entry { return kafka.Entry{Key: []byte(id), Value: s.AppendJSON(nil)} }

	r.add(entry(a))
	r.add(entry(a))
	if got, ok := r.Schema(id); !ok || !got.Same(a) || r.Len() != 1 {
		t.Fatalf("after two entries of one schema: %+v %v, Len %d; want it known", got, ok, r.Len())
	}
	r.add(entry(b))
	if got, ok := r.Schema(id); ok {
		t.Fatalf("after an entry of another schema under its id: %+v known; want the id unknown", got)
	}
	r.add(entry(a))
	if _, ok := r.Schema(id); ok || r.Len() != 0 {
		t.Errorf("the first schema again: known %v, Len %d; want the id to stay unknown", ok, r.Len())
	}
}

// TestIntegrationWriterRefusesConflictingSchema: Register refuses a schema
// whose id it registered for another schema, with ErrSchemaIDConflict,
// also when both registrations run at once; the same schema again is fine.
func TestIntegrationWriterRefusesConflictingSchema(t *testing.T) {
	// Not harness/testenv, which imports this package: its two rules.
	brokers := os.Getenv("WALHOUSE_KAFKA_BROKERS")
	switch {
	case os.Getenv("WALHOUSE_INTEGRATION") == "0":
		t.Skip("integration tests disabled (WALHOUSE_INTEGRATION=0, as in make unit)")
	case brokers == "" && os.Getenv("WALHOUSE_INTEGRATION") == "1":
		t.Fatal("WALHOUSE_INTEGRATION=1 but WALHOUSE_KAFKA_BROKERS is not set: source the services' env file")
	case brokers == "":
		t.Skip("needs Kafka: set WALHOUSE_KAFKA_BROKERS (make test does)")
	}
	topic := kafka.SchemasTopic("registry_" + strings.ToLower(rand.Text()[:10]))
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(brokers, ",")...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	defer func() { _, _ = kadm.NewClient(cl).DeleteTopic(context.Background(), topic) }()
	a, b := twoSchemas()

	w := NewWriter(cl, topic, -1)
	w.idOf = collided
	errs := make(chan error, 2)
	go func() { errs <- w.Register(ctx, a) }()
	go func() { errs <- w.Register(ctx, b) }()
	var conflicts int
	for range 2 {
		switch err := <-errs; {
		case errors.Is(err, ErrSchemaIDConflict):
			conflicts++
		case err != nil:
			t.Fatalf("Register: %v", err)
		}
	}
	if conflicts != 1 {
		t.Fatalf("two schemas with one id registered at once: %d conflicts, want 1", conflicts)
	}
	registered := w.registered[collided(a)]
	other := b
	if registered.Same(b) {
		other = a
	}
	if err := w.Register(ctx, registered); err != nil {
		t.Errorf("the registered schema again: %v", err)
	}
	var ce *ConflictError
	if err := w.Register(ctx, other); !errors.As(err, &ce) || !ce.Registered.Same(registered) || !ce.Given.Same(other) {
		t.Errorf("the other schema again: %v, want a *ConflictError naming both", err)
	}
}
