package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walhouse/walhouse/record"
)

// RecopyTopic returns the compacted topic where sinks ask capture to copy a
// table again after a gap in its topic (record.RecopyRequest):
// "<prefix>-recopy". Keys are tables; a key without a value says its
// table's last request is done.
func RecopyTopic(prefix string) string { return prefix + "-recopy" }

// Recopies writes and reads the re-copy topic. The sink writes requests and
// marks them done; capture and the sink read them. Writing is safe for
// concurrent use; ReadNew is not.
type Recopies struct {
	out  *Compacted
	read *kgo.Client // nil until the first ReadNew
	base *kgo.Client
	tail *Tail
	log  *slog.Logger
}

// NewRecopies returns the re-copy topic of prefix, written through cl (the
// caller's producer, which it closes) and read through a client derived
// from it (closed by Close), so cl must be no group member (see Derive).
// A missing topic is created, compacted, with
// the given replication factor (-1: the broker's default) and opts.
func NewRecopies(ctx context.Context, cl *kgo.Client, prefix string, replication int16, log *slog.Logger, opts ...TopicOption) (*Recopies, error) {
	out := NewCompacted(cl, RecopyTopic(prefix), replication, opts...)
	if err := out.Create(ctx); err != nil {
		return nil, fmt.Errorf("re-copy topic: %w", err)
	}
	if log == nil {
		log = slog.Default()
	}
	return &Recopies{out: out, base: cl, log: log}, nil
}

// Request stores req as its table's pending request, durably.
func (r *Recopies) Request(ctx context.Context, req record.RecopyRequest) error {
	raw, err := record.MarshalRecopyRequest(req)
	if err != nil {
		return err
	}
	return r.out.Put(ctx, req.Table, raw)
}

// Done marks table's request done (a tombstone), durably.
func (r *Recopies) Done(ctx context.Context, table string) error {
	return r.out.Put(ctx, table, nil)
}

// ReadNew calls each for every entry written since the last call, up to the
// topic's end as of this call: req is nil for a request done. Entries that
// are not valid requests are logged and skipped (the topic is untrusted
// input); a topic that lost entries is an error (ErrEntriesLost), since a
// pending request may be among them.
func (r *Recopies) ReadNew(ctx context.Context, each func(table string, req *record.RecopyRequest)) error {
	if r.tail == nil {
		cl, err := Derive(r.base)
		if err != nil {
			return fmt.Errorf("read the re-copy topic %s: %w", r.out.Topic(), err)
		}
		r.read, r.tail = cl, NewTail(cl, r.out.Topic(), r.log)
	}
	err := r.tail.ReadNew(ctx, func(e Entry) {
		table := string(e.Key)
		if e.Value == nil {
			each(table, nil)
			return
		}
		req, err := record.ParseRecopyRequest(table, e.Value)
		if err != nil {
			r.log.Warn("skipped an entry of the re-copy topic that is no request walhouse wrote", "topic", r.out.Topic(), "offset", e.Offset, "err", err)
			return
		}
		each(table, &req)
	})
	if errors.Is(err, ErrEntriesLost) {
		return fmt.Errorf("%w; pending re-copy requests may be gone: set cleanup.policy=compact on %s, and check the tables of the sinks' records-lost errors with walhouse verify", err, r.out.Topic())
	}
	return err
}

// Close closes the reading client.
func (r *Recopies) Close() {
	if r.read != nil {
		r.read.Close()
	}
}
