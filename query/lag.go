package query

import (
	"context"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/walhouse/walhouse/monitor"
	"github.com/walhouse/walhouse/record"
	"github.com/walhouse/walhouse/schema"
)

// PipelineProbe reads the parts of the pipeline's lag that live outside
// ClickHouse (the replication slot, capture's producer backlog, the sink's
// consumer group, the dead-letter topic); monitor.Probe is the one serve
// uses. Without one, GET /v1/lag reports load freshness only. Probe must
// report what it could not read in PipelineLag.Errors rather than fail.
type PipelineProbe interface {
	Probe(ctx context.Context) monitor.PipelineLag
}

// LagTable is one table of GET /v1/lag.
type LagTable struct {
	SyncState
	// FreshnessSeconds is now - LastSyncAt; null when unknown.
	FreshnessSeconds *float64 `json:"freshnessSeconds"`
	// ConsumerLag is, per Kafka partition of the table's topic, the records
	// the sink has not consumed yet (with a PipelineProbe only).
	ConsumerLag map[int32]int64 `json:"consumerLag,omitempty"`
	// RecordsLost is, per partition, the offsets Kafka deleted before the
	// sink read them (monitor.PipelineLag.RecordsLost): the table misses
	// those changes until it is copied again.
	RecordsLost map[int32]int64 `json:"recordsLost,omitempty"`
	// NearRetention is, per partition, the unread records retention
	// deletes before the sink reads them (monitor.PipelineLag.NearRetention).
	NearRetention map[int32]int64 `json:"nearRetention,omitempty"`
	// Verify is what `walhouse verify` last found for the table; absent
	// when verify never recorded a round of it.
	Verify *VerifyState `json:"verify,omitempty"`
}

// LagReport is the body of GET /v1/lag.
type LagReport struct {
	Now    time.Time  `json:"now"`
	Tables []LagTable `json:"tables"`
	// Pipeline is the slot, consumer and dead-letter state (with a
	// PipelineProbe only).
	Pipeline *monitor.PipelineLag `json:"pipeline,omitempty"`
	// VerifyError says why verify's rounds could not be read (the rest of
	// the report stands).
	VerifyError string `json:"verifyError,omitempty"`
}

// lagReport lists every replicated table (and every table with recorded
// progress), with its freshness and per-partition progress.
func lagReport(ctx context.Context, conn Conn, cat *Catalog, database string, probe PipelineProbe, now time.Time) (LagReport, error) {
	tables, err := cat.Tables(ctx)
	if err != nil {
		return LagReport{}, err
	}
	states, err := syncStates(ctx, conn, database, "")
	if err != nil {
		return LagReport{}, err
	}
	rep := LagReport{Now: now.UTC(), Tables: []LagTable{}}
	// Verify's rounds are shown beside the load, never instead of it: a
	// read that fails is named and the rest reported.
	verified, err := verifyStates(ctx, conn, database)
	if err != nil {
		rep.VerifyError = err.Error()
	}
	names := map[string]bool{}
	for _, t := range tables {
		names[t.Name] = true
	}
	for n := range states {
		names[n] = true
	}
	for n := range verified {
		names[n] = true
	}
	for n := range names {
		lt := LagTable{SyncState: SyncState{Table: n, Partitions: []PartitionSync{}}, Verify: verified[n]}
		if st, ok := states[n]; ok {
			lt.SyncState = *st
			if st.LastSyncAt != nil {
				f := now.Sub(*st.LastSyncAt).Seconds()
				lt.FreshnessSeconds = &f
			}
		}
		rep.Tables = append(rep.Tables, lt)
	}
	sort.Slice(rep.Tables, func(i, j int) bool { return rep.Tables[i].Table < rep.Tables[j].Table })
	if probe != nil {
		pl := probe.Probe(ctx)
		rep.Pipeline = &pl
		for i := range rep.Tables {
			rep.Tables[i].ConsumerLag = topicLagOf(pl.ConsumerLag, rep.Tables[i].Table)
			rep.Tables[i].RecordsLost = topicLagOf(pl.RecordsLost, rep.Tables[i].Table)
			rep.Tables[i].NearRetention = topicLagOf(pl.NearRetention, rep.Tables[i].Table)
		}
	}
	return rep, nil
}

// topicLagOf finds the consumer lag (or another per-partition figure) of a
// ClickHouse table's topic
// (<prefix>.<schema>.<table>, named as schema.TableName names tables).
func topicLagOf(lag map[string]map[int32]int64, table string) map[int32]int64 {
	for topic, parts := range lag {
		rest := topic
		// Topic prefixes may contain dots: try each split from the right.
		for {
			i := strings.Index(rest, ".")
			if i < 0 {
				break
			}
			rest = rest[i+1:]
			sch, tbl, ok := strings.Cut(rest, ".")
			if ok && !strings.Contains(tbl, ".") && schema.TableName(record.Source{Schema: sch, Table: tbl}) == table {
				return parts
			}
		}
	}
	return nil
}

func (s *Server) handleLag(w http.ResponseWriter, r *http.Request) {
	rep, err := lagReport(r.Context(), s.conn, s.catalog, s.cfg.Database, s.cfg.Pipeline, time.Now())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, rep)
}

// sampleOf keeps the charted figures of a lag report.
func sampleOf(rep LagReport) monitor.LagSample {
	s := monitor.NewSample(rep.Now, rep.Pipeline)
	for _, t := range rep.Tables {
		ts := monitor.TableSample{FreshnessSeconds: t.FreshnessSeconds}
		if t.ConsumerLag != nil {
			n := monitor.SumLag(t.ConsumerLag)
			ts.ConsumerLag = &n
		}
		s.Tables[t.Table] = ts
	}
	return s
}

// Run records a lag sample (what GET /v1/lag reports) into the history
// served at GET /v1/lag/history every Config.HistoryInterval, until ctx
// ends; it then returns nil. Without Run the history stays empty and the
// status page's charts start with its first poll. Call it once.
func (s *Server) Run(ctx context.Context) error {
	return s.history.Run(ctx, func(ctx context.Context) (monitor.LagSample, error) {
		rep, err := lagReport(ctx, s.conn, s.catalog, s.cfg.Database, s.cfg.Pipeline, time.Now())
		if err != nil {
			return monitor.LagSample{}, err
		}
		return sampleOf(rep), nil
	}, s.log)
}

func (s *Server) handleLagHistory(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, s.history.Snapshot())
}
