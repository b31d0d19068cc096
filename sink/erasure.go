package sink

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walhouse/walhouse/record"
)

// Erasures is the erasure ledger as the sink reads it; erasure.Ledger
// implements it. It must be cheap: the sink asks it about every record.
//
// The sink checks a batch's records when it builds the batch and again
// before every insert attempt whenever the ledger was read since
// (Generation), and makes no insert while the ledger's copy is too old:
// the attempt waits (WaitFresh) without spending a retry. So an erasure recorded while a batch waits for ClickHouse is
// applied to that batch before it lands, and a sink that cannot read the
// ledger stops loading instead of loading what may have been erased:
// its records wait in Kafka, uncommitted, until the ledger is read.
type Erasures interface {
	// Erased reports whether r is a record of an erased data subject
	// committed at or before that subject's erasure: it must never be
	// loaded, or a replay would bring the subject back.
	Erased(r *record.Record) bool
	// Generation numbers the copy of the ledger Erased answers from; it
	// changes whenever the ledger is read again.
	Generation() uint64
	// Fresh returns nil while that copy is recent enough to load with,
	// and otherwise why not.
	Fresh() error
	// WaitFresh returns once Fresh returns nil, as soon as a read makes
	// the copy fresh, or with ctx's error when ctx ends first.
	WaitFresh(ctx context.Context) error
}

// markErased marks in skip (aligned with recs and origin) the records of
// erased subjects not marked yet, counting and logging them without their
// values, and returns the ledger generation it checked against.
func (s *Sink) markErased(recs []*record.Record, origin []*kgo.Record, skip []bool, when string) uint64 {
	// Read before the checks: they answer from this copy or a newer one.
	gen := s.cfg.Erasures.Generation()
	dropped := 0
	var first *kgo.Record
	for i, r := range recs {
		if skip[i] || !s.cfg.Erasures.Erased(r) {
			continue
		}
		skip[i] = true
		dropped++
		if first == nil {
			first = origin[i]
		}
	}
	if dropped > 0 {
		table := recs[0].Source.Schema + "." + recs[0].Source.Table
		s.m.erased.WithLabelValues(table).Add(float64(dropped))
		s.log.Info("records of erased subjects dropped", "table", table, "records", dropped, "when", when,
			"topic", first.Topic, "partition", first.Partition, "first_offset", first.Offset)
	}
	return gen
}

// checkErased marks the records of a segment's batch that the ledger
// erased, before Layer 2 sees them (an erased record never goes to the
// dead letters with its values).
func (s *Sink) checkErased(b *Batch, origin []*kgo.Record) {
	if s.cfg.Erasures == nil || len(b.Records) == 0 {
		return
	}
	b.Skip = make([]bool, len(b.Records))
	b.erasures = s.markErased(b.Records, origin, b.Skip, "batch built")
}

// recheckErased readies b for an insert attempt: it waits while the
// ledger's copy is too old (failing only when ctx ends), and marks the
// records of subjects erased since b was last checked. The marks are
// written into b.Skip's array, so the caller's batch (and every part of
// it) sees them. The wait is not a failed attempt: the insert goes ahead
// the moment the ledger is read, not after the retry's backoff.
func (s *Sink) recheckErased(ctx context.Context, b *Batch, origin []*kgo.Record) error {
	if s.cfg.Erasures == nil || b.Skip == nil {
		return nil
	}
	if stale := s.cfg.Erasures.Fresh(); stale != nil {
		table := b.Source.Schema + "." + b.Source.Table
		s.log.Warn("load "+table+" waits for the erasure ledger", "err", stale)
		start := time.Now()
		if err := s.cfg.Erasures.WaitFresh(ctx); err != nil {
			return err
		}
		s.log.Info("load "+table+" resumes: the erasure ledger was read", "waited", time.Since(start).Round(time.Millisecond))
	}
	if s.cfg.Erasures.Generation() != b.erasures {
		// Only the records b loads: a part's others may be loaded already.
		from, to := b.From, b.End()
		b.erasures = s.markErased(b.Records[from:to], origin[from:to], b.Skip[from:to], "before an insert attempt")
	}
	return nil
}

// filterLive runs Layer 2 (filter) over the records b.Skip does not mark
// and marks in b.Skip those it drops (repeats, reused eventIds sent to
// the dead letters): no record moves, so the batch's insert tokens name
// the same records whatever Layer 2 answers on a rebuild. It returns the
// claim hashes aligned with b.Records ("" for a marked record).
func (s *Sink) filterLive(ctx context.Context, b *Batch, origin []*kgo.Record) ([]*kgo.Record, []string, error) {
	if b.Skip == nil {
		b.Skip = make([]bool, len(b.Records))
	}
	live := make([]*record.Record, 0, len(b.Records))
	liveOrigin := make([]*kgo.Record, 0, len(b.Records))
	at := make([]int, 0, len(b.Records))
	for i, r := range b.Records {
		if !b.Skip[i] {
			live, liveOrigin, at = append(live, r), append(liveOrigin, origin[i]), append(at, i)
		}
	}
	keptR, _, keptH, err := s.filter(ctx, live, liveOrigin)
	if err != nil {
		return nil, nil, err
	}
	hashes := make([]string, len(b.Records))
	k := 0
	for j, i := range at {
		if k < len(keptR) && keptR[k] == live[j] {
			hashes[i] = keptH[k]
			k++
			continue
		}
		b.Skip[i] = true
	}
	return origin, hashes, nil
}
