package sink

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"

	"github.com/walhouse/walhouse/record"
)

// A topic has several partitions (capture spreads a table's rows over
// them by key), so a flush usually holds a chunk of each: loaded apart,
// each is an insert, and every insert is a part ClickHouse must merge.
// With Config.CombinePartitions the chunks of one flush that carry only
// rows (no truncate or re-copy marker) are grouped per topic, up to
// MaxBatchRecords rows, and each group loads as one batch named by all its
// members' positions. The group is written into the flush's intent, each
// member's chunk end with the group's label, so a sink that crashes
// rebuilds exactly the same groups and names (holdBack waits for every
// member). A group a restart cannot rebuild whole (a member's partition
// went to another sink of the consumer group) loads apart, with a warning:
// an insert of the old group that landed may then be repeated, which
// ReplacingMergeTree removes at FINAL, as after any change of batch.

// maxGroupMembers bounds the partitions of a group, which keeps the
// group's token and each member's intent short.
const maxGroupMembers = 64

// groupLabel names a group of chunks by its leader (the member of the
// lowest partition) and the leader's last offset, with the number of
// members. The zero label: a chunk that loads alone.
type groupLabel struct {
	leader int32
	end    int64
	n      int
}

// String is the label as an intent writes it: "leader:end*n".
func (g groupLabel) String() string { return fmt.Sprintf("%d:%d*%d", g.leader, g.end, g.n) }

// parseGroupLabel reads a label String wrote.
func parseGroupLabel(s string) (groupLabel, error) {
	leader, rest, ok1 := strings.Cut(s, ":")
	end, n, ok2 := strings.Cut(rest, "*")
	if !ok1 || !ok2 {
		return groupLabel{}, fmt.Errorf("group label %q: want leader:end*members", s)
	}
	l, err1 := strconv.ParseInt(leader, 10, 32)
	e, err2 := strconv.ParseInt(end, 10, 64)
	m, err3 := strconv.Atoi(n)
	if err1 != nil || err2 != nil || err3 != nil || l < 0 || e < 0 || m < 2 || m > maxGroupMembers {
		return groupLabel{}, fmt.Errorf("group label %q: want leader:end*members, 2 to %d members", s, maxGroupMembers)
	}
	return groupLabel{leader: int32(l), end: e, n: m}, nil
}

// groupKey is a group within a flush: labels are unique per topic.
type groupKey struct {
	topic string
	label groupLabel
}

// unit is what loads as one batch: one chunk, or a group's chunks in
// partition order.
type unit []*chunk

// token names the unit's batch: a chunk's segments are named by loadChunk;
// a group by each member's partition and positions.
func (u unit) token() string {
	var b strings.Builder
	b.WriteString(u[0].items[0].Topic)
	for i, c := range u {
		if i == 0 {
			b.WriteByte('/')
		} else {
			b.WriteByte('+')
		}
		first, last := c.items[0], c.items[len(c.items)-1]
		fmt.Fprintf(&b, "%d:%d-%d", first.Partition, first.Offset, last.Offset)
	}
	return b.String()
}

// group labels the new chunks of a flush that form groups (when
// Config.CombinePartitions), checks that every rebuilt group is whole, and
// orders the flush's units so that each partition's chunks load in offset
// order.
func (s *Sink) group(chunks []chunk) []unit {
	if s.cfg.CombinePartitions {
		s.formGroups(chunks)
	}
	byLabel := map[groupKey][]*chunk{}
	for i := range chunks {
		if c := &chunks[i]; c.group.n > 1 {
			k := groupKey{c.items[0].Topic, c.group}
			byLabel[k] = append(byLabel[k], c)
		}
	}
	for k, members := range byLabel {
		if whole(k.label, members) {
			continue
		}
		s.log.Warn("an interrupted batch grouped partitions this sink does not all hold now; loading them apart (ReplacingMergeTree removes a repeat of what landed at FINAL)",
			"topic", k.topic, "group", k.label.String(), "members_here", len(members))
		for _, c := range members {
			c.group = groupLabel{}
		}
	}
	return order(chunks)
}

// whole reports whether members are every chunk of the group label names:
// as many as it says, of distinct partitions, the leader's ending where
// the label says.
func whole(label groupLabel, members []*chunk) bool {
	if len(members) != label.n {
		return false
	}
	seen := map[int32]bool{}
	leader := false
	for _, c := range members {
		k := c.key()
		if seen[k.partition] {
			return false
		}
		seen[k.partition] = true
		if k.partition == label.leader {
			leader = c.items[len(c.items)-1].Offset == label.end
		}
	}
	return leader
}

// formGroups labels the groups of the flush's new chunks: per topic, the
// first new chunk of each partition, in partition order, then the second,
// and so on, as many as keep a group within MaxBatchRecords rows and
// MaxGroupBytes bytes. A chunk with a marker loads alone (its segments are
// batches of their own), as does a chunk rebuilt from an intent or one
// larger than MaxGroupBytes.
func (s *Sink) formGroups(chunks []chunk) {
	type lane struct {
		topic string
		parts [][]*chunk // per partition, in partition order: its new chunks that may join a group
	}
	var lanes []*lane
	byTopic := map[string]*lane{}
	last := tp{partition: -1}
	for i := range chunks {
		c := &chunks[i]
		k := c.key()
		if c.rebuilt || hasMarker(c.items) || size(c.items) > s.cfg.MaxGroupBytes {
			continue
		}
		l := byTopic[k.topic]
		if l == nil {
			l = &lane{topic: k.topic}
			byTopic[k.topic] = l
			lanes = append(lanes, l)
		}
		if k != last {
			l.parts = append(l.parts, nil)
			last = k
		}
		l.parts[len(l.parts)-1] = append(l.parts[len(l.parts)-1], c)
	}
	for _, l := range lanes {
		for round := 0; ; round++ {
			var members []*chunk
			rows, bytes := 0, 0
			for _, p := range l.parts {
				if round >= len(p) {
					continue
				}
				c := p[round]
				n, b := weight(c.items), size(c.items)
				if len(members) > 0 && (rows+n > s.cfg.MaxBatchRecords || bytes+b > s.cfg.MaxGroupBytes || len(members) == maxGroupMembers) {
					label(members)
					members, rows, bytes = nil, 0, 0
				}
				members = append(members, c)
				rows, bytes = rows+n, bytes+b
			}
			if members == nil {
				break
			}
			label(members)
		}
	}
}

// label gives members, in partition order, their group's label; one
// chunk alone has none.
func label(members []*chunk) {
	if len(members) < 2 {
		return
	}
	lead := members[0].items
	g := groupLabel{leader: lead[0].Partition, end: lead[len(lead)-1].Offset, n: len(members)}
	for _, c := range members {
		c.group = g
	}
}

// weight is the rows of items (a row batch weighs its rows).
func weight(items []item) int {
	n := 0
	for _, it := range items {
		n += int(it.rows)
	}
	return n
}

// size is the Kafka bytes of items: their keys and values.
func size(items []item) int {
	n := 0
	for _, it := range items {
		n += len(it.Key) + len(it.Value)
	}
	return n
}

// hasMarker reports whether items hold a truncate or re-copy done marker.
func hasMarker(items []item) bool {
	for _, it := range items {
		if it.kind == kindTruncate || it.kind == kindRecopy {
			return true
		}
	}
	return false
}

// order returns the units of chunks (each partition's chunks in order,
// partitions in the order of chunks) such that every partition's chunks
// load in offset order: a group loads once each of its members is the
// next chunk of its partition. Groups that can never be ordered so (an
// intent that crosses them) load apart.
func order(chunks []chunk) []unit {
	if !slices.ContainsFunc(chunks, func(c chunk) bool { return c.group.n > 1 }) {
		// No group (the default, per partition): each chunk is a unit,
		// each partition's already in offset order.
		out := make([]unit, len(chunks))
		for i := range chunks {
			out[i] = unit{&chunks[i]}
		}
		return out
	}
	var keys []tp
	queue := map[tp][]*chunk{}
	for i := range chunks {
		c := &chunks[i]
		k := c.key()
		if _, ok := queue[k]; !ok {
			keys = append(keys, k)
		}
		queue[k] = append(queue[k], c)
	}
	members := map[groupKey][]*chunk{}
	for i := range chunks {
		if c := &chunks[i]; c.group.n > 1 {
			k := groupKey{c.items[0].Topic, c.group}
			members[k] = append(members[k], c)
		}
	}
	var out []unit
	for left := len(chunks); left > 0; {
		progress := false
		for _, k := range keys {
			q := queue[k]
			if len(q) == 0 {
				continue
			}
			c := q[0]
			u := unit{c}
			if c.group.n > 1 {
				u = members[groupKey{k.topic, c.group}]
				if !allNext(u, queue) {
					continue
				}
			}
			for _, m := range u {
				mk := m.key()
				queue[mk] = queue[mk][1:]
			}
			sort.Slice(u, func(i, j int) bool { return u[i].items[0].Partition < u[j].items[0].Partition })
			out = append(out, u)
			left -= len(u)
			progress = true
		}
		if !progress {
			// Break the group of the first waiting chunk apart.
			for _, k := range keys {
				if q := queue[k]; len(q) > 0 {
					for _, m := range members[groupKey{k.topic, q[0].group}] {
						m.group = groupLabel{}
					}
					break
				}
			}
		}
	}
	return out
}

// allNext reports whether every chunk of u is the next of its partition.
func allNext(u unit, queue map[tp][]*chunk) bool {
	for _, m := range u {
		if q := queue[m.key()]; len(q) == 0 || q[0] != m {
			return false
		}
	}
	return true
}

// loadGroup loads the chunks of group u (each one segment: no marker) as
// one batch. Its members are decoded and checked apart, InsertParallelism
// at a time, then loaded together under the group's token; each member's
// watermark advances once the batch is loaded. When the table stops
// (TableError) within the batch, the members before the record it stopped
// at are loaded, that member stops there, and the members after it load
// apart, each up to where it stops itself, as they would alone.
func (s *Sink) loadGroup(ctx context.Context, u unit) ([]chunkLoad, error) {
	segs := make([]*segment, len(u))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(s.cfg.InsertParallelism)
	for i, c := range u {
		g.Go(func() error {
			dec := <-s.decoders
			defer func() { s.decoders <- dec }()
			var err error
			segs[i], err = s.prepare(gctx, dec, c.items)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	merged, ok := mergeSegments(u.token(), segs)
	if !ok {
		// Partitions of one topic carrying different tables (a sink
		// without a topic prefix cannot refuse them): each member loads
		// as its own batch, InsertParallelism at a time, as without
		// CombinePartitions. The records decide it, so a rebuilt group
		// decides the same.
		return s.loadMembers(ctx, u, segs)
	}
	err := s.loadPrepared(ctx, merged)
	var te *TableError
	if err != nil && !errors.As(err, &te) {
		return nil, err
	}
	out := make([]chunkLoad, len(u))
	if te != nil && (te.Index < 0 || te.Index >= len(merged.origin)) {
		// The loader cannot tell what loaded: each member stops where it
		// began, as a chunk alone does.
		for i, c := range u {
			out[i] = chunkLoad{c: c, err: te}
		}
		return out, nil
	}
	stopped := false
	start := 0 // position in merged of the member's first record
	for i, c := range u {
		n := len(segs[i].b.Records)
		switch {
		case te == nil || !stopped && te.Index >= start+n:
			s.loadedChunk(c.items, segs[i].seen)
			out[i] = chunkLoad{c: c}
		case !stopped:
			out[i] = chunkLoad{c: c, err: &stopAt{te: te, next: merged.origin[te.Index].Offset}}
			stopped = true
		default:
			if out[i] = s.loadMember(ctx, c, segs[i]); fatal(out[i].err) {
				return nil, out[i].err
			}
		}
		start += n
	}
	return out, nil
}

// loadMembers loads each member of group u as its own batch (its
// prepared segment in segs), InsertParallelism at a time.
func (s *Sink) loadMembers(ctx context.Context, u unit, segs []*segment) ([]chunkLoad, error) {
	out := make([]chunkLoad, len(u))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(s.cfg.InsertParallelism)
	for i, c := range u {
		g.Go(func() error {
			if out[i] = s.loadMember(gctx, c, segs[i]); fatal(out[i].err) {
				return out[i].err
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return out, nil
}

// fatal reports whether err ends the flush: an error, but not a
// TableError, which stops one table's partition only.
func fatal(err error) bool {
	var te *TableError
	return err != nil && !errors.As(err, &te)
}

// loadMember loads the prepared segment sg of group member c as a batch
// of its own (named as c would be alone).
func (s *Sink) loadMember(ctx context.Context, c *chunk, sg *segment) chunkLoad {
	err := s.loadStopping(ctx, sg)
	if err == nil {
		s.loadedChunk(c.items, sg.seen)
	}
	return chunkLoad{c: c, err: err}
}

// mergeSegments joins the segments of a group into one under token; false
// when they are of different tables.
func mergeSegments(token string, segs []*segment) (*segment, bool) {
	m := &segment{b: Batch{Token: token}}
	skip, hashes := false, false
	n := 0
	for _, sg := range segs {
		if len(sg.b.Records) == 0 {
			continue
		}
		if n > 0 && (sg.b.Source.Schema != m.b.Source.Schema || sg.b.Source.Table != m.b.Source.Table) {
			return nil, false
		}
		if n == 0 {
			m.b.Source, m.b.erasures = sg.b.Source, sg.b.erasures
		} else if sg.b.erasures != m.b.erasures {
			m.b.erasures = math.MaxUint64 // no copy has it: recheckErased checks all again
		}
		n += len(sg.b.Records)
		skip = skip || sg.b.Skip != nil
		hashes = hashes || sg.hashes != nil
	}
	m.b.Records = make([]*record.Record, 0, n)
	m.origin = make([]*kgo.Record, 0, n)
	if skip {
		m.b.Skip = make([]bool, 0, n)
	}
	if hashes {
		m.hashes = make([]string, 0, n)
	}
	for _, sg := range segs {
		k := len(sg.b.Records)
		m.b.Records = append(m.b.Records, sg.b.Records...)
		m.origin = append(m.origin, sg.origin...)
		if skip {
			if sg.b.Skip != nil {
				m.b.Skip = append(m.b.Skip, sg.b.Skip...)
			} else {
				m.b.Skip = append(m.b.Skip, make([]bool, k)...)
			}
		}
		if hashes {
			if sg.hashes != nil {
				m.hashes = append(m.hashes, sg.hashes...)
			} else {
				m.hashes = append(m.hashes, make([]string, k)...)
			}
		}
	}
	return m, true
}
