package capture

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walhouse/walhouse/record"
)

// A change that PostgreSQL accepted but that cannot become a record (a NULL
// tenant, a record over the size bound, anything record.ValidateRow
// rejects) must never stop capture: a stopped capture pins WAL on the
// primary until its disk fills, and every restart would reach the same
// change again. Such a change goes to the dead-letter topic, which the sink
// also writes, with the reason, its table, primary key and commit LSN; the
// slot moves past it once Kafka acknowledged the dead letter, like any
// record of its transaction.

// BadRowPolicy says what capture does with a change that cannot become a
// record.
type BadRowPolicy uint8

const (
	// DeadLetterBadRows sends the change to the dead-letter topic and goes
	// on (the default).
	DeadLetterBadRows BadRowPolicy = iota
	// StopOnBadRow stops capture with an error naming the change, for
	// pipelines that prefer a stall to a gap.
	StopOnBadRow
)

// badRowPolicyNames are the flag forms of the policies, by value.
var badRowPolicyNames = [...]string{DeadLetterBadRows: "dead-letter", StopOnBadRow: "stop"}

// String returns the flag form: "dead-letter" or "stop".
func (p BadRowPolicy) String() string {
	if int(p) < len(badRowPolicyNames) {
		return badRowPolicyNames[p]
	}
	return "BadRowPolicy(" + strconv.Itoa(int(p)) + ")"
}

// ParseBadRowPolicy parses the flag form of a BadRowPolicy.
func ParseBadRowPolicy(s string) (BadRowPolicy, error) {
	if i := slices.Index(badRowPolicyNames[:], s); i >= 0 {
		return BadRowPolicy(i), nil
	}
	return 0, fmt.Errorf("bad-row policy %q: want dead-letter or stop", s)
}

// badRow is a change that cannot become a record, with why.
type badRow struct {
	table  string // schema.table
	topic  string // the table's topic: where a replay sends the record
	commit record.LSN
	// rec is the change as far as it could be built (nil when not even
	// that); it travels as the dead letter's value, a self-contained
	// version 1 record, unless it is over the size bound.
	rec    *record.Record
	key    string // primary key, JSON
	reason string // record.Reason*
	err    error
}

// deadLetters builds capture's dead letters, counts them and logs them at
// most once per table and reason a minute (a flood of bad rows must not
// flood the log).
type deadLetters struct {
	topic   string
	counter *quietCounter // by table and reason
	log     *slog.Logger

	mu    sync.Mutex
	total int64
}

func newDeadLetters(topic string, log *slog.Logger) *deadLetters {
	return &deadLetters{
		topic: topic,
		counter: newQuietCounter(prometheus.CounterOpts{
			Name: "walhouse_capture_dead_letters_total",
			Help: "Changes capture could not turn into records and sent to the dead-letter topic, by table and reason.",
		}, "table"),
		log: log,
	}
}

// record returns the Kafka record of a dead letter: the change as far as
// it was built, as a version 1 record, unless it is over maxValue (then
// without it, record.DeadLetter.WithoutValue's policy: the headers still
// say which row it was).
func (d *deadLetters) record(b badRow, maxValue int) *kgo.Record {
	l := record.DeadLetter{Topic: b.topic, Partition: -1, Offset: -1, Err: b.err, FirstSeen: time.Now().UTC(), Attempts: 1,
		Origin: "capture", Reason: b.reason, CommitLSN: b.commit, Table: b.table, PrimaryKey: b.key}
	if b.rec != nil {
		l.Key = b.rec.AppendPartitionKey(nil)
		// The size is checked before encoding: a value of control
		// characters escapes to six times its size.
		if size := record.JSONSize(b.rec, 1); b.reason == record.ReasonTooLarge || maxValue > 0 && size > maxValue {
			l.ValueDropped = size
		} else {
			l.Value = record.AppendJSONVersion(nil, b.rec, 1)
		}
	}
	kr := &kgo.Record{Topic: d.topic, Key: l.Key, Value: l.Value}
	for _, h := range l.Headers() {
		kr.Headers = append(kr.Headers, kgo.RecordHeader{Key: h.Key, Value: []byte(h.Value)})
	}
	return kr
}

// noted counts a dead letter Kafka acknowledged and logs it unless the
// table and reason were logged less than a minute ago. The log names the
// table, reason and position, never the row's values (personal data).
func (d *deadLetters) noted(b badRow) {
	ok, more := d.counter.note(b.table, b.reason)
	d.mu.Lock()
	d.total++
	d.mu.Unlock()
	if !ok {
		return
	}
	// The record's identity as far as it was built, with the table and
	// commit position the change came with where the record lacks them.
	attrs := b.rec.LogAttrs()
	if b.rec == nil || b.rec.Source.Table == "" {
		attrs = append(attrs, record.LogTable, b.table)
	}
	if b.rec == nil || b.rec.CommitLSN == 0 {
		attrs = append(attrs, record.LogCommitLSN, b.commit.String())
	}
	d.log.Error("a change could not be captured and went to the dead-letter topic; the stream goes on (walhouse dlq list shows it)",
		append(attrs, "reason", b.reason, "dlq_topic", d.topic, "err", b.err, "more_since_last_log", more)...)
}

// count returns the dead letters acknowledged since start.
func (d *deadLetters) count() int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.total
}

// primaryKeyJSON writes the key columns of vals as a JSON object of column
// name to text (null where a value is missing).
func primaryKeyJSON(cols []record.Column, keyIdx []int, vals []record.Value) string {
	m := make(map[string]*string, len(keyIdx))
	for _, i := range keyIdx {
		if i >= len(cols) {
			continue
		}
		var v *string
		if i < len(vals) && !vals[i].Null && !vals[i].Unchanged {
			t := vals[i].Text
			v = &t
		}
		m[cols[i].Name] = v
	}
	b, _ := json.Marshal(m) // strings and nulls only: cannot fail
	return string(b)
}

// stopOnBadRow is the error of a bad row under StopOnBadRow.
func stopOnBadRow(b badRow) error {
	return fmt.Errorf("table %s: the change committed at %s cannot be captured (%s): %w; capture stops because it runs with --on-bad-row stop: run it with --on-bad-row dead-letter to set such changes aside in the dead-letter topic and go on",
		b.table, b.commit, b.reason, b.err)
}

// chunkDeadLetters sends the dead letters of one snapshot chunk without
// waiting for each: a table with many bad rows must not copy at one Kafka
// round trip a row. wait returns once Kafka acknowledged all of them; a
// chunk completes only after that, like its rows.
type chunkDeadLetters struct {
	c   *Capturer
	wg  sync.WaitGroup
	mu  sync.Mutex
	err error
}

// send produces b's dead letter, or fails under StopOnBadRow.
func (d *chunkDeadLetters) send(ctx context.Context, b badRow) error {
	c := d.c
	if c.cfg.onBadRow == StopOnBadRow {
		return stopOnBadRow(b)
	}
	kr := c.dlq.record(b, c.cfg.maxDeadLetterValue())
	b.rec = nil // aliases the row buffer; the record above holds a copy
	d.wg.Add(1)
	c.producer.Produce(ctx, kr, func(_ *kgo.Record, err error) {
		defer d.wg.Done()
		if err != nil {
			d.mu.Lock()
			if d.err == nil {
				d.err = fmt.Errorf("produce a dead letter of %s to %s: %w", b.table, c.dlq.topic, err)
			}
			d.mu.Unlock()
			return
		}
		c.dlq.noted(b)
	})
	return nil
}

// wait returns once every dead letter sent is acknowledged, with the first
// failure.
func (d *chunkDeadLetters) wait() error {
	d.wg.Wait()
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.err
}

// badRow sends a change of the transaction in progress to the dead letters.
// The dead letter belongs to the transaction: the slot moves past the
// change only once Kafka acknowledged it.
func (s *stream) badRow(b badRow) error {
	if s.c.cfg.onBadRow == StopOnBadRow {
		return stopOnBadRow(b)
	}
	kr := s.c.dlq.record(b, s.c.cfg.maxDeadLetterValue())
	b.rec = nil // aliases the WAL buffer; the record above holds a copy
	size := len(kr.Key) + len(kr.Value) + 512
	tx := s.tx
	if err := s.acks.add(tx, size, s.c.cfg.maxPendingBytes); err != nil {
		return fmt.Errorf("kafka did not accept a record: %w", err)
	}
	dlq := s.c.dlq
	s.c.producer.Produce(s.produceCtx, kr, func(_ *kgo.Record, err error) {
		if err == nil {
			dlq.noted(b)
		}
		s.acks.ack(tx, size, err)
	})
	return nil
}

// quietCounter counts events by a place (a table, a message prefix) and a
// reason, every one of them, and lets a log line about them through at most
// once per period and pair, counting the lines it held back: a flood of bad
// rows or forged messages must not flood the log. It is the Prometheus
// counter vector it embeds.
type quietCounter struct {
	*prometheus.CounterVec
	every time.Duration

	mu   sync.Mutex
	last map[string]time.Time
	held map[string]int
}

// newQuietCounter returns a counter labelled place and "reason" that lets
// a line through once a minute per pair.
func newQuietCounter(opts prometheus.CounterOpts, place string) *quietCounter {
	return &quietCounter{CounterVec: prometheus.NewCounterVec(opts, []string{place, "reason"}), every: time.Minute}
}

// note counts one event and reports whether it may be logged now and, if
// so, how many were held back since the last line for place and reason.
func (q *quietCounter) note(place, reason string) (ok bool, held int) {
	q.WithLabelValues(place, reason).Inc()
	return q.allow(place + "\x00" + reason)
}

// allow reports whether a line for key may be logged now and, if so, how
// many were held back since the last one.
func (q *quietCounter) allow(key string) (ok bool, held int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if last, seen := q.last[key]; seen && time.Since(last) < q.every {
		q.held[key]++
		return false, 0
	}
	if q.last == nil {
		q.last, q.held = map[string]time.Time{}, map[string]int{}
	}
	q.last[key] = time.Now()
	held = q.held[key]
	delete(q.held, key)
	return true, held
}
