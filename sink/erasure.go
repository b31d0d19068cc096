package sink

import (
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walhouse/walhouse/record"
)

// Erasures is the erasure ledger as the sink reads it; erasure.Ledger
// implements it. It must be cheap: the sink asks it about every record.
type Erasures interface {
	// Erased reports whether r is a record of an erased data subject
	// committed at or before that subject's erasure: it must never be
	// loaded, or a replay would bring the subject back.
	Erased(r *record.Record) bool
}

// dropErased removes the records of erased subjects from a segment's
// decoded records and their origins (aligned), counting and logging them
// without their values. It filters in place.
func (s *Sink) dropErased(recs []*record.Record, origin []*kgo.Record) ([]*record.Record, []*kgo.Record) {
	if s.cfg.Erasures == nil || len(recs) == 0 {
		return recs, origin
	}
	n := 0
	var first *kgo.Record
	for i, r := range recs {
		if s.cfg.Erasures.Erased(r) {
			if first == nil {
				first = origin[i]
			}
			continue
		}
		recs[n], origin[n] = r, origin[i]
		n++
	}
	if dropped := len(recs) - n; dropped > 0 {
		table := recs[0].Source.Schema + "." + recs[0].Source.Table
		s.m.erased.WithLabelValues(table).Add(float64(dropped))
		s.log.Info("records of erased subjects dropped", "table", table, "records", dropped,
			"topic", first.Topic, "partition", first.Partition, "first_offset", first.Offset)
	}
	return recs[:n], origin[:n]
}
