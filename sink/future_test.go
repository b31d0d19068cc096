package sink

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walhouse/walhouse/record"
)

// TestAnchorsBoundPositions walks a partition's items through its anchor:
// what PostgreSQL can have written by an item's time passes, however long
// after the anchor; a position beyond it, or a time beyond the clock, does
// not, and moves nothing.
func TestAnchorsBoundPositions(t *testing.T) {
	now := time.Now()
	t0 := now.Add(-2 * time.Hour)
	const base = record.LSN(0x5A_0000_0000) // 360 GiB
	k := tp{"t", 0}
	var as anchors
	for i, step := range []struct {
		name string
		lsn  record.LSN
		at   time.Time
		ok   bool
		jump bool // accepted within the margin only
	}{
		{"near 2^64 before any anchor", math.MaxUint64 - 16, t0, false, false},
		{"the first real item", base, t0, true, false},
		{"10 GiB 10 s later", base + 10<<30, t0.Add(10 * time.Second), true, false},
		{"100 GiB a second later: within the margin, a jump", base + 110<<30, t0.Add(11 * time.Second), true, true},
		{"3 TiB 10 s later", base + 3<<40, t0.Add(20 * time.Second), false, false},
		{"an older position", 1, t0, true, false},
		{"3 TiB after an hour (a backlog after capture stopped)", base + 3<<40, t0.Add(time.Hour), true, false},
		{"near 2^64 after the anchor", math.MaxUint64 - 16, now, false, false},
		{"2^63", 1 << 63, now, false, false},
		{"a time from the future", base + 3<<40 + 1, now.Add(10 * time.Minute), false, false},
		{"the next real item", base + 3<<40 + 1<<20, t0.Add(time.Hour + time.Second), true, false},
	} {
		err := checkTime("item", step.at, now)
		var jumped bool
		if err == nil {
			jumped, err = as.raise(k, "item", step.lsn, step.at, now, true)
		}
		if (err == nil) != step.ok || err != nil && !errors.Is(err, errFuturePosition) {
			t.Errorf("%d %s: %v, want passed %v", i, step.name, err, step.ok)
		}
		if jumped != step.jump {
			t.Errorf("%d %s: jumped %v, want %v", i, step.name, jumped, step.jump)
		}
	}
	if a := as.m[k]; a.lsn != base+3<<40+1<<20 {
		t.Errorf("anchor at %s, want the last real item's position", a.lsn)
	}
}

// recAt is rec with its position and commit time given.
func recAt(topic string, offset int64, lsn record.LSN, at time.Time) *kgo.Record {
	cols := recColumns
	r := &record.Record{
		OccurredAt: at, IngestedAt: at, TenantID: "t", TenantColumn: "tenant_id",
		Source: record.Source{ID: "s", Schema: "public", Table: topic},
		LSN:    lsn, CommitLSN: lsn, Op: record.Update, Version: record.Version(lsn),
		Columns: cols, SchemaID: record.SchemaID("tenant_id", cols),
		Values: []record.Value{{Text: "t"}, {Text: fmt.Sprint(offset)}},
	}
	r.EventID = record.EventID("s", r.CommitLSN, 0, r.OccurredAt)
	return &kgo.Record{Topic: topic, Offset: offset, Value: record.AppendJSON(nil, r)}
}

// TestSinkRefusesFuturePositions: a record, truncate marker or heartbeat
// forged at a WAL position near 2^64 (it would win over every later real
// change for good), a heartbeat from the future, and a record at a
// position the clamped future time does not reach, go to the dead letters
// with reason future_position and are counted; the real records around
// them load.
func TestSinkRefusesFuturePositions(t *testing.T) {
	const topic = "a"
	now := time.Now().UTC()
	future := now.Add(24 * time.Hour) // clamped to now + maxClockSkew: no more WAL than that
	beat := heartbeatRec(topic, topic, 3, now)
	beat.Headers[1].Value = []byte("FFFFFFFF/0")
	poll := []*kgo.Record{
		rec(topic, 0, 0),
		recAt(topic, 1, math.MaxUint64-16, now),
		marker(topic, 0, 2, 1<<63),
		beat,
		recAt(topic, 4, 1<<62, future),
		rec(topic, 0, 5),
		heartbeatRec(topic, topic, 6, future),
		rec(topic, 0, 7),
	}
	l := &truncatingLoader{fakeLoader: &fakeLoader{}}
	dead := &fakeDead{}
	m := NewMetrics(nil)
	runScriptWith(t, Config{DeadLetters: dead, Metrics: m}, nil, l, poll)
	var got []string
	for _, d := range dead.got {
		if d.Reason != ReasonFuturePosition || !errors.Is(d.Err, record.ErrInvalid) {
			t.Errorf("dead letter at %d: reason %q, %v; want %s and ErrInvalid", d.Offset, d.Reason, d.Err, ReasonFuturePosition)
		}
		got = append(got, fmt.Sprint(d.Offset))
	}
	if fmt.Sprint(got) != "[1 2 3 4 6]" {
		t.Errorf("dead letters at %v, want [1 2 3 4 6]: %+v", got, dead.got)
	}
	wantBatches(t, l.batches, "a/0/0-1 n=1", "a/0/3-7 n=2")
	var n float64
	for _, kind := range []string{"record", "heartbeat", "truncate marker"} {
		c, err := m.future.GetMetricWithLabelValues(topic, kind)
		if err != nil {
			t.Fatal(err)
		}
		var got dto.Metric
		if err := c.Write(&got); err != nil {
			t.Fatal(err)
		}
		n += got.GetCounter().GetValue()
	}
	if n != 5 {
		t.Errorf("walhouse_sink_future_positions_total = %v, want 5", n)
	}
}

// TestSinkHoldsBatchesToTheirRowsHeader: a row batch whose rows header is
// over the bound goes to the dead letters undecoded (reason over_budget),
// and one whose header does not count its rows as invalid; the sink weighs
// batches by that header.
func TestSinkHoldsBatchesToTheirRowsHeader(t *testing.T) {
	huge := rowBatch("a", 0, 1, 101)
	huge.Headers[0].Value = []byte(fmt.Sprint(record.MaxBatchRows + 1))
	miscounted := rowBatch("a", 0, 2, 102, 103)
	miscounted.Headers[0].Value = []byte("3")
	l := &fakeLoader{}
	dead := &fakeDead{}
	runScript(t, Config{DeadLetters: dead}, nil, l, []*kgo.Record{rowBatch("a", 0, 0, 100), huge, miscounted, rec("a", 0, 3)})
	if len(dead.got) != 2 || dead.got[0].Reason != ReasonOverBudget || dead.got[1].Reason != "" || !errors.Is(dead.got[1].Err, record.ErrInvalid) {
		t.Fatalf("dead letters %+v, want the huge header (over_budget) and the miscounted batch", dead.got)
	}
	wantBatches(t, l.batches, "a/0/0-3 n=2")
}

// fakePositions answers LoadedPosition from a map by partition, after
// failing fails times.
type fakePositions struct {
	at    map[int32]record.LSN
	fails int
	calls int
}

func (f *fakePositions) LoadedPosition(_ context.Context, _ record.Source, partition int32) (record.LSN, time.Time, error) {
	f.calls++
	if f.calls <= f.fails {
		return 0, time.Time{}, errors.New("clickhouse is restarting")
	}
	return f.at[partition], time.Unix(1700000000, 0).UTC(), nil
}

// TestSinkSeedsAnchorsFromLoadedPositions: the first item of a partition
// after the sink starts is bounded from the position loaded before it
// (Config.Positions), read once per partition: a forged position at 2^61,
// below what PostgreSQL's epoch alone bounds, is refused there, and
// accepted on a table nothing was loaded from.
func TestSinkSeedsAnchorsFromLoadedPositions(t *testing.T) {
	at := time.Unix(1700000000, 0).UTC()
	forged := func(topic string, partition int32, offset int64) *kgo.Record {
		r := recAt(topic, offset, 1<<61, at)
		r.Partition = partition
		return r
	}
	poll := []*kgo.Record{forged("a", 0, 0), rec("a", 0, 1), forged("b", 1, 0), rec("b", 1, 1)}
	pos := &fakePositions{at: map[int32]record.LSN{0: 1000}, fails: 1}
	dead := &fakeDead{}
	l := &fakeLoader{}
	runScript(t, Config{DeadLetters: dead, Positions: pos}, nil, l, poll)
	if len(dead.got) != 1 || dead.got[0].Partition != 0 || dead.got[0].Offset != 0 || dead.got[0].Reason != ReasonFuturePosition {
		t.Errorf("dead letters %+v, want the forged record of partition 0 alone", dead.got)
	}
	if pos.calls != 3 {
		t.Errorf("%d reads of loaded positions, want 3 (one failed, one per table and partition)", pos.calls)
	}
}

// TestSinkLoadsFromAClockAhead: a PostgreSQL clock running more than
// maxClockSkew ahead of the sink's refuses its heartbeats (they would
// claim freshness not reached, and alert), but its changes, copied rows
// and TRUNCATE markers are real: they load and apply, their positions
// bounded as of the sink's clock plus maxClockSkew.
func TestSinkLoadsFromAClockAhead(t *testing.T) {
	const topic = "a"
	ahead := time.Now().UTC().Add(time.Hour)
	copied := rowBatch(topic, 0, 2, 7)
	copied.Value = []byte(strings.Replace(string(copied.Value), `"occurredAt":"2023-11-14T22:13:20Z"`, `"occurredAt":"`+ahead.Format(time.RFC3339)+`"`, 1))
	tr := record.Truncate{Source: record.Source{Schema: "public", Table: topic}, LSN: 3000, CommitTime: ahead, At: ahead.Add(-time.Second)}
	mark := &kgo.Record{Topic: topic, Offset: 3}
	for _, h := range tr.Headers() {
		mark.Headers = append(mark.Headers, kgo.RecordHeader{Key: h.Key, Value: []byte(h.Value)})
	}
	poll := []*kgo.Record{
		recAt(topic, 0, 1000, ahead),
		heartbeatRec(topic, topic, 1, ahead),
		copied,
		mark,
		recAt(topic, 4, 4000, ahead),
	}
	l := &truncatingLoader{fakeLoader: &fakeLoader{}}
	dead := &fakeDead{}
	runScriptWith(t, Config{DeadLetters: dead, Metrics: NewMetrics(nil)}, nil, l, poll)
	var got []string
	for _, d := range dead.got {
		got = append(got, fmt.Sprintf("%d %s: %v", d.Offset, d.Reason, d.Err))
	}
	if len(dead.got) != 1 || dead.got[0].Offset != 1 || dead.got[0].Reason != ReasonFuturePosition {
		t.Errorf("dead letters %q, want the heartbeat at offset 1 alone", got)
	}
	wantBatches(t, l.batches, "a/0/0-2 n=2", "truncate public.a<0/BB8 a/0/3/truncate", "a/0/4-4 n=1")
}

// TestAnchorsBoundNewPartitionsBySiblings: a partition without an anchor
// (added to its topic, or nothing loaded from it yet) is bounded by the
// loosest anchor of its topic's other partitions, not by PostgreSQL's
// epoch: WAL positions are the server's. A real backlog passes; a
// partition of another topic (another table) still starts from the epoch.
func TestAnchorsBoundNewPartitionsBySiblings(t *testing.T) {
	now := time.Now()
	t0 := now.Add(-2 * time.Hour)
	const base = record.LSN(0x5A_0000_0000)
	var as anchors
	for i, step := range []struct {
		name string
		k    tp
		lsn  record.LSN
		at   time.Time
		ok   bool
	}{
		{"partition 0's first item", tp{"t", 0}, base, t0, true},
		{"partition 3, 1 TiB on", tp{"t", 3}, base + 1<<40, now, true},
		{"a new partition's forged first item at 2^61", tp{"t", 1}, 1 << 61, now, false},
		{"a new partition's real backlog, by partition 0's rate", tp{"t", 2}, base + 20<<40, now, true},
		{"another topic's first item at 2^61", tp{"u", 0}, 1 << 61, now, true},
	} {
		if _, err := as.raise(step.k, "item", step.lsn, step.at, now, true); (err == nil) != step.ok {
			t.Errorf("%d %s: %v, want passed %v", i, step.name, err, step.ok)
		}
	}
}

// TestSinkRewriteCopyMovesNoAnchor: a row copied again after a rewrite
// carries the rewrite's position as its version and, as its time, when
// capture planned the copy, maybe long after (capture catching up). It is
// bounded, but moves no anchor: the real changes of the backlog after the
// rewrite, whose times are before the copy's, load, however much WAL
// lies between.
func TestSinkRewriteCopyMovesNoAnchor(t *testing.T) {
	const topic = "a"
	now := time.Now().UTC()
	t0 := now.Add(-3 * time.Hour)
	const base = record.LSN(0x5A_0000_0000)
	copied := func(offset int64, lsn record.LSN, at time.Time) *kgo.Record {
		r := &record.Record{
			OccurredAt: at, IngestedAt: at, TenantID: "t", TenantColumn: "tenant_id",
			Source: record.Source{ID: "s", Schema: "public", Table: topic},
			LSN:    lsn, CommitLSN: lsn, Op: record.Read, Version: record.RewriteCopyVersion(lsn),
			Columns: recColumns, SchemaID: record.SchemaID("tenant_id", recColumns),
			Values: []record.Value{{Text: "t"}, {Text: fmt.Sprint(offset)}},
		}
		r.EventID = record.SnapshotEventID("s", r.CommitLSN, "public."+topic, []string{"t", fmt.Sprint(offset)}, r.OccurredAt)
		return &kgo.Record{Topic: topic, Offset: offset, Value: record.AppendJSON(nil, r)}
	}
	poll := []*kgo.Record{
		recAt(topic, 0, base, t0),                                  // the stream, three hours behind
		copied(1, base+1<<30, now),                                 // the rewrite's copy, planned now
		recAt(topic, 2, base+2<<40, t0.Add(time.Hour)),             // the backlog after the rewrite
		copied(3, math.MaxUint64-16, now),                          // a forged copy still is refused
		recAt(topic, 4, base+3<<40, t0.Add(time.Hour+time.Second)), // and moves nothing either
	}
	l := &fakeLoader{}
	dead := &fakeDead{}
	runScriptWith(t, Config{DeadLetters: dead, Metrics: NewMetrics(nil)}, nil, l, poll)
	var got []string
	for _, d := range dead.got {
		got = append(got, fmt.Sprintf("%d %s: %v", d.Offset, d.Reason, d.Err))
	}
	if len(dead.got) != 1 || dead.got[0].Offset != 3 || dead.got[0].Reason != ReasonFuturePosition {
		t.Errorf("dead letters %q, want the forged copy at offset 3 alone", got)
	}
}
