package sink

import (
	"bytes"
	"context"
	"sort"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walhouse/walhouse/internal/failpoint"
)

// A flush loads what one poll brought, chunk by chunk, between two
// commits: first the intent (where every chunk ends, as the commit's
// metadata), then, once the chunks are loaded, the offsets after them. A
// sink that crashes in between reads the intent back (readIntents) and cuts
// exactly the same chunks (cut, holdBack), so each retried batch has the
// same records and insert token as before and ClickHouse drops the repeat.

// intentPrefix marks commit metadata written by the sink: the last offset
// of every chunk of the flush in flight, comma-separated, so a restart cuts
// exactly the same chunks (and insert tokens) however often it crashes. A
// chunk that loads in a group (group.go) has its group's label after its
// end ("120~0:118*3"), so a restart groups exactly the same chunks.
const intentPrefix = "walhouse:batch-end="

// chunk is a run of one partition's records that loads as one batch, or
// as a member of a group: several partitions' chunks in one batch.
type chunk struct {
	items []item
	group groupLabel // zero: the chunk loads alone
	// rebuilt marks a chunk cut at an interrupted flush's end: it keeps
	// the group it had (or had none), so its insert is named as before.
	rebuilt bool
}

// key is the chunk's partition.
func (c *chunk) key() tp { return tp{c.items[0].Topic, c.items[0].Partition} }

// intentEnd is where a chunk of an interrupted flush ended, and its group.
type intentEnd struct {
	end   int64
	group groupLabel
}

// flush loads everything pending, partition by partition, and commits.
func (s *Sink) flush(ctx context.Context, recs map[tp][]item) error {
	if len(recs) == 0 {
		return nil
	}
	keys := make([]tp, 0, len(recs))
	for k := range recs {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].topic != keys[j].topic {
			return keys[i].topic < keys[j].topic
		}
		return keys[i].partition < keys[j].partition
	})
	var chunks []chunk
	for _, k := range keys {
		if s.stopped[k] == nil { // records of a partition held when its table stopped stay in Kafka
			chunks = append(chunks, s.cut(k, recs[k])...)
		}
	}
	if len(chunks) == 0 {
		return nil
	}
	units := s.group(chunks)
	// Record the intent (the last offset of each partition's chunks, and
	// their groups) before loading: a sink that crashes after loading but
	// before committing restarts with exactly these chunks and groups, so
	// their insert tokens match and ClickHouse drops the repeats.
	if err := s.commit(ctx, chunks, true); err != nil {
		return err
	}
	loaded, err := s.loadChunks(ctx, units)
	if err != nil {
		return err
	}
	s.cfg.Failpoints.At(failpoint.SinkLoaded)
	if len(loaded) == 0 {
		return nil
	}
	if err := s.commit(ctx, loaded, false); err != nil {
		return err
	}
	s.writeMarks(ctx)
	return nil
}

// stopTable stops loading one table in one partition: the partition is
// paused, its records from the failing one on are not committed, and the
// reason is logged for the operator. The table's other partitions load up
// to the same change and stop there too.
func (s *Sink) stopTable(k tp, te *TableError) {
	first := true
	for o := range s.stopped {
		if o.topic == k.topic {
			first = false
		}
	}
	s.stopped[k] = te
	s.consumer.PauseFetchPartitions(map[string][]int32{k.topic: {k.partition}})
	if first {
		s.m.stopped.Inc()
	}
	s.log.Error("stopped loading a table; the others go on. Its records stay in Kafka and load once resolved", "topic", k.topic, "partition", k.partition, "table", te.Table, "err", te.Err, "resolve", te.Fix)
}

// stopAt is a TableError of a chunk whose records before offset next are
// loaded.
type stopAt struct {
	te   *TableError
	next int64
}

func (e *stopAt) Error() string { return e.te.Error() }
func (e *stopAt) Unwrap() error { return e.te }

// readIntents learns, for partitions seen for the first time since their
// assignment, where the batch in flight at the last crash ended, and the
// committed offset, which their first record must have (gap.go).
func (s *Sink) readIntents(ctx context.Context, recs map[tp][]*kgo.Record) error {
	s.mu.Lock()
	need := false
	for k := range recs {
		if !s.checked[k] {
			need = true
		}
	}
	s.mu.Unlock()
	if !need {
		return nil
	}
	var resp kadm.OffsetResponses
	err := s.retry(ctx, "read committed offsets", func() error {
		var err error
		resp, err = s.offsets.FetchOffsets(ctx, s.cfg.Group)
		return err
	})
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for k := range recs {
		if s.checked[k] {
			continue
		}
		s.checked[k] = true
		o, ok := resp.Lookup(k.topic, k.partition)
		if _, known := s.next[k]; !known && ok && o.Err == nil && o.At >= 0 {
			s.next[k] = o.At // unless checkAssigned found a gap there
		}
		if !ok || !strings.HasPrefix(o.Metadata, intentPrefix) {
			continue
		}
		ends := parseIntent(k.partition, o.At, strings.TrimPrefix(o.Metadata, intentPrefix))
		if len(ends) == 0 {
			continue
		}
		s.intents[k] = ends
		s.log.Info("resuming an interrupted batch exactly", "topic", k.topic, "partition", k.partition, "first", o.At, "chunk_ends", ends)
	}
	return nil
}

// parseIntent reads the chunk ends (and groups) of partition's intent
// metadata, the flush's first offset being first. Metadata it cannot read
// whole gives none: the records then load under new names, and
// ReplacingMergeTree removes any repeat at FINAL.
func parseIntent(partition int32, first int64, meta string) []intentEnd {
	var ends []intentEnd
	for _, f := range strings.Split(meta, ",") {
		e, label, grouped := strings.Cut(f, "~")
		end, err := strconv.ParseInt(e, 10, 64)
		if err != nil || end < first || (len(ends) > 0 && end <= ends[len(ends)-1].end) {
			return nil
		}
		var g groupLabel
		if grouped {
			if g, err = parseGroupLabel(label); err != nil || (g.leader == partition && g.end != end) {
				return nil
			}
		}
		ends = append(ends, intentEnd{end: end, group: g})
	}
	return ends
}

// cut splits one partition's records into chunks: first exactly at the
// chunk ends of an interrupted flush, in their groups, then every
// MaxBatchRecords.
func (s *Sink) cut(k tp, recs []item) []chunk {
	var out []chunk
	s.mu.Lock()
	ends := s.intents[k]
	delete(s.intents, k)
	s.mu.Unlock()
	for _, e := range ends {
		i := sort.Search(len(recs), func(i int) bool { return recs[i].Offset > e.end })
		if i > 0 {
			out = append(out, chunk{items: recs[:i], group: e.group, rebuilt: true})
			recs = recs[i:]
		}
	}
	for len(recs) > 0 {
		// At least one record, then as many as keep the rows (a row batch
		// weighs its rows) within MaxBatchRecords.
		n, rows := 1, int(recs[0].rows)
		for n < len(recs) && rows+int(recs[n].rows) <= s.cfg.MaxBatchRecords {
			rows += int(recs[n].rows)
			n++
		}
		if n < len(recs) && sameRow(recs[n-1], recs[n]) {
			n++ // see sameRow
		}
		out = append(out, chunk{items: recs[:n]})
		recs = recs[n:]
	}
	return out
}

// sameRow reports whether a and b, consecutive records of a partition,
// are changes of one row (the same Kafka key; not row batches). A chunk
// never ends between them: a row whose layout's sorting columns changed
// travels as a delete at its old position and then the row (capture's
// keyChanged), and an insert between the two would leave the row out of
// FINAL until the next one. One record more is enough for that pair.
func sameRow(a, b item) bool {
	return len(a.Key) > 0 && bytes.Equal(a.Key, b.Key) && a.rows == 1 && b.rows == 1
}

// holdBack returns the partitions whose interrupted batch is not fully
// polled yet: they wait for more records, so the batch is rebuilt exactly.
// So do those whose interrupted batch grouped chunks with a partition that
// waits or has not been polled. After maxHoldPolls polls without
// completing (the records are gone, for example by retention, or the
// partitions now belong to other members of the group) the intent is
// dropped, or the group loads apart, with a warning.
func (s *Sink) holdBack(recs map[tp][]item, polls int) map[tp]bool {
	const maxHoldPolls = 50
	s.mu.Lock()
	defer s.mu.Unlock()
	var held map[tp]bool
	for k, rs := range recs {
		ends, ok := s.intents[k]
		if !ok || rs[len(rs)-1].Offset >= ends[len(ends)-1].end {
			continue
		}
		end := ends[len(ends)-1].end
		if polls >= maxHoldPolls {
			s.log.Warn("interrupted batch cannot be rebuilt exactly; loading what is there (ReplacingMergeTree still removes duplicates at FINAL)", "topic", k.topic, "partition", k.partition, "intent_end", end)
			delete(s.intents, k)
			continue
		}
		if held == nil {
			held = map[tp]bool{}
		}
		held[k] = true
	}
	if polls < maxHoldPolls {
		held = s.holdGroups(recs, held)
	}
	return held
}

// holdGroups adds to held the partitions of recs whose interrupted batch
// grouped a chunk with one of a partition held or not polled, until no
// more are added (holding one may leave another's group short). s.mu is
// held.
func (s *Sink) holdGroups(recs map[tp][]item, held map[tp]bool) map[tp]bool {
	for {
		found := map[groupKey]int{}
		for k := range recs {
			if held[k] {
				continue
			}
			for _, e := range s.intents[k] {
				if e.group.n > 1 {
					found[groupKey{k.topic, e.group}]++
				}
			}
		}
		more := false
		for k := range recs {
			if held[k] {
				continue
			}
			for _, e := range s.intents[k] {
				if e.group.n > 1 && found[groupKey{k.topic, e.group}] < e.group.n {
					if held == nil {
						held = map[tp]bool{}
					}
					held[k], more = true, true
					break
				}
			}
		}
		if !more {
			return held
		}
	}
}

// commit commits, per partition, either the intent of the flush (its
// first offset, with every chunk's last offset and group as metadata) or,
// after loading, the offset after its last chunk.
func (s *Sink) commit(ctx context.Context, chunks []chunk, intent bool) error {
	var offsets []Offset
	index := map[tp]int{}
	for _, c := range chunks {
		first, last := c.items[0], c.items[len(c.items)-1]
		k := tp{first.Topic, first.Partition}
		i, seen := index[k]
		end := strconv.FormatInt(last.Offset, 10)
		if intent && c.group.n > 1 {
			end += "~" + c.group.String()
		}
		switch {
		case intent && seen:
			offsets[i].Metadata += "," + end
		case intent:
			index[k] = len(offsets)
			offsets = append(offsets, Offset{Topic: k.topic, Partition: k.partition, Epoch: first.LeaderEpoch, At: first.Offset,
				Metadata: intentPrefix + end})
		case seen:
			offsets[i].Epoch, offsets[i].At = last.LeaderEpoch, last.Offset+1
		default:
			index[k] = len(offsets)
			offsets = append(offsets, Offset{Topic: k.topic, Partition: k.partition, Epoch: last.LeaderEpoch, At: last.Offset + 1})
		}
	}
	what := "commit offsets"
	if intent {
		what = "record batch intent"
	}
	return s.retry(ctx, what, func() error { return s.consumer.Commit(ctx, offsets) })
}
