package monitor

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/walhouse/walhouse/record"
)

// PipelineLag is what a Probe read: the pipeline part of serve's GET
// /v1/lag.
type PipelineLag struct {
	Slot *SlotLag `json:"slot,omitempty"`
	// ConsumerLag holds, per topic and partition, the records the sink has
	// not consumed yet (end offset − committed offset).
	ConsumerLag map[string]map[int32]int64 `json:"consumerLag,omitempty"`
	// RecordsLost holds, per topic and partition, the offsets Kafka
	// deleted (retention, DeleteRecords) before the sink's group read
	// them: log start − committed offset, for partitions committed below
	// their log start. The sink stops loading such a partition
	// (docs/operations.md#records-lost).
	RecordsLost map[string]map[int32]int64 `json:"recordsLost,omitempty"`
	// NearRetention holds, per topic and partition with consumer lag, the
	// records the sink has not consumed that retention deletes before the
	// sink reads them: those older than half their topic's retention.ms,
	// or, where the topic has a retention.bytes, the oldest of the unread
	// bytes plus those produced before the sink reads them at its current
	// pace that exceed it.
	NearRetention map[string]map[int32]int64 `json:"nearRetention,omitempty"`
	// DLQDepth is the number of records in the dead-letter topic.
	DLQDepth *int64 `json:"dlqDepth,omitempty"`
	// ProducerBacklogBytes is the sum of PendingBytes over the capture
	// processes that answered: bytes produced to Kafka and not yet
	// acknowledged. Null when no capture answered (or none is configured).
	ProducerBacklogBytes *int64 `json:"producerBacklogBytes,omitempty"`
	// Captures is the status of each capture process, reachable or not.
	Captures []CaptureLag `json:"captures,omitempty"`
	// Errors names the parts that could not be read.
	Errors []string `json:"errors,omitempty"`
}

// SlotLag is the state of the replication slot.
type SlotLag struct {
	Name      string `json:"name"`
	Active    bool   `json:"active"`
	WALStatus string `json:"walStatus"`
	// LagBytes is the WAL the slot holds back: current WAL position −
	// confirmed position.
	LagBytes int64 `json:"lagBytes"`
	// LagSeconds is PostgreSQL's replay lag of the walsender (the time
	// since the confirmed position was written); null while capture is
	// not connected or nothing was confirmed recently.
	LagSeconds   *float64   `json:"lagSeconds"`
	ConfirmedLSN record.LSN `json:"confirmedLsn"`
}

// Config names what NewProbe reads; empty parts are left out of the
// report.
type Config struct {
	PG       *pgxpool.Pool // the source database
	Slot     string        // capture's slot
	Kafka    *kadm.Client
	Group    string // the sink's consumer group
	Prefix   string // topic prefix: topics are <prefix>.<schema>.<table>
	DLQTopic string
	// Captures are the status URLs of the capture processes (see
	// CaptureStatusURL for the forms accepted), for the producer backlog.
	Captures []string
	// CaptureTimeout bounds each read of a capture status (default
	// DefaultCaptureTimeout).
	CaptureTimeout time.Duration
	// HTTPClient reads the capture statuses (default: a client of its own).
	HTTPClient *http.Client
}

// NewProbe returns a probe over cfg.
func NewProbe(cfg Config) *Probe {
	p := &Probe{cfg: cfg}
	if len(cfg.Captures) > 0 {
		cp := &captureProbe{client: cfg.HTTPClient, timeout: cfg.CaptureTimeout}
		if cp.client == nil {
			cp.client = &http.Client{}
		}
		if cp.timeout <= 0 {
			cp.timeout = DefaultCaptureTimeout
		}
		for _, u := range cfg.Captures {
			// An invalid URL stays as given: it is reported down, with the
			// reason, on every probe (serve refuses it at start-up).
			if n, err := CaptureStatusURL(u); err == nil {
				u = n
			}
			// Each capture once: a URL given twice would be one metric twice.
			if !slices.Contains(cp.urls, u) {
				cp.urls = append(cp.urls, u)
			}
		}
		p.captures = cp
	}
	return p
}

// Probe reads the parts of the pipeline's lag that live outside
// ClickHouse: the replication slot in PostgreSQL, capture's producer
// backlog (from its status document), the sink's consumer group and the
// dead-letter topic in Kafka. It is safe for concurrent use; probes run one
// at a time, so scrapes and page polls never pile up on the source
// database.
type Probe struct {
	cfg      Config
	captures *captureProbe
	mu       sync.Mutex
	// pace holds, per lagging partition of a topic with retention.bytes,
	// the samples its produce and read pace is measured over (guarded by
	// mu, as every probe holds it).
	pace map[string]map[int32]paceWindow
}

// Probe reads every configured part. It never fails: what it could not
// read is named in PipelineLag.Errors, and the rest is reported.
func (p *Probe) Probe(ctx context.Context) PipelineLag {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out PipelineLag
	fail := func(part string, err error) { out.Errors = append(out.Errors, fmt.Sprintf("%s: %v", part, err)) }
	// Capture statuses are read over HTTP meanwhile: a slow capture then
	// adds nothing to the time the database and Kafka take.
	var captures []CaptureLag
	capturesDone := make(chan struct{})
	if p.captures != nil {
		go func() {
			defer close(capturesDone)
			captures = p.captures.probe(ctx)
		}()
	} else {
		close(capturesDone)
	}
	if p.cfg.PG != nil && p.cfg.Slot != "" {
		out.Slot, _ = probePart(ctx, "replication slot", p.slot, fail)
	}
	if p.cfg.Kafka != nil && p.cfg.Group != "" {
		if g, ok := probePart(ctx, "consumer lag", p.consumerLag, fail); ok {
			out.ConsumerLag, out.RecordsLost = g.lag, g.lost
			if len(g.unread) > 0 {
				// What could be weighed is reported even when a part could
				// not (retention.bytes without the log sizes).
				near, err := p.nearRetention(ctx, g, time.Now())
				if err != nil {
					fail("retention", err)
				}
				out.NearRetention = near
			}
		}
	}
	if p.cfg.Kafka != nil && p.cfg.DLQTopic != "" {
		if d, ok := probePart(ctx, "dead-letter topic", p.dlqDepth, fail); ok {
			out.DLQDepth = &d
		}
	}
	<-capturesDone
	out.Captures = captures
	for _, c := range captures {
		if !c.Up {
			fail("capture "+c.URL, errors.New(c.Error))
			continue
		}
		if out.ProducerBacklogBytes == nil {
			out.ProducerBacklogBytes = new(int64)
		}
		*out.ProducerBacklogBytes += c.Status.PendingBytes
	}
	return out
}

// probePart reads one part of a probe: its value, or after fail named the
// part and why, the zero value and false.
func probePart[T any](ctx context.Context, part string, read func(context.Context) (T, error), fail func(string, error)) (T, bool) {
	v, err := read(ctx)
	if err != nil {
		fail(part, err)
		var zero T
		return zero, false
	}
	return v, true
}

func (p *Probe) slot(ctx context.Context) (*SlotLag, error) {
	s := &SlotLag{Name: p.cfg.Slot}
	var confirmed *string
	var walStatus *string
	err := p.cfg.PG.QueryRow(ctx, `
		SELECT s.active, s.wal_status, coalesce(pg_current_wal_lsn() - s.confirmed_flush_lsn, 0)::bigint,
		       s.confirmed_flush_lsn::text, extract(epoch FROM r.replay_lag)::float8
		FROM pg_replication_slots s LEFT JOIN pg_stat_replication r ON r.pid = s.active_pid
		WHERE s.slot_name = $1`, p.cfg.Slot).Scan(&s.Active, &walStatus, &s.LagBytes, &confirmed, &s.LagSeconds)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("slot %s does not exist", p.cfg.Slot)
	}
	if err != nil {
		return nil, err
	}
	if walStatus != nil {
		s.WALStatus = *walStatus
	}
	if confirmed != nil {
		if s.ConfirmedLSN, err = record.ParseLSN(*confirmed); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// groupOffsets is what consumerLag read of the sink's group.
type groupOffsets struct {
	lag, lost map[string]map[int32]int64
	// unread is the first offset not consumed of each partition with lag.
	unread map[string]map[int32]int64
	// offsets are the log start and end offsets of each partition with
	// lag.
	offsets map[string]map[int32]logOffsets
}

// logOffsets are a partition's log start and end offsets.
type logOffsets struct{ start, end int64 }

func (p *Probe) consumerLag(ctx context.Context) (groupOffsets, error) {
	lags, err := p.cfg.Kafka.Lag(ctx, p.cfg.Group)
	if err != nil {
		return groupOffsets{}, err
	}
	gl, ok := lags[p.cfg.Group]
	if !ok {
		return groupOffsets{}, fmt.Errorf("group %s not found", p.cfg.Group)
	}
	if gl.Error() != nil {
		return groupOffsets{}, gl.Error()
	}
	out := groupOffsets{lag: map[string]map[int32]int64{}, unread: map[string]map[int32]int64{}, offsets: map[string]map[int32]logOffsets{}}
	for topic, parts := range gl.Lag {
		if p.cfg.Prefix != "" && !strings.HasPrefix(topic, p.cfg.Prefix+".") {
			continue
		}
		out.lag[topic] = map[int32]int64{}
		for part, l := range parts {
			out.lag[topic][part] = l.Lag
			if l.Start.Err != nil {
				continue
			}
			if n := lostOffsets(l.Commit.At, l.Start.Offset); n > 0 {
				if out.lost == nil {
					out.lost = map[string]map[int32]int64{}
				}
				if out.lost[topic] == nil {
					out.lost[topic] = map[int32]int64{}
				}
				out.lost[topic][part] = n
			}
			if l.Lag > 0 {
				if out.unread[topic] == nil {
					out.unread[topic] = map[int32]int64{}
				}
				out.unread[topic][part] = max(l.Commit.At, l.Start.Offset)
				if out.offsets[topic] == nil {
					out.offsets[topic] = map[int32]logOffsets{}
				}
				out.offsets[topic][part] = logOffsets{start: l.Start.Offset, end: l.End.Offset}
			}
		}
	}
	return out, nil
}

func (p *Probe) dlqDepth(ctx context.Context) (int64, error) {
	starts, err := p.cfg.Kafka.ListStartOffsets(ctx, p.cfg.DLQTopic)
	if err != nil {
		return 0, err
	}
	ends, err := p.cfg.Kafka.ListEndOffsets(ctx, p.cfg.DLQTopic)
	if err != nil {
		return 0, err
	}
	var depth int64
	var lerr error
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			lerr = o.Err
			return
		}
		if s, ok := starts.Lookup(o.Topic, o.Partition); ok && s.Err == nil {
			depth += o.Offset - s.Offset
		}
	})
	return depth, lerr
}
