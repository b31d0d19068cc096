package registry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walhouse/walhouse/kafka"
	"github.com/walhouse/walhouse/record"
)

// ErrNoRegistry is wrapped by Reader.Refresh's error when the registry topic
// does not exist. Callers branch on it to wait for capture rather than fail:
// the topic appears with capture's first registration.
var ErrNoRegistry = errors.New("schema registry topic does not exist: capture has not registered any schema yet, " +
	"or sink and capture use different --topic-prefix values; start capture (or give both the same --topic-prefix) and retry")

// ErrSchemaIDConflict is wrapped by the error of Writer.Register when the
// id of the schema it is given is already registered for another schema
// (record.ErrSchemaIDConflict, which capture, not importing this package,
// tells apart).
var ErrSchemaIDConflict = record.ErrSchemaIDConflict

// ConflictError is the error of Writer.Register for a schema whose id
// another schema holds.
type ConflictError struct {
	ID                string
	Registered, Given record.Schema
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("schema %s: %v (tenant column %q, %d columns registered; tenant column %q, %d columns given): records of the second cannot refer to the registry by id; send them as version 1 records (--envelope-version 1) or change the table's columns",
		e.ID, ErrSchemaIDConflict, e.Registered.TenantColumn, len(e.Registered.Columns), e.Given.TenantColumn, len(e.Given.Columns))
}

func (e *ConflictError) Unwrap() error { return ErrSchemaIDConflict }

// Writer registers schemas: capture calls Register before producing the first
// record of a schema. It is safe for concurrent use.
type Writer struct {
	out  *kafka.Compacted
	idOf func(record.Schema) string // record.Schema.ID; tests collide ids with it

	mu         sync.Mutex
	registered map[string]record.Schema // ids acknowledged by Kafka, with their schemas
	inflight   map[string]*registration // ids being registered now
}

// registration is one attempt to register an id, shared by the calls that
// arrive while it runs.
type registration struct {
	done chan struct{} // closed when err is set
	err  error
	// abandoned is true when the attempt failed because its caller's
	// context ended: the waiters' own contexts may still be live, so they
	// try again instead of taking on an error that is not theirs.
	abandoned bool
}

// NewWriter returns a Writer producing to topic (kafka.SchemasTopic)
// through cl, as a kafka.Compacted. cl is the caller's producer client,
// which the caller owns and closes; it may have a custom partitioner and
// other records in flight (with one partition, any partitioner puts
// registry entries on partition 0, and Register checks that it did).
// replication is the replication factor the topic is created with (-1: the
// broker's default.replication.factor); the registry is as critical as the
// records, which cannot be decoded without it. opts add settings of a new
// topic (kafka.MinInsyncReplicas).
func NewWriter(cl *kgo.Client, topic string, replication int16, opts ...kafka.TopicOption) *Writer {
	return &Writer{
		out:        kafka.NewCompacted(cl, topic, replication, opts...),
		idOf:       record.Schema.ID,
		registered: make(map[string]record.Schema),
		inflight:   make(map[string]*registration),
	}
}

// Register makes sure s is in the registry before returning, so a record
// produced afterwards never refers to a schema a reader cannot find.
//
// The first call for an id on this Writer creates the topic if it is missing
// (1 partition, cleanup.policy=compact, the broker's default replication
// factor), then produces the entry (key: the id, value: s.AppendJSON) and
// waits for Kafka's acknowledgement. Later calls for that id return nil at
// once, without touching Kafka. Calls for an id that is being registered
// wait for that registration and share its result; a failure is not
// remembered, so a later call tries again. Registering an entry twice (for
// example after a restart) is harmless: the entry is the same and
// compaction keeps one. A schema whose id this Writer registered for
// another schema is refused with a *ConflictError (ErrSchemaIDConflict).
//
// Register retries while the broker does not yet know a topic it has just
// created, until ctx ends. It is safe for concurrent use.
func (w *Writer) Register(ctx context.Context, s record.Schema) error {
	id := w.idOf(s)
	for {
		w.mu.Lock()
		if have, ok := w.registered[id]; ok {
			w.mu.Unlock()
			if !have.Same(s) {
				return &ConflictError{ID: id, Registered: have, Given: s}
			}
			return nil
		}
		if r, ok := w.inflight[id]; ok {
			w.mu.Unlock()
			select {
			case <-r.done:
			case <-ctx.Done():
				return fmt.Errorf("register schema %s in %s: %w", id, w.out.Topic(), ctx.Err())
			}
			if r.err == nil || r.abandoned && ctx.Err() == nil {
				continue // registered: for this schema, or another with its id
			}
			return r.err
		}
		r := &registration{done: make(chan struct{})}
		w.inflight[id] = r
		w.mu.Unlock()

		r.err = w.register(ctx, id, s)
		r.abandoned = r.err != nil && ctx.Err() != nil

		w.mu.Lock()
		delete(w.inflight, id)
		if r.err == nil {
			w.registered[id] = s
		}
		w.mu.Unlock()
		close(r.done)
		return r.err
	}
}

// register creates the topic if needed and produces the entry of s.
func (w *Writer) register(ctx context.Context, id string, s record.Schema) error {
	if err := w.out.Create(ctx); err != nil {
		return fmt.Errorf("schema registry topic: %w", err)
	}
	if err := w.out.Put(ctx, id, s.AppendJSON(nil)); err != nil {
		return fmt.Errorf("register schema %s: %w", id, err)
	}
	return nil
}

// Reader reads the registry into memory and answers Schema lookups from
// there: the sink calls Refresh when a record refers to a schema it does not
// know yet, and at start. Schema and Len are safe for concurrent use with
// each other and with Refresh.
type Reader struct {
	topic string
	log   *slog.Logger
	idOf  func(record.Schema) string // record.Schema.ID; tests collide ids with it

	mu        sync.RWMutex
	schemas   map[string]record.Schema
	conflicts map[string]bool // ids with entries of different schemas: none is trusted

	// refresh holds one token: the Refresh that has it owns in (a channel
	// rather than a mutex, so a waiting Refresh can give up when its
	// context ends).
	refresh chan struct{}
	in      *kafka.Tail
}

var _ record.Schemas = (*Reader)(nil)

// NewReader returns a Reader of topic's partition 0, from the start, through
// cl, as a kafka.Tail. cl must be created without consumer options (no
// group, no ConsumeTopics or ConsumePartitions): the Reader adds the
// partition itself (cl.AddConsumePartitions) once the topic exists, and from
// then on owns cl's consumption. The caller closes cl after it stops using
// the Reader. log receives warnings about skipped entries; nil means
// slog.Default().
func NewReader(cl *kgo.Client, topic string, log *slog.Logger) *Reader {
	if log == nil {
		log = slog.Default()
	}
	log = log.With("component", "registry")
	return &Reader{
		topic:   topic,
		log:     log.With("topic", topic),
		idOf:    record.Schema.ID,
		refresh: make(chan struct{}, 1),
		in:      kafka.NewTail(cl, topic, log),
	}
}

// Schema implements record.Schemas from what has been read so far. It never
// waits for Kafka: a schema it does not know calls for a Refresh. An id
// with entries of two different schemas is unknown (see Refresh).
func (r *Reader) Schema(id string) (record.Schema, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	s, ok := r.schemas[id]
	return s, ok && !r.conflicts[id]
}

// Len returns the number of schemas known.
func (r *Reader) Len() int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return len(r.schemas) - len(r.conflicts)
}

// Refresh reads the registry up to its end as of the call, so every schema
// whose Register returned before the call is known afterwards. When the
// topic does not exist the error wraps ErrNoRegistry. Concurrent calls run
// one after another.
//
// An entry that is not a valid registry entry (record.DecodeSchema fails) or
// whose key is not its schemaId is skipped with a warning, never fatal: the
// records that refer to it then fail to decode, which names the problem where
// it matters, while the rest of the registry stays usable. So is an id
// whose entries hold two different schemas (compared whole, Schema.Same):
// a 64-bit collision or a forgery, where trusting either entry could load
// rows under another table's columns. The id is logged as an error and
// stays unknown: its records go to the dead letters, loudly.
func (r *Reader) Refresh(ctx context.Context) error {
	select {
	case r.refresh <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("read schema registry %s: %w", r.topic, ctx.Err())
	}
	defer func() { <-r.refresh }()

	err := r.in.ReadNew(ctx, r.add)
	if errors.Is(err, kafka.ErrEntriesLost) {
		// Loud, but the rest of the registry stays usable: records that
		// refer to a lost schema fail to decode and go to the dead letters
		// with the reason.
		r.log.Error("schema registry entries lost: records that refer to them cannot be decoded and go to the dead letters; capture registers the schemas it meets again at each start", "err", err)
		err = r.in.ReadNew(ctx, r.add)
	}
	if errors.Is(err, kafka.ErrNoTopic) {
		return fmt.Errorf("read schema registry %s: %w", r.topic, ErrNoRegistry)
	}
	if err != nil {
		return fmt.Errorf("read schema registry: %w", err)
	}
	return nil
}

// add stores the entry e, or skips it with a warning.
func (r *Reader) add(e kafka.Entry) {
	s, err := record.DecodeSchema(e.Value)
	if err != nil {
		r.log.Warn("skipping invalid schema registry entry; records that refer to it will fail to decode",
			"offset", e.Offset, "key", string(e.Key), "error", err)
		return
	}
	id := r.idOf(s)
	if id != string(e.Key) {
		r.log.Warn("skipping schema registry entry stored under another key than its schemaId; records that refer to the key will fail to decode",
			"offset", e.Offset, "key", string(e.Key), "schema_id", id)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	have, ok := r.schemas[id]
	switch {
	case !ok:
		if r.schemas == nil {
			r.schemas = map[string]record.Schema{}
		}
		r.schemas[id] = s
	case !have.Same(s) && !r.conflicts[id]:
		if r.conflicts == nil {
			r.conflicts = map[string]bool{}
		}
		r.conflicts[id] = true
		r.log.Error("two different schemas are registered under one schemaId (a hash collision or a forged entry): neither is trusted, and the records that refer to it go to the dead letters",
			"offset", e.Offset, "schema_id", id, "first_columns", len(have.Columns), "other_columns", len(s.Columns))
	}
}
