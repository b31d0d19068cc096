package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walhouse/walhouse/harness/testenv"
	"github.com/walhouse/walhouse/record"
)

// sinkTable is a captured table of the sink fault tests: two tenants, a
// composite key and a few value columns, with the queries that compare it.
// reading, an unconstrained numeric (Decimal(76, 38) in ClickHouse), is
// left NULL by the workload; tests set it.
type sinkTable struct {
	name    string // table name, the same in PostgreSQL (public) and ClickHouse
	quoted  string // PostgreSQL identifier
	topic   string // the topic capture writes its changes to
	pgQuery string // PostgreSQL rows in key order, every value as text
	chQuery string // the same rows from ClickHouse FINAL
}

func (p *pipeline) newSinkTable() sinkTable {
	p.t.Helper()
	name, qt := p.table("items", `(
		tenant_id  text NOT NULL,
		id         bigint NOT NULL,
		amount     numeric(12,2),
		status     text,
		qty        integer,
		note       text,
		reading    numeric,
		updated_at timestamptz NOT NULL,
		PRIMARY KEY (tenant_id, id))`)
	return sinkTable{
		name:   name,
		quoted: qt,
		topic:  p.prefix + ".public." + name,
		pgQuery: fmt.Sprintf(`SELECT tenant_id, id::text, coalesce(trim_scale(amount)::text, '<null>'), coalesce(status, '<null>'),
			coalesce(qty::text, '<null>'), coalesce(note, '<null>'), coalesce(trim_scale(reading)::text, '<null>'), to_char(updated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US')
			FROM %s AS t ORDER BY t.tenant_id, t.id`, qt),
		chQuery: fmt.Sprintf("SELECT tenant_id, toString(id), ifNull(toString(amount), '<null>'), ifNull(status, '<null>'),"+
			" ifNull(toString(qty), '<null>'), ifNull(note, '<null>'), ifNull(toString(reading), '<null>'), formatDateTime(updated_at, '%%Y-%%m-%%d %%H:%%i:%%S.%%f')"+
			" FROM `%s`.`%s` FINAL WHERE _is_deleted = 0 ORDER BY tenant_id, id", p.database, name),
	}
}

// capturedSinkTable starts the usual set-up of the sink tests: a pipeline
// with one sink table (newSinkTable) that capture streams. The sink is the
// test's to start.
func capturedSinkTable(t *testing.T) (p *pipeline, tb sinkTable, capture *testenv.Proc) {
	t.Helper()
	p = newPipeline(t)
	tb = p.newSinkTable()
	return p, tb, p.startCapture(tb.name)
}

// change writes round r of the workload: 40 new rows per tenant, a new
// version of every row whose id is a multiple of 3 (the new ones included)
// and one delete. It returns how many row changes capture will produce.
func (p *pipeline) change(tb sinkTable, r int) int64 {
	p.t.Helper()
	base := r * 1000
	n := p.execCount(fmt.Sprintf(`INSERT INTO %s (tenant_id, id, amount, status, qty, note, updated_at)
		SELECT tenant, $1 + g, g * 1.25, (g %% 5)::text, g, CASE WHEN g %% 4 = 0 THEN NULL ELSE 'row ' || g END,
		       '2026-01-01 00:00:00+00'::timestamptz + ($1 + g) * interval '1 minute'
		FROM generate_series(1, 40) g, (VALUES ('acme'), ('globex')) AS t(tenant)`, tb.quoted), base)
	n += p.execCount(fmt.Sprintf(`UPDATE %s SET amount = amount + 1, qty = qty + 1, status = status || '+' ,
		updated_at = updated_at + interval '1 second' WHERE id %% 3 = 0`, tb.quoted))
	n += p.execCount(fmt.Sprintf(`DELETE FROM %s WHERE id = $1`, tb.quoted), base+7)
	return n
}

func (p *pipeline) execCount(sql string, args ...any) int64 {
	p.t.Helper()
	tag, err := p.pg.Exec(context.Background(), sql, args...)
	if err != nil {
		p.t.Fatalf("%s: %v", sql, err)
	}
	return tag.RowsAffected()
}

// chInt runs a ClickHouse query that returns one integer.
func (p *pipeline) chInt(q string) int64 {
	p.t.Helper()
	var n int64
	if err := p.ch.QueryRow(context.Background(), "SELECT toInt64(("+q+"))").Scan(&n); err != nil {
		p.t.Fatalf("%s: %v", q, err)
	}
	return n
}

// rawCount is the table's row count without FINAL: every row inserted and
// not merged away.
func (p *pipeline) rawCount(tb sinkTable) int64 {
	p.t.Helper()
	return p.chInt(fmt.Sprintf("SELECT count() FROM `%s`.`%s`", p.database, tb.name))
}

// noRowTwice fails the test if a row version was inserted into tb's
// ClickHouse table more than once: without FINAL, count() -
// uniqExact(key, _version) must be 0.
func (p *pipeline) noRowTwice(tb sinkTable) {
	p.t.Helper()
	d := p.chInt(fmt.Sprintf("SELECT count() - uniqExact(tuple(tenant_id, id, _version)) FROM `%s`.`%s`", p.database, tb.name))
	if d != 0 {
		p.t.Errorf("%d rows were inserted twice (count() - uniqExact(key, _version) without FINAL)", d)
	}
}

func (p *pipeline) chExec(q string, settings ch.Settings) {
	p.t.Helper()
	if err := p.ch.Exec(ch.Context(context.Background(), ch.WithSettings(settings)), q); err != nil {
		p.t.Fatalf("%s: %v", q, err)
	}
}

// kafka returns a client for the local broker, closed when the test ends.
func (p *pipeline) kafka(opts ...kgo.Opt) *kgo.Client {
	p.t.Helper()
	cl := p.shortKafka(opts...)
	p.t.Cleanup(cl.Close)
	return cl
}

// shortKafka returns a client for the local broker that the caller closes:
// for helpers called many times in one test.
func (p *pipeline) shortKafka(opts ...kgo.Opt) *kgo.Client {
	p.t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(strings.Split(p.env.Kafka, ",")...)}, opts...)...)
	if err != nil {
		p.t.Fatalf("kafka client: %v", err)
	}
	return cl
}

// topicRecords reads topic from its start to the end it has now.
func (p *pipeline) topicRecords(ctx context.Context, topic string) ([]*kgo.Record, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(p.env.Kafka, ",")...),
		kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err != nil {
		return nil, err
	}
	if err := ends.Error(); err != nil {
		return nil, err
	}
	next := map[int32]int64{}
	done := func() bool {
		for _, o := range ends[topic] {
			if next[o.Partition] < o.Offset {
				return false
			}
		}
		return true
	}
	var out []*kgo.Record
	for !done() {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if err := fs.Err0(); err != nil {
			return nil, err
		}
		for _, r := range fs.Records() {
			if r.Offset < ends[topic][r.Partition].Offset {
				out = append(out, r)
			}
			next[r.Partition] = r.Offset + 1
		}
	}
	return out, nil
}

// topicRows reads topic from its start to the end it has now and returns
// its row changes, decoded as the sink decodes them.
func (p *pipeline) topicRows(topic string) []*record.Record {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rs, err := p.topicRecords(ctx, topic)
	if err != nil {
		p.t.Fatalf("read %s: %v", topic, err)
	}
	var out []*record.Record
	for _, kr := range changes(rs) {
		rows, err := p.decode(kr)
		if err != nil {
			p.t.Fatalf("decode %s/%d@%d: %v", kr.Topic, kr.Partition, kr.Offset, err)
		}
		out = append(out, rows...)
	}
	return out
}

// changes returns the row changes among rs, leaving out heartbeats (which
// have no value).
func changes(rs []*kgo.Record) []*kgo.Record {
	var out []*kgo.Record
	for _, r := range rs {
		if r.Value != nil {
			out = append(out, r)
		}
	}
	return out
}

// rowsOf returns the row changes in rs: a row batch holds many.
func rowsOf(rs []*kgo.Record) int {
	n := 0
	for _, r := range rs {
		rows := 1
		for _, h := range r.Headers {
			if h.Key == record.HeaderRows {
				rows = record.RowsOf(string(h.Value))
			}
		}
		n += rows
	}
	return n
}

// waitProduced waits until topic holds at least n row changes.
func (p *pipeline) waitProduced(topic string, n int64) {
	p.t.Helper()
	err := testenv.Eventually(context.Background(), 60*time.Second, func(ctx context.Context) error {
		rs, err := p.topicRecords(ctx, topic)
		if err != nil {
			return err
		}
		if got := rowsOf(changes(rs)); int64(got) < n {
			return fmt.Errorf("%s holds %d of %d changes", topic, got, n)
		}
		return nil
	})
	if err != nil {
		p.t.Fatal(err)
	}
}

// reproduce produces copies of rs to their own topic and partition, as a
// producer retry or a replayed range would.
func (p *pipeline) reproduce(rs []*kgo.Record) {
	p.t.Helper()
	cl := p.kafka(kgo.RecordPartitioner(kgo.ManualPartitioner()))
	copies := make([]*kgo.Record, len(rs))
	for i, r := range rs {
		copies[i] = &kgo.Record{Topic: r.Topic, Partition: r.Partition, Key: r.Key, Value: r.Value, Headers: r.Headers}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, copies...).FirstErr(); err != nil {
		p.t.Fatalf("produce %d copies: %v", len(copies), err)
	}
}

// scrape returns the value of one series (as written in the exposition
// format, e.g. `walhouse_sink_dedup_hits_total{layer="layer2"}`) from the
// /metrics of addr; a series not exposed yet is 0.
func scrape(ctx context.Context, addr, series string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, sc.Err()
}

// metric waits until the metrics endpoint answers and returns series.
func metric(t *testing.T, addr, series string) float64 {
	t.Helper()
	var v float64
	err := testenv.Eventually(context.Background(), 20*time.Second, func(ctx context.Context) error {
		var err error
		v, err = scrape(ctx, addr, series)
		return err
	})
	if err != nil {
		t.Fatalf("scrape %s from %s: %v", series, addr, err)
	}
	return v
}

// waitMetric waits until series reaches at least want and returns it.
func waitMetric(t *testing.T, addr, series string, want float64, procs ...*testenv.Proc) float64 {
	t.Helper()
	var v float64
	err := testenv.Eventually(context.Background(), 60*time.Second, func(ctx context.Context) error {
		if err := exited(procs...); err != nil {
			return err
		}
		var err error
		if v, err = scrape(ctx, addr, series); err != nil {
			return err
		}
		if v < want {
			return fmt.Errorf("%s is %v, want at least %v", series, v, want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// deadLetter is one line of `walhouse dlq list`.
type deadLetter struct {
	Origin     string          `json:"origin"`
	Reason     string          `json:"reason"`
	Topic      string          `json:"topic"`
	Partition  int32           `json:"partition"`
	Offset     int64           `json:"offset"`
	Error      string          `json:"error"`
	Table      string          `json:"table"`
	PrimaryKey json.RawMessage `json:"primaryKey"`
	CommitLSN  string          `json:"commitLsn"`
	Key        string          `json:"key"`
	Value      json.RawMessage `json:"value"`
}

// walhouse runs a short walhouse command and returns its standard output.
func walhouse(ctx context.Context, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, walhouseBin, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("walhouse %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return out, nil
}

// deadLetters lists topic with `walhouse dlq list`.
func (p *pipeline) deadLetters(ctx context.Context, topic string) ([]deadLetter, error) {
	out, err := walhouse(ctx, "dlq", "list", "--kafka", p.env.Kafka, "--dlq-topic", topic)
	if err != nil {
		return nil, err
	}
	var ls []deadLetter
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var l deadLetter
		if err := dec.Decode(&l); errors.Is(err, io.EOF) {
			return ls, nil
		} else if err != nil {
			return nil, fmt.Errorf("parse dlq list output: %w\n%s", err, out)
		}
		ls = append(ls, l)
	}
}

// waitDeadLetters waits until topic holds n dead letters and returns them.
func (p *pipeline) waitDeadLetters(topic string, n int, procs ...*testenv.Proc) []deadLetter {
	p.t.Helper()
	var ls []deadLetter
	err := testenv.Eventually(context.Background(), 60*time.Second, func(ctx context.Context) error {
		if err := exited(procs...); err != nil {
			return err
		}
		var err error
		if ls, err = p.deadLetters(ctx, topic); err != nil {
			return err
		}
		if len(ls) < n {
			return fmt.Errorf("%s holds %d dead letters, want %d", topic, len(ls), n)
		}
		return nil
	})
	if err != nil {
		p.t.Fatal(err)
	}
	if len(ls) != n {
		p.t.Fatalf("%s holds %d dead letters, want %d: %+v", topic, len(ls), n, ls)
	}
	return ls
}

// tamper returns a copy of r, a row change, with column set to value and
// everything else, the eventId included, unchanged: a broken eventId
// contract.
func (p *pipeline) tamper(r *kgo.Record, column, value string) *kgo.Record {
	t := p.t
	t.Helper()
	rows, err := p.decode(r)
	if err != nil {
		t.Fatalf("decode %s/%d@%d: %v", r.Topic, r.Partition, r.Offset, err)
	}
	if len(rows) != 1 {
		t.Fatalf("%s/%d@%d is a row batch; tamper takes a single change", r.Topic, r.Partition, r.Offset)
	}
	rec := rows[0]
	found := false
	for i, c := range rec.Columns {
		if c.Name == column {
			rec.Values[i] = record.Value{Text: value}
			found = true
		}
	}
	if !found {
		t.Fatalf("record %s has no column %s", rec.EventID, column)
	}
	return &kgo.Record{Topic: r.Topic, Partition: r.Partition, Key: r.Key, Value: record.AppendJSON(nil, rec)}
}

// services runs deploy/local/services.sh.
func services(t *testing.T, args ...string) {
	t.Helper()
	script := filepath.Join("..", "..", "deploy", "local", "services.sh")
	if out, err := exec.Command(script, args...).CombinedOutput(); err != nil {
		t.Fatalf("services.sh %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// stopService stops a local service for a fault test and makes sure it
// runs again when the test ends, whatever happens in between.
func stopService(t *testing.T, name string) {
	t.Helper()
	testenv.RequireLocal(t, "it stops and starts "+name+" with deploy/local/services.sh")
	t.Cleanup(func() { services(t, "start", name) })
	services(t, "stop", name)
}
