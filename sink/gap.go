package sink

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walhouse/walhouse/record"
)

// Records that Kafka deleted before the sink read them (retention, or
// DeleteRecords) are a loss walhouse cannot undo, so it must never pass
// unnoticed. franz-go moves a consumer whose committed offset is below the
// log start to the log start without a word (kgo.ConsumeResetOffset), and
// does the same when retention overtakes a partition while it is read; so
// the sink checks itself: at an assignment, the committed offset must not
// be below the partition's log start (checkAssigned), the first record
// after it must be at the committed offset, and each record at the one
// after the record before (checkGaps). Capture's producer is not transactional and
// capture creates a table's topic with the delete policy, so any jump is a
// gap, except in a topic an administrator made compacted, where a jump at
// or past the log start is compaction's work (Config.Admin, lost).
//
// A gap stops loading its partition before the first record after it (what
// came before is loaded and committed, so the committed offset stays at the
// gap and a restart finds it again), and says so: an error in the log with
// the offsets, the table and the recovery, walhouse_sink_offsets_lost_total
// and walhouse_sink_partitions_records_lost (alert WalhouseRecordsLost), and
// the sink's /readyz (Gaps). The table's lastSyncAt stays where the
// partition stopped: the query API never claims the lost changes loaded.
// Config.AcceptGap lets an operator who re-copied the table load on from
// the log start.

// Gap is a run of a partition's offsets that Kafka no longer has and the
// sink never loaded.
type Gap struct {
	Topic     string
	Partition int32
	// From is the first offset lost (the committed offset, or the one after
	// the last record read); To is the first offset Kafka still had, the
	// record after the gap.
	From, To int64
	// Table is the table of the topic ("schema.table"), empty when the
	// topic's name does not say it (a hashed name, see record.TopicName).
	Table string
	// Accepted is true when Config.AcceptGap let the sink load on.
	Accepted bool
	// Recopy names the re-copy request that repairs the gap (see
	// recopy.go); loading goes on meanwhile, but the table is not exact.
	Recopy string
}

// Lost returns the number of offsets lost.
func (g Gap) Lost() int64 { return g.To - g.From }

// Error describes the gap and what to do, for the log and /readyz.
func (g Gap) Error() string {
	table := g.Table
	if table == "" {
		table = "of topic " + g.Topic
	}
	return fmt.Sprintf("records lost: offsets %d to %d (%d) of %s partition %d were deleted by Kafka (retention.ms or retention.bytes, or DeleteRecords) before the sink read them; table %s misses their changes", g.From, g.To-1, g.Lost(), g.Topic, g.Partition, table)
}

// Fix says how to make the table exact again and let the sink go on.
func (g Gap) Fix() string {
	table := g.Table
	if table == "" {
		table = "<schema.table of topic " + g.Topic + ">"
	}
	return fmt.Sprintf("stop the sinks; DROP TABLE the table %s in ClickHouse; run `walhouse capture --resnapshot %s` once; start one sink once with `--accept-lost-records %s/%d` (later starts without it); and keep the sink within the topic's retention (docs/operations.md#records-lost)",
		table, table, g.Topic, g.Partition)
}

// findGap returns the first gap among recs, one partition's records in
// offset order, given the offset the first should have (next; -1: not
// known, as before a first commit). at is the position in recs of the
// first record after the gap, or -1 when there is none.
func findGap(next int64, recs []*kgo.Record) (from, to int64, at int) {
	for i, r := range recs {
		if next >= 0 && r.Offset > next {
			return next, r.Offset, i
		}
		next = r.Offset + 1
	}
	return 0, 0, -1
}

// tableOfTopic returns "schema.table" of a table's topic named in full by
// record.TopicName, or "" when its name is hashed or not the prefix's.
func tableOfTopic(prefix, topic string) string {
	rest, ok := strings.CutPrefix(topic, prefix+".")
	if prefix == "" || !ok {
		return ""
	}
	schema, table, ok := strings.Cut(rest, ".")
	if !ok || record.TopicName(prefix, schema, table) != topic {
		return ""
	}
	return schema + "." + table
}

// checkGaps checks the records of one poll, by partition, against the
// offsets expected, and returns them without the records from each gap on
// (all of a partition already stopped on one). It runs on Run's goroutine.
func (s *Sink) checkGaps(ctx context.Context, fresh map[tp][]*kgo.Record) (map[tp][]*kgo.Record, error) {
	type found struct {
		k  tp
		g  Gap
		at int
	}
	var gaps []found
	s.mu.Lock()
	for k, rs := range fresh {
		next, ok := s.next[k]
		if !ok {
			next = -1
		}
		from, to, at := findGap(next, rs)
		s.next[k] = rs[len(rs)-1].Offset + 1
		if at >= 0 {
			gaps = append(gaps, found{k, Gap{Topic: k.topic, Partition: k.partition, From: from, To: to, Table: tableOfTopic(s.cfg.TopicPrefix, k.topic)}, at})
		}
	}
	s.mu.Unlock()
	for _, f := range gaps {
		stopped, err := s.onGap(ctx, f.g)
		if err != nil {
			return nil, err
		}
		if !stopped {
			continue
		}
		if f.at == 0 {
			delete(fresh, f.k)
		} else {
			fresh[f.k] = fresh[f.k][:f.at]
		}
	}
	return fresh, nil
}

// onGap handles a gap found: unless it is compaction's (lost), it is
// counted, and then accepted (Config.AcceptGap) or its partition stopped;
// stopped reports the latter.
func (s *Sink) onGap(ctx context.Context, g Gap) (stopped bool, err error) {
	lost, err := s.lost(ctx, g)
	if err != nil || !lost {
		return false, err
	}
	k := tp{g.Topic, g.Partition}
	p := strconv.Itoa(int(k.partition))
	s.m.offsetsLost.WithLabelValues(k.topic, p).Add(float64(g.Lost()))
	if s.cfg.AcceptGap != nil && s.cfg.AcceptGap(k.topic, k.partition) {
		g.Accepted = true
		s.log.Warn("records lost, accepted as told (--accept-lost-records): loading goes on after the gap", "topic", k.topic, "partition", k.partition,
			"lost_from", g.From, "lost_to", g.To-1, "lost", g.Lost(), "table", g.Table, "err", g.Error())
		return false, nil
	}
	if s.cfg.Recopies != nil {
		if ok, err := s.requestRecopy(ctx, g); err != nil || ok {
			return false, err
		}
		s.log.Warn("records lost in a topic whose name does not say its table: it cannot be copied again on its own (--recopy-on-gap); loading of the partition stops", "topic", k.topic, "partition", k.partition)
	}
	s.mu.Lock()
	s.gaps[k] = g
	s.mu.Unlock()
	s.m.partitionsLost.WithLabelValues(k.topic, p).Set(1)
	s.consumer.PauseFetchPartitions(map[string][]int32{k.topic: {k.partition}})
	s.log.Error("records lost: stopped loading this partition at the gap; its table's lastSyncAt stays before it", "topic", k.topic, "partition", k.partition,
		"lost_from", g.From, "lost_to", g.To-1, "lost", g.Lost(), "table", g.Table, "err", g.Error(), "resolve", g.Fix())
	return true, nil
}

// checkAssigned compares the committed offset of each partition assigned
// since the last poll with its log start (Config.Admin): a commit below it
// is a gap even when no record follows it yet (capture down, nothing
// written since). Without Config.Admin it does nothing; the records'
// check (checkGaps) finds the gap at the first record after it.
func (s *Sink) checkAssigned(ctx context.Context) error {
	s.mu.Lock()
	assigned := s.assigned
	s.assigned = nil
	s.mu.Unlock()
	if len(assigned) == 0 || s.cfg.Admin == nil {
		return nil
	}
	var topics []string
	for k := range assigned {
		if !slices.Contains(topics, k.topic) {
			topics = append(topics, k.topic)
		}
	}
	var committed kadm.OffsetResponses
	var starts kadm.ListedOffsets
	err := s.retry(ctx, "compare committed offsets with the log starts", func() error {
		var err error
		if committed, err = s.offsets.FetchOffsets(ctx, s.cfg.Group); err != nil {
			return err
		}
		starts, err = s.cfg.Admin.ListStartOffsets(ctx, topics...)
		return err
	})
	if err != nil {
		return err
	}
	for k := range assigned {
		c, ok := committed.Lookup(k.topic, k.partition)
		st, sok := starts.Lookup(k.topic, k.partition)
		if !ok || c.Err != nil || c.At < 0 || !sok || st.Err != nil || st.Offset <= c.At || s.gapped(k) {
			continue
		}
		g := Gap{Topic: k.topic, Partition: k.partition, From: c.At, To: st.Offset, Table: tableOfTopic(s.cfg.TopicPrefix, k.topic)}
		if _, err := s.onGap(ctx, g); err != nil {
			return err
		}
		// Found here, the gap is not found again at the first record
		// after it: that one must be at the log start.
		s.mu.Lock()
		s.next[k] = st.Offset
		s.mu.Unlock()
	}
	return nil
}

// TopicAdmin is what the sink asks Kafka about a topic where offsets jump;
// *kadm.Client satisfies it.
type TopicAdmin interface {
	DescribeTopicConfigs(ctx context.Context, topics ...string) (kadm.ResourceConfigs, error)
	ListStartOffsets(ctx context.Context, topics ...string) (kadm.ListedOffsets, error)
}

// lost reports whether the offsets of g are records Kafka deleted, rather
// than ones compaction removed from a topic an administrator made
// compacted (capture's are not). Compaction never moves a partition's log
// start: a jump at or past it, in a compacted topic, lost nothing that
// matters (compaction keeps each key's newest record). Without
// Config.Admin every jump is a loss.
func (s *Sink) lost(ctx context.Context, g Gap) (bool, error) {
	if s.cfg.Admin == nil {
		return true, nil
	}
	compacted, ok := s.compacted[g.Topic]
	if !ok {
		err := s.retry(ctx, "read the cleanup.policy of "+g.Topic, func() error {
			rcs, err := s.cfg.Admin.DescribeTopicConfigs(ctx, g.Topic)
			if err != nil {
				return err
			}
			rc, err := rcs.On(g.Topic, nil)
			if err == nil {
				err = rc.Err
			}
			if err != nil {
				return err
			}
			for _, c := range rc.Configs {
				if c.Key == "cleanup.policy" {
					compacted = strings.Contains(c.MaybeValue(), "compact")
				}
			}
			return nil
		})
		if err != nil {
			return false, err
		}
		s.compacted[g.Topic] = compacted
	}
	if !compacted {
		return true, nil
	}
	var start int64
	err := s.retry(ctx, "read the log start of "+g.Topic, func() error {
		starts, err := s.cfg.Admin.ListStartOffsets(ctx, g.Topic)
		if err == nil {
			err = starts.Error()
		}
		if err != nil {
			return err
		}
		o, _ := starts.Lookup(g.Topic, g.Partition)
		start = o.Offset
		return nil
	})
	if err != nil {
		return false, err
	}
	return g.From < start, nil
}

// gapped reports whether loading k stopped at a gap. Run's goroutine alone
// writes gaps, so it reads without the lock.
func (s *Sink) gapped(k tp) bool {
	_, ok := s.gaps[k]
	return ok
}

// Gaps returns the gaps at which loading stopped, and those a re-copy
// repairs (Gap.Recopy), by topic and partition (accepted ones are not
// among them). Safe for concurrent use, for readiness probes.
func (s *Sink) Gaps() []Gap {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.recoveringGapsLocked()
	for _, g := range s.gaps {
		out = append(out, g)
	}
	slices.SortFunc(out, func(a, b Gap) int {
		if c := strings.Compare(a.Topic, b.Topic); c != 0 {
			return c
		}
		return int(a.Partition - b.Partition)
	})
	return out
}
