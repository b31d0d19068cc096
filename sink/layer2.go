package sink

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walhouse/walhouse/record"
)

// Deduper is Layer 2: a shared memory of the eventIds already loaded, each
// with its payload hash. *dedup.Store implements it over Valkey/Redis.
type Deduper interface {
	// Lookup returns, per id, the payload hash stored with it ("" when the
	// id is unknown).
	Lookup(ctx context.Context, ids []string) ([]string, error)
	// Remember stores ids with their hashes. The sink passes only ids
	// its lookup did not find, so which hash wins when one is stored again
	// is the store's choice.
	Remember(ctx context.Context, ids, hashes []string) error
}

// MismatchMode says what the sink does with a record whose eventId was
// loaded before with a different payload: a broken eventId contract.
type MismatchMode uint8

const (
	// MismatchError sends the record to the dead letters with the reason
	// (the default).
	MismatchError MismatchMode = iota
	// MismatchWarn logs and counts the violation and loads the record.
	MismatchWarn
)

// ParseMismatchMode parses "error" or "warn".
func ParseMismatchMode(s string) (MismatchMode, error) {
	switch s {
	case "", "error":
		return MismatchError, nil
	case "warn":
		return MismatchWarn, nil
	}
	return 0, fmt.Errorf("eventId mismatch mode %q: want error or warn", s)
}

// ErrEventIDReused marks a record whose eventId arrived before with another
// payload.
var ErrEventIDReused = errors.New("eventId reused with a different payload")

// layer2 filters a decoded chunk: duplicates are dropped, contract
// violations handled by mode. The store failing never stops the pipeline.
type layer2 struct {
	store Deduper
	mode  MismatchMode
	m     *Metrics

	mu       sync.Mutex
	lastWarn time.Time
	muted    int
}

// Layer 2 leaves copied rows alone (op Read: the initial snapshot, an
// online copy, a re-copy), neither looking them up nor claiming them. Such
// a row is idempotent without it: its eventId is derived from the copy's
// consistent point and the row's key, its version is 0, below every
// streamed change of the row, and ReplacingMergeTree keeps one row per key
// and version at FINAL, so a copy delivered twice (a producer retry, a
// chunk read again after capture crashed) changes no result, and a retried
// batch is still dropped whole by its insert token. A copy read again
// carries the row as it is now under the same eventId, which Layer 2 had
// to load anyway (see filter). Checking them cost a Redis lookup and a
// claim per row, more CPU than ClickHouse spent on the same rows, for
// duplicates that only exist until a merge.
func copied(r *record.Record) bool { return r.Op == record.Read }

// claimHashLen is how much of the payload hash (hex SHA-256) Layer 2
// stores and compares: 64 bits tell a reused eventId from a repeat as well
// as 256 do, at a quarter of the store's memory for hashes.
const claimHashLen = 16

// filter returns the records to load with their origins and the payload
// hashes to claim them with: "" for a record not to claim (a copied row, a
// record whose eventId is stored or claimed earlier in recs already, with
// another payload, loaded in mismatch mode warn).
func (s *Sink) filter(ctx context.Context, recs []*record.Record, origin []*kgo.Record) ([]*record.Record, []*kgo.Record, []string, error) {
	l := s.l2
	hashes := make([]string, len(recs))
	ids := make([]string, 0, len(recs))
	for i, r := range recs {
		if !copied(r) {
			hashes[i] = record.PayloadHash(r)[:claimHashLen]
			ids = append(ids, r.EventID)
		}
	}
	if len(ids) == 0 {
		return recs, origin, hashes, nil
	}
	stored, err := l.store.Lookup(ctx, ids)
	lookupFailed := err != nil
	if lookupFailed {
		l.failOpen(s, err)
		stored = nil
	}
	keepR := make([]*record.Record, 0, len(recs))
	keepO := make([]*kgo.Record, 0, len(recs))
	keepH := make([]string, 0, len(recs))
	inChunk := make(map[string]string, len(ids))
	looked := 0 // index into stored of the next record looked up
	for i, r := range recs {
		if copied(r) {
			keepR = append(keepR, r)
			keepO = append(keepO, origin[i])
			keepH = append(keepH, "")
			continue
		}
		prev := ""
		if stored != nil {
			prev = stored[looked]
		}
		looked++
		if h, ok := inChunk[r.EventID]; ok && prev == "" {
			prev = h
		}
		switch {
		case prev == "":
		case prev == hashes[i]:
			l.m.dedupHits.WithLabelValues("layer2").Inc()
			continue
		case l.mode == MismatchWarn:
			l.m.mismatches.Inc()
			s.log.Warn("eventId reused with a different payload; loading it (mismatch mode warn)", append(r.LogAttrs(), "topic", origin[i].Topic, "partition", origin[i].Partition, "offset", origin[i].Offset)...)
			keepR = append(keepR, r)
			keepO = append(keepO, origin[i])
			keepH = append(keepH, "") // claimed already: the first payload stays the reference
			continue
		default:
			l.m.mismatches.Inc()
			if err := s.deadRow(ctx, origin[i], r, fmt.Errorf("%w: eventId %s", ErrEventIDReused, r.EventID), 1); err != nil {
				return nil, nil, nil, err
			}
			continue
		}
		inChunk[r.EventID] = hashes[i]
		keepR = append(keepR, r)
		keepO = append(keepO, origin[i])
		keepH = append(keepH, hashes[i])
	}
	if lookupFailed {
		// The lookup failed: nothing is known of these ids, and claiming
		// them would overwrite a first payload's hash it could not see
		// (claims overwrite). They load unclaimed; insert tokens and FINAL
		// cover a repeat.
		clear(keepH)
	}
	return keepR, keepO, keepH, nil
}

// remember claims the loaded records' eventIds. It runs only after the
// load succeeded, so a record that failed to load never looks processed.
func (s *Sink) remember(ctx context.Context, recs []*record.Record, hashes []string) {
	if len(recs) == 0 {
		return
	}
	ids := make([]string, len(recs))
	for i, r := range recs {
		ids[i] = r.EventID
	}
	if err := s.l2.store.Remember(ctx, ids, hashes); err != nil {
		s.l2.failOpen(s, err)
	}
}

// failOpen counts a store failure and logs it at most every 30 seconds.
func (l *layer2) failOpen(s *Sink, err error) {
	l.m.failOpen.Inc()
	l.mu.Lock()
	defer l.mu.Unlock()
	if time.Since(l.lastWarn) < 30*time.Second {
		l.muted++
		return
	}
	s.log.Warn("dedup store unavailable; loading without Layer 2 (ClickHouse insert tokens and FINAL still deduplicate)", "err", err, "suppressed_since_last", l.muted)
	l.lastWarn, l.muted = time.Now(), 0
}
