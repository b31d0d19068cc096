package registry_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walhouse/walhouse/harness/testenv"
	"github.com/walhouse/walhouse/kafka"
	"github.com/walhouse/walhouse/record"
	"github.com/walhouse/walhouse/registry"
)

// newClient returns a client of the local broker, closed when t ends.
func newClient(t *testing.T, env testenv.Env, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(strings.Split(env.Kafka, ",")...)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// newTopic returns a fresh registry topic name; the topic is deleted when t
// ends if something created it.
func newTopic(t *testing.T, env testenv.Env) string {
	t.Helper()
	topic := kafka.SchemasTopic(testenv.Name("registry"))
	t.Cleanup(func() {
		cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(env.Kafka, ",")...))
		if err != nil {
			t.Errorf("delete topic %s: %v", topic, err)
			return
		}
		defer cl.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := kadm.NewClient(cl).DeleteTopic(ctx, topic); err != nil && !errors.Is(err, kerr.UnknownTopicOrPartition) {
			t.Errorf("delete topic %s: %v", topic, err)
		}
	})
	return topic
}

// producer returns a producer client with a custom partitioner, as capture's
// is, so the Writer is tested with the kind of client it gets.
func producer(t *testing.T, env testenv.Env) *kgo.Client {
	t.Helper()
	return newClient(t, env, kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)))
}

// schema returns a valid schema that differs for each n.
func schema(n int) record.Schema {
	return record.Schema{
		TenantColumn: "tenant_id",
		Columns: []record.Column{
			{Name: "tenant_id", Type: "text", TypMod: -1, Key: true, Attnum: 1},
			{Name: "id", Type: "int8", TypMod: -1, Key: true, Attnum: 2},
			{Name: fmt.Sprintf("v%d", n), Type: "numeric", TypMod: 655366, Attnum: 3},
		},
	}
}

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// setup is the start of a registry test: the local Kafka (skipping t
// without it), a context of a minute and a fresh registry topic.
func setup(t *testing.T) (testenv.Env, context.Context, string) {
	t.Helper()
	env := testenv.Require(t, "kafka")
	return env, testCtx(t), newTopic(t, env)
}

// readTopic returns every record of the topic's partition 0 up to its
// current end.
func readTopic(t *testing.T, env testenv.Env, topic string) []*kgo.Record {
	t.Helper()
	ctx := testCtx(t)
	cl := newClient(t, env)
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	end, ok := ends.Lookup(topic, 0)
	if !ok || end.Err != nil {
		t.Fatalf("end offset of %s: %v %v", topic, ok, end.Err)
	}
	var recs []*kgo.Record
	if end.Offset == 0 {
		return recs
	}
	cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}})
	for next := int64(0); next < end.Offset; {
		fs := cl.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatalf("read %s: %v", topic, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			recs = append(recs, r)
			next = r.Offset + 1
		})
	}
	return recs
}

// refreshed returns a new Reader of topic, refreshed once.
func refreshed(t *testing.T, env testenv.Env, topic string, log *slog.Logger) *registry.Reader {
	t.Helper()
	r := registry.NewReader(newClient(t, env), topic, log)
	if err := r.Refresh(testCtx(t)); err != nil {
		t.Fatalf("Refresh: %v", err)
	}
	return r
}

func TestIntegrationRegisterThenRead(t *testing.T) {
	env, ctx, topic := setup(t)
	missing := "it's \"quoted\"\nand on two lines"
	odd := record.Schema{
		Columns: []record.Column{
			{Name: "id", Type: "int8", TypMod: -1, Key: true, Attnum: 1},
			{Name: "we\"ird\ncol\\umn ü", Type: "order_status", Enum: true, Array: true, TypMod: -1, Attnum: 4},
			{Name: "added", Type: "varchar", TypMod: 68, Attnum: 5, Missing: &missing},
		},
	}
	w := registry.NewWriter(producer(t, env), topic, -1)
	if err := w.Register(ctx, odd); err != nil {
		t.Fatalf("Register: %v", err)
	}

	r := refreshed(t, env, topic, nil)
	got, ok := r.Schema(odd.ID())
	if !ok {
		t.Fatalf("schema %s not found after Refresh (Len %d)", odd.ID(), r.Len())
	}
	if !reflect.DeepEqual(got, odd) {
		t.Errorf("schema read back differs:\n got %+v\nwant %+v", got, odd)
	}
	if got.Columns[2].Missing == nil || *got.Columns[2].Missing != missing {
		t.Errorf("Missing read back as %v, want %q", got.Columns[2].Missing, missing)
	}
	if r.Len() != 1 {
		t.Errorf("Len = %d, want 1", r.Len())
	}
	if _, ok := r.Schema(schema(1).ID()); ok {
		t.Error("Schema found an id that was never registered")
	}
}

func TestIntegrationTopicIsCompactedWithOnePartition(t *testing.T) {
	env, ctx, topic := setup(t)
	cl := producer(t, env)
	if err := registry.NewWriter(cl, topic, -1).Register(ctx, schema(1)); err != nil {
		t.Fatalf("Register: %v", err)
	}
	adm := kadm.NewClient(newClient(t, env))
	rcs, err := adm.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := rcs.On(topic, nil)
	if err != nil || rc.Err != nil {
		t.Fatalf("describe configs of %s: %v %v", topic, err, rc.Err)
	}
	policy := "<unset>"
	for _, c := range rc.Configs {
		if c.Key == "cleanup.policy" && c.Value != nil {
			policy = *c.Value
		}
	}
	if policy != "compact" {
		t.Errorf("cleanup.policy = %s, want compact", policy)
	}
	tds, err := adm.ListTopics(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(tds[topic].Partitions); n != 1 {
		t.Errorf("topic has %d partitions, want 1", n)
	}
}

func TestIntegrationConcurrentRegisterProducesOnce(t *testing.T) {
	env, ctx, topic := setup(t)
	w := registry.NewWriter(producer(t, env), topic, -1)
	s := schema(7)

	start := make(chan struct{})
	errs := make([]error, 20)
	var wg sync.WaitGroup
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			errs[i] = w.Register(ctx, s)
		}()
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("Register call %d: %v", i, err)
		}
	}
	// Calls after the registration return at once, without producing.
	if err := w.Register(ctx, s); err != nil {
		t.Errorf("Register after the first: %v", err)
	}

	recs := readTopic(t, env, topic)
	if len(recs) != 1 {
		t.Fatalf("topic holds %d records, want exactly 1", len(recs))
	}
	if string(recs[0].Key) != s.ID() || !bytes.Equal(recs[0].Value, s.AppendJSON(nil)) {
		t.Errorf("entry is key %q value %s, want key %q value %s", recs[0].Key, recs[0].Value, s.ID(), s.AppendJSON(nil))
	}
}

func TestIntegrationReaderBeforeTopicExists(t *testing.T) {
	env, ctx, topic := setup(t)
	r := registry.NewReader(newClient(t, env), topic, nil)

	err := r.Refresh(ctx)
	if !errors.Is(err, registry.ErrNoRegistry) {
		t.Fatalf("Refresh before the topic exists: %v, want an error wrapping ErrNoRegistry", err)
	}
	if !strings.Contains(err.Error(), topic) || !strings.Contains(err.Error(), "--topic-prefix") {
		t.Errorf("error %q should name the topic and the --topic-prefix setting", err)
	}

	// Right after: the Reader's client has just seen the topic missing.
	s := schema(1)
	if err := registry.NewWriter(producer(t, env), topic, -1).Register(ctx, s); err != nil {
		t.Fatalf("Register: %v", err)
	}
	if err := r.Refresh(ctx); err != nil {
		t.Fatalf("Refresh after Register: %v", err)
	}
	if _, ok := r.Schema(s.ID()); !ok || r.Len() != 1 {
		t.Errorf("after Register and Refresh: found %v, Len %d; want the schema, Len 1", ok, r.Len())
	}
}

func TestIntegrationRefreshSeesLaterRegistrations(t *testing.T) {
	env, ctx, topic := setup(t)
	w := registry.NewWriter(producer(t, env), topic, -1)
	if err := w.Register(ctx, schema(1)); err != nil {
		t.Fatal(err)
	}
	r := refreshed(t, env, topic, nil)
	if r.Len() != 1 {
		t.Fatalf("Len = %d after the first Refresh, want 1", r.Len())
	}
	for n := 2; n <= 4; n++ {
		if err := w.Register(ctx, schema(n)); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok := r.Schema(schema(2).ID()); ok {
		t.Error("Schema knew a later registration before Refresh: it must answer from memory")
	}
	if err := r.Refresh(ctx); err != nil {
		t.Fatalf("second Refresh: %v", err)
	}
	for n := 1; n <= 4; n++ {
		if _, ok := r.Schema(schema(n).ID()); !ok {
			t.Errorf("schema %d not found after the second Refresh", n)
		}
	}
	if r.Len() != 4 {
		t.Errorf("Len = %d, want 4", r.Len())
	}
	// Nothing new: Refresh returns without waiting for records.
	if err := r.Refresh(ctx); err != nil || r.Len() != 4 {
		t.Errorf("Refresh with nothing new: %v, Len %d", err, r.Len())
	}
}

func TestIntegrationInvalidEntriesAreSkipped(t *testing.T) {
	env, ctx, topic := setup(t)
	cl := producer(t, env)
	w := registry.NewWriter(cl, topic, -1)
	good1, tampered, misfiled, good2 := schema(1), schema(2), schema(3), schema(4)
	if err := w.Register(ctx, good1); err != nil {
		t.Fatal(err)
	}

	// An entry whose columns were altered after it was written: its
	// schemaId no longer is the hash of its content.
	altered := bytes.Replace(tampered.AppendJSON(nil), []byte(`"v2"`), []byte(`"v2_altered"`), 1)
	if bytes.Equal(altered, tampered.AppendJSON(nil)) {
		t.Fatal("test bug: the entry was not altered")
	}
	bad := []*kgo.Record{
		{Topic: topic, Key: []byte(tampered.ID()), Value: altered},
		// A valid entry under another key than its id.
		{Topic: topic, Key: []byte(good1.ID()), Value: misfiled.AppendJSON(nil)},
		{Topic: topic, Key: []byte("not-json"), Value: []byte("{not json")},
	}
	if err := cl.ProduceSync(ctx, bad...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := w.Register(ctx, good2); err != nil {
		t.Fatal(err)
	}

	var logs testenv.SyncBuffer
	r := refreshed(t, env, topic, slog.New(slog.NewTextHandler(&logs, nil)))
	for _, s := range []record.Schema{good1, good2} {
		if got, ok := r.Schema(s.ID()); !ok || !reflect.DeepEqual(got, s) {
			t.Errorf("good schema %s: found %v, %+v", s.ID(), ok, got)
		}
	}
	for _, s := range []record.Schema{tampered, misfiled} {
		if got, ok := r.Schema(s.ID()); ok {
			t.Errorf("bad entry for %s was loaded: %+v", s.ID(), got)
		}
	}
	if r.Len() != 2 {
		t.Errorf("Len = %d, want 2", r.Len())
	}
	if n := strings.Count(logs.String(), "level=WARN"); n != len(bad) {
		t.Errorf("%d warnings, want %d (one per bad entry):\n%s", n, len(bad), logs.String())
	}
}

func TestIntegrationRegisterCancelledContext(t *testing.T) {
	env := testenv.Require(t, "kafka")
	topic := newTopic(t, env)
	w := registry.NewWriter(producer(t, env), topic, -1)
	s := schema(1)

	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	if err := w.Register(cancelled, s); !errors.Is(err, context.Canceled) {
		t.Fatalf("Register with a cancelled context: %v, want an error wrapping context.Canceled", err)
	}
	// The failure is not remembered: a later call registers.
	ctx := testCtx(t)
	if err := w.Register(ctx, s); err != nil {
		t.Fatalf("Register after the cancelled one: %v", err)
	}
	if _, ok := refreshed(t, env, topic, nil).Schema(s.ID()); !ok {
		t.Error("schema not in the registry after the second Register")
	}
}

func TestIntegrationRegisterRejectsTopicWithManyPartitions(t *testing.T) {
	env, ctx, topic := setup(t)
	cl := producer(t, env)
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 3, -1, nil, topic); err != nil {
		t.Fatal(err)
	}
	// Pick a schema the producer's partitioner puts on another partition
	// than 0, where readers would never find it.
	part := kgo.StickyKeyPartitioner(nil).ForTopic(topic)
	var s record.Schema
	for n := 0; ; n++ {
		s = schema(n)
		if part.Partition(&kgo.Record{Key: []byte(s.ID())}, 3) != 0 {
			break
		}
	}
	err := registry.NewWriter(cl, topic, -1).Register(ctx, s)
	if err == nil || !strings.Contains(err.Error(), "more than one partition") {
		t.Fatalf("Register into a 3-partition topic: %v, want an error about its partitions", err)
	}
}

// A registry topic whose first entries Kafka deleted (retention under a
// cleanup.policy with delete): the reader says so at error level and goes
// on with the entries that remain.
func TestIntegrationReaderAfterEntriesLost(t *testing.T) {
	env, ctx, topic := setup(t)
	adm := kadm.NewClient(newClient(t, env))
	policy := "compact,delete" // as an administrator might make it
	if _, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{"cleanup.policy": &policy}, topic); err != nil {
		t.Fatal(err)
	}
	w := registry.NewWriter(producer(t, env), topic, -1)
	for n := range 3 {
		if err := w.Register(ctx, schema(n)); err != nil {
			t.Fatal(err)
		}
	}
	var del kadm.Offsets
	del.Add(kadm.Offset{Topic: topic, Partition: 0, At: 2})
	if resp, err := adm.DeleteRecords(ctx, del); err != nil || resp.Error() != nil {
		t.Fatalf("delete records: %v %v", err, resp.Error())
	}
	var logs bytes.Buffer
	r := refreshed(t, env, topic, slog.New(slog.NewTextHandler(&logs, nil)))
	if _, ok := r.Schema(schema(2).ID()); !ok || r.Len() != 1 {
		t.Errorf("after the loss: Len %d, schema 2 found %v; want the one entry left", r.Len(), ok)
	}
	if out := logs.String(); !strings.Contains(out, "level=ERROR") || !strings.Contains(out, "entries lost") {
		t.Errorf("no error logged about the lost entries:\n%s", out)
	}
}
