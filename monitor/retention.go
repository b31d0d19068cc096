package monitor

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// Kafka deletes a topic's records by age (retention.ms) or size
// (retention.bytes), read or not. The probe reports what it already
// deleted before the sink's group read it (RecordsLost: the committed
// offset below the log start, which the sink also stops at) and what it is
// about to (NearRetention: unread records past half of retention.ms, or
// that retention.bytes deletes before the sink reads them at its current
// pace), so an operator can raise the retention or add sinks before the
// loss.

// lostOffsets returns the offsets a group committed at commit lost when its
// partition's log start moved to start: none when it committed nothing
// (commit < 0) or its commit is at or past the log start.
func lostOffsets(commit, start int64) int64 {
	if commit < 0 || start <= commit {
		return 0
	}
	return start - commit
}

// The topic settings nearRetention reads.
const (
	retentionMsConfig    = "retention.ms"
	retentionBytesConfig = "retention.bytes"
)

// topicRetention is a topic's retention.ms and retention.bytes (each 0
// when the topic keeps its records forever by it, -1 in Kafka).
type topicRetention struct{ ms, bytes int64 }

// nearRetention returns, for each partition of unread (its first offset
// not consumed), the records retention will delete before the sink reads
// them: those older than half their topic's retention.ms at now, or more
// of them when the topic's retention.bytes would be passed first
// (bytesAtRisk). Partitions of topics kept forever are left out.
func (p *Probe) nearRetention(ctx context.Context, g groupOffsets, now time.Time) (map[string]map[int32]int64, error) {
	topics := make([]string, 0, len(g.unread))
	for t := range g.unread {
		topics = append(topics, t)
	}
	rcs, err := p.cfg.Kafka.DescribeTopicConfigs(ctx, topics...)
	if err != nil {
		return nil, err
	}
	retention := map[string]topicRetention{}
	byMs := map[int64][]string{} // retention.ms → topics
	var bySize []string          // topics with a retention.bytes
	for _, rc := range rcs {
		if rc.Err != nil {
			return nil, fmt.Errorf("topic %s: %w", rc.Name, rc.Err)
		}
		var r topicRetention
		for _, c := range rc.Configs {
			if c.Key != retentionMsConfig && c.Key != retentionBytesConfig {
				continue
			}
			v, err := strconv.ParseInt(c.MaybeValue(), 10, 64)
			if err != nil {
				return nil, fmt.Errorf("topic %s: %s=%q: %w", rc.Name, c.Key, c.MaybeValue(), err)
			}
			if v <= 0 {
				continue
			}
			if c.Key == retentionMsConfig {
				r.ms = v
				byMs[v] = append(byMs[v], rc.Name)
			} else {
				r.bytes = v
				bySize = append(bySize, rc.Name)
			}
		}
		retention[rc.Name] = r
	}
	out := map[string]map[int32]int64{}
	set := func(topic string, part int32, n int64) {
		if out[topic] == nil {
			out[topic] = map[int32]int64{}
		}
		out[topic][part] = max(out[topic][part], n)
	}
	for ms, ts := range byMs {
		young, err := p.cfg.Kafka.ListOffsetsAfterMilli(ctx, now.UnixMilli()-ms/2, ts...)
		if err != nil {
			return nil, err
		}
		if err := young.Error(); err != nil {
			return nil, err
		}
		young.Each(func(o kadm.ListedOffset) {
			if first, ok := g.unread[o.Topic][o.Partition]; ok {
				set(o.Topic, o.Partition, max(o.Offset-first, 0))
			}
		})
	}
	if len(bySize) == 0 {
		p.pace = nil
		return out, nil
	}
	// Without the sizes, what retention.ms says still stands: it is
	// returned with the error.
	var sized kadm.TopicsSet
	for _, topic := range bySize {
		for part := range g.unread[topic] {
			sized.Add(topic, part)
		}
	}
	sizes, err := p.logSizes(ctx, sized)
	if err != nil {
		return out, fmt.Errorf("retention.bytes of %v: the sizes of their logs (serve's Kafka principal needs Describe on the cluster, docs/security.md): %w", bySize, err)
	}
	pace := map[string]map[int32]paceWindow{}
	for _, topic := range bySize {
		for part, first := range g.unread[topic] {
			o := g.offsets[topic][part]
			cur := paceSample{at: now, end: o.end, read: first}
			w := p.pace[topic][part].next(cur)
			if pace[topic] == nil {
				pace[topic] = map[int32]paceWindow{}
			}
			pace[topic][part] = w
			produced, read, known := w.rates(cur)
			size, ok := sizes[topic][part]
			if !ok {
				continue
			}
			set(topic, part, bytesAtRisk(byteRetention{limit: retention[topic].bytes, size: size, start: o.start, end: o.end, unread: first,
				produced: produced, read: read, paceKnown: known}))
		}
	}
	// Only lagging partitions keep a window: one that caught up starts
	// afresh when it lags again.
	p.pace = pace
	return out, nil
}

// logSizes returns the size in bytes of each partition of set (a topic
// must name its partitions: one with none describes none): the largest any
// replica reports (the leader's, unless a follower has not deleted
// segments yet).
func (p *Probe) logSizes(ctx context.Context, set kadm.TopicsSet) (map[string]map[int32]int64, error) {
	dirs, err := p.cfg.Kafka.DescribeAllLogDirs(ctx, set)
	if err != nil {
		return nil, err
	}
	out := map[string]map[int32]int64{}
	var derr error
	dirs.Each(func(d kadm.DescribedLogDir) {
		if d.Err != nil {
			derr = fmt.Errorf("broker %d, log dir %s: %w", d.Broker, d.Dir, d.Err)
			return
		}
		for topic, parts := range d.Topics {
			for part, dp := range parts {
				if dp.IsFuture {
					continue
				}
				if out[topic] == nil {
					out[topic] = map[int32]int64{}
				}
				out[topic][part] = max(out[topic][part], dp.Size)
			}
		}
	})
	return out, derr
}

// paceSample is one probe's reading of a lagging partition.
type paceSample struct {
	at        time.Time
	end, read int64 // the end offset, the first offset not consumed
}

// paceWindow holds a partition's recent samples, oldest first, to measure
// its pace over at least paceWindowSpan: the sink commits its offsets in
// steps, and two probes a second apart may see none.
type paceWindow struct {
	samples []paceSample
}

const (
	// paceWindowSpan is the least time a pace is measured over.
	paceWindowSpan = time.Minute
	// paceSampleEvery spaces the samples kept, so that frequent probes
	// keep about paceWindowSpan/paceSampleEvery of them, not one each.
	paceSampleEvery = 2 * time.Second
)

// next returns the window with cur read: cur kept if the last sample is
// paceSampleEvery old, samples dropped while the next one is old enough to
// span the window. A partition whose offsets went back (a topic made
// again) starts afresh.
func (w paceWindow) next(cur paceSample) paceWindow {
	n := len(w.samples)
	if n == 0 || cur.end < w.samples[n-1].end || cur.read < w.samples[n-1].read || cur.at.Before(w.samples[n-1].at) {
		return paceWindow{samples: []paceSample{cur}}
	}
	s := w.samples
	if cur.at.Sub(s[n-1].at) >= paceSampleEvery {
		s = append(s[:n:n], cur)
	}
	for len(s) > 1 && cur.at.Sub(s[1].at) >= paceWindowSpan {
		s = s[1:]
	}
	return paceWindow{samples: s}
}

// rates returns the records produced and read per second between the
// oldest sample and cur, and whether they span enough time to tell.
func (w paceWindow) rates(cur paceSample) (produced, read float64, known bool) {
	if len(w.samples) == 0 {
		return 0, 0, false
	}
	base := w.samples[0]
	d := cur.at.Sub(base.at).Seconds()
	if d < paceWindowSpan.Seconds() {
		return 0, 0, false
	}
	return float64(cur.end-base.end) / d, float64(cur.read-base.read) / d, true
}

// byteRetention is what bytesAtRisk weighs of one partition.
type byteRetention struct {
	limit              int64 // the topic's retention.bytes
	size               int64 // the partition's log, in bytes
	start, end, unread int64 // the log start and end offsets, the first offset not consumed
	// produced and read are the records produced and consumed per second
	// at the current pace; paceKnown is false until a pace was measured.
	produced, read float64
	paceKnown      bool
}

// bytesAtRisk returns how many unread records Kafka's retention.bytes
// deletes before the sink reads them. Kafka deletes a partition's oldest
// segments while its log is larger than retention.bytes; the sink reads
// the last of the unread records after lag/read seconds, while producers
// add produced records a second meanwhile. So the unread bytes plus the
// bytes produced before the sink has read them all are weighed against the
// limit, and the excess, oldest first, is at risk (in records of the log's
// mean size). A sink that reads nothing while records are produced reads
// none of them before retention does; until a pace is measured, only the
// unread bytes are weighed.
func bytesAtRisk(r byteRetention) int64 {
	lag := r.end - r.unread
	records := r.end - r.start
	if r.limit <= 0 || lag <= 0 || records <= 0 || r.size <= 0 {
		return 0
	}
	mean := float64(r.size) / float64(records)
	bytes := float64(lag) * mean
	if r.paceKnown && r.produced > 0 {
		if r.read <= 0 {
			return lag
		}
		bytes += r.produced * mean * float64(lag) / r.read
	}
	excess := bytes - float64(r.limit)
	if excess <= 0 {
		return 0
	}
	return min(lag, int64(math.Ceil(excess/mean)))
}
