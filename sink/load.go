package sink

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walhouse/walhouse/internal/backoff"
	"github.com/walhouse/walhouse/internal/failpoint"
	"github.com/walhouse/walhouse/internal/textcut"
	"github.com/walhouse/walhouse/record"
)

// loadChunk loads one partition chunk. Truncate and re-copy done markers
// cut it into segments: each segment is loaded as one batch (named by its
// own first and last offsets, so a chunk rebuilt after a crash gives the
// same batches and tokens), and each marker is applied after the segment
// before it and before the one after it. The partition's watermark
// advances once the whole chunk is safe.
func (s *Sink) loadChunk(ctx context.Context, dec *record.Decoder, chunk []item) error {
	var prog progress
	start := 0
	for i, it := range chunk {
		if it.kind != kindTruncate && it.kind != kindRecopy {
			continue
		}
		if err := s.loadSegment(ctx, dec, chunk[start:i], &prog); err != nil {
			return err
		}
		start = i + 1
		if err := s.applyMarker(ctx, it); err != nil {
			return err
		}
	}
	if err := s.loadSegment(ctx, dec, chunk[start:], &prog); err != nil {
		return err
	}
	s.loadedChunk(chunk, prog)
	return nil
}

// loadedChunk advances the watermark of chunk's partition by prog, what
// loading the chunk proved.
func (s *Sink) loadedChunk(chunk []item, prog progress) {
	if prog.src.Table == "" || prog.through.IsZero() {
		return
	}
	// A commit time ahead of the sink's clock (a source clock running
	// ahead) never makes lastSyncAt claim the future.
	if now := time.Now().UTC(); prog.through.After(now) {
		prog.through = now
	}
	key := record.Source{Schema: prog.src.Schema, Table: prog.src.Table}
	s.mu.Lock()
	s.topicOf[key] = chunk[0].Topic
	s.mu.Unlock()
	s.advance(tp{chunk[0].Topic, chunk[0].Partition}, key, prog)
}

// applyMarker applies truncate or re-copy done marker it, whose
// partition's earlier records are loaded; a marker that is malformed, not
// of its topic's table or at a position from the future goes to the dead
// letters instead.
func (s *Sink) applyMarker(ctx context.Context, it item) error {
	k := tp{it.Topic, it.Partition}
	err := it.err()
	switch it.kind {
	case kindTruncate:
		tr := it.detail.truncate
		if err == nil {
			err = s.checkTruncate(it.Topic, &tr)
		}
		if err == nil { // after the segment: its items may raise the anchor
			err = s.checkPosition(ctx, k, tr.Source, "truncate marker", tr.LSN, tr.CommitTime, true)
		}
		if err == nil {
			return s.applyTruncate(ctx, it.Record, tr)
		}
	case kindRecopy:
		d := it.detail.recopy
		if err == nil {
			err = s.checkRecopy(it.Topic, &d)
		}
		if err == nil {
			err = s.checkPosition(ctx, k, d.Source, "re-copy done marker", d.LSN, d.At, false)
		}
		if err == nil {
			return s.passRecopy(ctx, it.Record, d)
		}
	default:
		return fmt.Errorf("record at %s/%d offset %d is a %s, not a marker: a bug in the sink", it.Topic, it.Partition, it.Offset, it.kind)
	}
	return s.deadLetter(ctx, it, err)
}

// progress is what the segments of a chunk prove loaded, for the
// partition's watermark: the table, the commit time (less commitMargin) or
// heartbeat time through which the partition is complete, and the newest
// commit or heartbeat LSN.
type progress struct {
	src        record.Source
	through    time.Time
	lsn        record.LSN
	partitions int32 // the topic's partition count, from heartbeats; 0: not said
}

// add adds what another segment of the chunk proved.
func (p *progress) add(o progress) {
	p.saw(o.src, o.through, o.lsn)
	p.partitions = max(p.partitions, o.partitions)
}

func (p *progress) saw(src record.Source, through time.Time, lsn record.LSN) {
	if p.src.Table == "" {
		p.src = src
	}
	if through.After(p.through) {
		p.through = through
	}
	p.lsn = max(p.lsn, lsn)
}

// loadSegment decodes records of one partition that no marker separates
// and loads them as one batch, decoding with dec; records that can never be
// loaded go to the dead letters. Heartbeats among them only add to prog.
func (s *Sink) loadSegment(ctx context.Context, dec *record.Decoder, seg []item, prog *progress) error {
	if len(seg) == 0 {
		return nil
	}
	sg, err := s.prepare(ctx, dec, seg)
	if err != nil {
		return err
	}
	if err := s.loadStopping(ctx, sg); err != nil {
		return err
	}
	prog.add(sg.seen)
	return nil
}

// loadStopping is loadPrepared, whose TableError, when it says where
// the table stopped, becomes a stopAt there.
func (s *Sink) loadStopping(ctx context.Context, sg *segment) error {
	err := s.loadPrepared(ctx, sg)
	var te *TableError
	if errors.As(err, &te) && te.Index >= 0 && te.Index < len(sg.origin) {
		return &stopAt{te: te, next: sg.origin[te.Index].Offset}
	}
	return err
}

// segment is a batch made ready to load: decoded, checked, its erased
// records and Layer 2's repeats marked in Skip.
type segment struct {
	b Batch
	// origin is the Kafka record (or a row's stand-in) of each of
	// b.Records; hashes their Layer 2 claims ("" none; nil without Layer
	// 2 or when nothing loads).
	origin []*kgo.Record
	hashes []string
	// seen is what the segment proves loaded once its batch is.
	seen progress
}

// prepare decodes and checks seg, records of one partition that no marker
// separates, into a segment, decoding with dec; records that can never be
// loaded go to the dead letters.
func (s *Sink) prepare(ctx context.Context, dec *record.Decoder, seg []item) (*segment, error) {
	first, last := seg[0], seg[len(seg)-1]
	b := Batch{Token: fmt.Sprintf("%s/%d/%d-%d", first.Topic, first.Partition, first.Offset, last.Offset)}
	origin := make([]*kgo.Record, 0, len(seg))
	var seen progress
	var beats []record.Heartbeat
	var single [1]*record.Record // a single record's rows, without allocating
	for _, it := range seg {
		err := it.err()
		if it.kind == kindHeartbeat {
			h := it.detail.heartbeat
			if err == nil {
				err = s.checkHeartbeat(it.Topic, &h)
			}
			if err == nil {
				err = s.checkPosition(ctx, tp{it.Topic, it.Partition}, h.Source, "heartbeat", h.LSN, h.At, true)
			}
			if err != nil {
				if err := s.deadLetter(ctx, it, err); err != nil {
					return nil, err
				}
				continue
			}
			beats = append(beats, h)
			continue
		}
		var rows []*record.Record
		switch {
		case err != nil: // a malformed rows count
		case it.kind == kindRowBatch:
			rows, err = decodeBatch(ctx, s, it, dec)
		default:
			single[0], err = decodeWith(ctx, s, it.Record, dec.Decode)
			rows = single[:]
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if errors.Is(err, record.ErrUnknownSchema) && !errors.Is(err, record.ErrInvalid) {
			return nil, err // no registry to look in: a configuration error, not a poison record
		}
		if err == nil {
			err = s.checkTopic(it.Topic, rows[0].Source)
		}
		if err == nil {
			err = s.checkRecordPosition(ctx, it.Record, rows[len(rows)-1]) // a batch's rows share times and positions
		}
		if err == nil && len(b.Records) > 0 && (rows[0].Source.Schema != b.Source.Schema || rows[0].Source.Table != b.Source.Table) {
			err = fmt.Errorf("%w: topic %s carries both %s.%s and %s.%s; each table needs its own topic", record.ErrInvalid, it.Topic, b.Source.Schema, b.Source.Table, rows[0].Source.Schema, rows[0].Source.Table)
		}
		if err != nil {
			if err := s.deadLetter(ctx, it, err); err != nil {
				return nil, err
			}
			continue
		}
		if len(b.Records) == 0 {
			b.Source = rows[0].Source
		}
		b.Records = append(b.Records, rows...)
		if it.kind == kindRowBatch {
			origin = appendRowOrigins(origin, it.Record, len(rows))
		} else {
			origin = append(origin, it.Record)
		}
		if r := rows[len(rows)-1]; provesLoaded(it, r) { // a batch's rows share the times and positions
			seen.saw(r.Source, r.OccurredAt.Add(-commitMargin), r.CommitLSN)
		}
	}
	// The table is the records' if there are any, else the heartbeats'.
	for _, h := range beats {
		seen.saw(h.Source, h.At, h.LSN)
		seen.partitions = max(seen.partitions, h.Partitions)
	}
	s.checkErased(&b, origin)
	var hashes []string
	if s.l2 != nil && b.loadable() > 0 {
		var err error
		if origin, hashes, err = s.filterLive(ctx, &b, origin); err != nil {
			return nil, err
		}
	}
	return &segment{b: b, origin: origin, hashes: hashes, seen: seen}, nil
}

// loadPrepared loads sg's batch, isolating records that can never load,
// and claims in Layer 2 what it loaded. A TableError says where the table
// stopped (its Index).
func (s *Sink) loadPrepared(ctx context.Context, sg *segment) error {
	b, origin, hashes := sg.b, sg.origin, sg.hashes
	if b.loadable() == 0 {
		return nil
	}
	s.cfg.Failpoints.At(failpoint.SinkDeduped)
	aside := map[*kgo.Record]bool{}
	if err := s.loadIsolating(ctx, b, origin, 1, aside); err != nil {
		return err
	}
	if s.l2 != nil && hashes != nil {
		// Claim only what was loaded: a dead-lettered record must not
		// look processed when it is replayed.
		var ids []*record.Record
		var hs []string
		for i, r := range b.Records {
			// b.Skip has the marks of every attempt (they share its
			// array): a record erased meanwhile was not loaded.
			if !aside[origin[i]] && hashes[i] != "" && (b.Skip == nil || !b.Skip[i]) {
				ids = append(ids, r)
				hs = append(hs, hashes[i])
			}
		}
		s.remember(ctx, ids, hs)
		s.cfg.Failpoints.At(failpoint.SinkClaimed)
	}
	return nil
}

// loadIsolating loads b, retrying transient errors; on a permanent error it
// retries a bounded number of times and then sets the faulty record aside
// (found by the loader or by halving the batch) and loads the rest.
// Records set aside are added to aside.
func (s *Sink) loadIsolating(ctx context.Context, b Batch, origin []*kgo.Record, attempt int, aside map[*kgo.Record]bool) error {
	start := time.Now()
	err := s.loadWithRetry(ctx, &b, origin)
	if err == nil {
		n := b.loadable()
		s.loaded.Add(int64(n))
		s.batches.Add(1)
		s.m.loaded.WithLabelValues(b.Source.Schema + "." + b.Source.Table).Add(float64(n))
		s.m.batchSize.Observe(float64(n))
		s.m.insertTime.Observe(time.Since(start).Seconds())
		return nil
	}
	if !errors.Is(err, ErrPermanent) {
		return err
	}
	if attempt < s.cfg.PermanentAttempts {
		s.log.Warn("load failed permanently; trying again before setting records aside", "token", b.Token, "attempt", attempt, "err", err)
		if err := backoff.Sleep(ctx, s.backoff(attempt)); err != nil {
			return err
		}
		return s.loadIsolating(ctx, b, origin, attempt+1, aside)
	}
	var re *RecordError
	if errors.As(err, &re) && re.Index >= b.From && re.Index < b.End() {
		// The records named are set aside and the runs between them
		// loaded, each under its own derived token. A position out of
		// order or outside the batch is left to the load of its run.
		var parts [][2]int
		from := b.From
		for _, f := range append([]RecordError{{Index: re.Index, Err: re.Err}}, re.More...) {
			if f.Index < from || f.Index >= b.End() {
				continue
			}
			aside[origin[f.Index]] = true
			if err := s.deadRow(ctx, origin[f.Index], b.Records[f.Index], f.Err, attempt); err != nil {
				return err
			}
			parts, from = append(parts, [2]int{from, f.Index}), f.Index+1
		}
		return s.loadParts(ctx, b, origin, append(parts, [2]int{from, b.End()}), aside)
	}
	if b.End()-b.From == 1 {
		aside[origin[b.From]] = true
		return s.deadRow(ctx, origin[b.From], b.Records[b.From], err, attempt)
	}
	mid := b.From + (b.End()-b.From)/2
	return s.loadParts(ctx, b, origin, [][2]int{{b.From, mid}, {mid, b.End()}}, aside)
}

// loadParts loads sub-ranges of b, each with its own derived token.
func (s *Sink) loadParts(ctx context.Context, b Batch, origin []*kgo.Record, parts [][2]int, aside map[*kgo.Record]bool) error {
	for _, p := range parts {
		if p[0] >= p[1] {
			continue
		}
		sub := b
		sub.From, sub.To = p[0], p[1]
		if err := s.loadIsolating(ctx, sub, origin, s.cfg.PermanentAttempts, aside); err != nil {
			return err
		}
	}
	return nil
}

// decodeWith decodes a record's value with decode (a Decoder's Decode or
// DecodeBatch). A version 2 record whose schema is not known yet makes the
// sink read the registry up to now, retrying while it cannot be read:
// capture registers a schema before producing a record that refers to it,
// so after a successful read a schema that is still missing never will be
// there, and the record is poison.
func decodeWith[T any](ctx context.Context, s *Sink, kr *kgo.Record, decode func([]byte, record.Schemas) (T, error)) (T, error) {
	var schemas record.Schemas
	if s.cfg.Schemas != nil {
		schemas = s.cfg.Schemas
	}
	r, err := decode(kr.Value, schemas)
	if !errors.Is(err, record.ErrUnknownSchema) {
		return r, err
	}
	if s.cfg.Schemas == nil {
		return r, fmt.Errorf("record at %s/%d offset %d: %w, and the sink was started without a schema registry (sink.Config.Schemas)", kr.Topic, kr.Partition, kr.Offset, err)
	}
	if rerr := s.retry(ctx, "read the schema registry", func() error { return s.cfg.Schemas.Refresh(ctx) }); rerr != nil {
		return r, rerr
	}
	r, err = decode(kr.Value, schemas)
	if errors.Is(err, record.ErrUnknownSchema) {
		err = fmt.Errorf("%w: %w (capture registers every schema before its records, so this record was not written by capture)", record.ErrInvalid, err)
	}
	return r, err
}

// deadLetter sends the Kafka record of it, whole, to the dead letters with
// the cause: a marker, heartbeat or record that cannot be decoded or is
// refused before loading.
func (s *Sink) deadLetter(ctx context.Context, it item, cause error) error {
	dl := s.letter(it.Record, cause, 1)
	if it.kind == kindRowBatch {
		dl.Rows = int(it.rows)
	}
	return s.setAside(ctx, dl, nil, cause)
}

// deadRow sends decoded row r, which kr (an origin of its batch) carried,
// to the dead letters with the cause. A row of a row batch goes there as a
// record of its own (key and value of the single record capture would have
// sent), not as the whole batch, whose other rows were loaded.
func (s *Sink) deadRow(ctx context.Context, kr *kgo.Record, r *record.Record, cause error, attempts int) error {
	dl := s.letter(kr, cause, attempts)
	if isRowOrigin(kr) {
		dl.Key, dl.Value = r.AppendPartitionKey(nil), record.AppendJSON(nil, r)
	}
	return s.setAside(ctx, dl, r, cause)
}

// letter is the dead letter of kr with the cause.
func (s *Sink) letter(kr *kgo.Record, cause error, attempts int) record.DeadLetter {
	return record.DeadLetter{Topic: kr.Topic, Partition: kr.Partition, Offset: kr.Offset, Key: kr.Key, Value: kr.Value, Err: cause, FirstSeen: time.Now().UTC(), Attempts: attempts,
		Origin: "sink", Reason: reasonOf(cause)}
}

// setAside sends dl, whose row is r when it was decoded, to the dead
// letters, or stops with an error naming it when there are none.
func (s *Sink) setAside(ctx context.Context, dl record.DeadLetter, r *record.Record, cause error) error {
	if ctx.Err() != nil {
		return ctx.Err() // stopping (a check that ended with ctx): nothing is set aside
	}
	if s.cfg.DeadLetters == nil {
		return fmt.Errorf("record at %s/%d offset %d can never be loaded and no dead-letter topic is configured: %w", dl.Topic, dl.Partition, dl.Offset, cause)
	}
	if err := s.retry(ctx, "send to the dead-letter topic", func() error { return s.cfg.DeadLetters.Send(ctx, dl) }); err != nil {
		return err
	}
	s.dead.Add(1)
	s.m.dead.Inc()
	attrs := append(r.LogAttrs(), "topic", dl.Topic, "partition", dl.Partition, "offset", dl.Offset)
	if dl.Reason != "" {
		attrs = append(attrs, "reason", dl.Reason)
	}
	s.log.Error("record set aside in the dead-letter topic", append(attrs, "err", textcut.Shorten(cause.Error(), maxLoggedError))...)
	return nil
}

// loadWithRetry loads b, retrying transient errors. Before every attempt
// it checks b against the erasure ledger again (recheckErased): an attempt
// waits while the ledger is too old, and leaves out the records of
// subjects erased since the last one.
func (s *Sink) loadWithRetry(ctx context.Context, b *Batch, origin []*kgo.Record) error {
	return s.retry(ctx, "load "+b.Source.Schema+"."+b.Source.Table, func() error {
		if err := s.recheckErased(ctx, b, origin); err != nil {
			return err
		}
		if b.loadable() == 0 {
			return nil // every record was erased meanwhile
		}
		start := time.Now()
		err := s.loader.Load(ctx, *b)
		if err == nil {
			// Only an insert that happened can have its answer lost.
			err = s.cfg.Failpoints.Err(failpoint.SinkInserted)
		}
		if err == nil {
			s.log.Debug("loaded", "table", b.Source.Schema+"."+b.Source.Table, "rows", len(b.Records), "token", b.Token, "took", time.Since(start))
		}
		return err
	})
}
