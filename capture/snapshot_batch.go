package capture

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/semaphore"

	"github.com/walhouse/walhouse/record"
)

// A snapshot row sent as a Kafka record of its own costs more in its
// envelope (eventId, times, source, positions: the same for every row of a
// snapshot but the eventId, which the sink can derive) and in Kafka's
// per-record work, in walhouse and in the broker, than in its values. So
// snapshot rows travel in row batches (see package record, "Row batches"):
// one record per partition holds up to maxRows rows, the rows of a chunk
// that the partitioner would place there, so each row still precedes its
// later changes in its partition.

const (
	// batchBytes bounds a batch: far below Kafka's default message limit
	// (1 MiB), large enough that the per-record cost vanishes. A row that
	// would take a batch past it starts the next one, so only a batch of
	// one large row is larger.
	batchBytes = 128 << 10
	// maxBatchesInFlight bounds the bytes of one chunk reader's batches that
	// Kafka has not acknowledged yet (16 MiB, as for single records); a
	// reader at the bound waits.
	maxBatchesInFlight = 16 << 20
	// keptBatchBuffers is how many acknowledged buffers a reader keeps for
	// reuse.
	keptBatchBuffers = 32
)

// batchProducer produces one chunk's rows in row batches, one open batch
// per partition, and waits for their acknowledgements. add is called from
// one goroutine; acknowledgements arrive on the Kafka client's.
type batchProducer struct {
	producer   Producer
	ctx        context.Context // the read's: cancelling it stops a wait for room
	produceCtx context.Context // outlives a cancelled read: the chunk waits for its acks
	topic      string
	maxRows    int
	maxRecord  int         // the record bound (WithMaxRecordBytes)
	open       []openBatch // by partition
	inFlight   *semaphore.Weighted
	wg         sync.WaitGroup // batches produced, not yet acknowledged

	mu      sync.Mutex
	free    []*batchBuf // acknowledged buffers for reuse
	failure firstError  // of the produces
}

// openBatch is a partition's batch being filled.
type openBatch struct {
	buf   *batchBuf
	batch record.RowBatch
}

// batchBuf is the memory of one batch record, reused once Kafka
// acknowledged it.
type batchBuf struct {
	data   []byte
	rec    kgo.Record
	header [1]kgo.RecordHeader
	count  [20]byte // the HeaderRows value
	at     time.Time
	weight int64 // what it holds of inFlight
	owner  *batchProducer
	ack    func(*kgo.Record, error) // bound once per buffer, not per record
}

func newBatchProducer(ctx context.Context, p Producer, topic string, partitions, maxRows, maxRecord int) *batchProducer {
	return &batchProducer{
		producer: p, ctx: ctx, produceCtx: context.WithoutCancel(ctx),
		topic: topic, maxRows: maxRows, maxRecord: maxRecord,
		open:     make([]openBatch, partitions),
		inFlight: semaphore.NewWeighted(maxBatchesInFlight),
	}
}

// add adds a row of enc's relation to partition part's batch; shared gives
// the fields every row of a batch shares (see record.Encoder.StartBatch).
// A full batch is produced; add fails when the read's context ends while
// it waits for room, and with ErrRowTooLarge for a row whose batch of its
// own would exceed the record bound; that row is left out and the
// producer stays usable.
func (p *batchProducer) add(enc *record.Encoder, part int, shared *record.Record, vals []record.Value) error {
	o := &p.open[part]
	if o.buf != nil && o.batch.Size()+rowSize(vals) > batchBytes {
		// A large row starts a batch of its own instead of making this one
		// larger than Kafka may accept where the row alone would fit.
		if err := p.send(part); err != nil {
			return err
		}
	}
	if o.buf == nil {
		o.buf = p.buffer()
		o.buf.at = time.Now().UTC()
		shared.IngestedAt = o.buf.at
		enc.StartBatch(&o.batch, o.buf.data[:0], shared)
	}
	if textBytes(vals) > p.maxRecord/exactSizeAbove {
		// Sized before it is written: a row over the bound is never
		// encoded, one under it grows the batch's memory once.
		exact := record.RowSize(vals)
		if o.batch.Rows() > 0 {
			exact++ // the separator
		}
		if err := checkRecordSize(o.batch.Size()+exact+2, p.maxRecord); err != nil { // Finish adds "]}"
			if o.batch.Rows() == 0 {
				p.reuse(o.buf)
				p.open[part] = openBatch{}
			}
			return err // the batch before it stays open: the row was not added
		}
		o.batch.Grow(exact + 2)
	}
	enc.AddRow(&o.batch, vals)
	if err := checkRecordSize(o.batch.Size()+2, p.maxRecord); err != nil { // Finish adds "]}"
		// The row is alone in its batch: one larger than batchBytes
		// starts its own, and one whose estimate is below it encodes to
		// at most six times that (JSON escapes), so with the batch before
		// it stays under the smallest bound (1 MiB).
		rows := o.batch.Rows()
		p.reuse(o.buf)
		p.open[part] = openBatch{}
		if rows > 1 {
			// Not ErrRowTooLarge: the other rows are lost with it, so
			// capture must stop rather than skip them.
			return fmt.Errorf("a snapshot row batch of %d rows outgrew the record bound (a walhouse bug, please report it): %v", rows, err)
		}
		return err
	}
	if o.batch.Rows() >= p.maxRows || o.batch.Size() >= batchBytes {
		return p.send(part)
	}
	return nil
}

// rowSize estimates the bytes a row adds to a batch (its values, quoted,
// with separators; escapes make it more).
func rowSize(vals []record.Value) int {
	n := 2
	for _, v := range vals {
		n += len(v.Text) + 5
	}
	return n
}

// send produces partition part's open batch.
func (p *batchProducer) send(part int) error {
	o := &p.open[part]
	b := o.buf
	rows := o.batch.Rows()
	b.data = o.batch.Finish()
	o.buf = nil
	b.weight = min(int64(len(b.data)), maxBatchesInFlight)
	if err := p.inFlight.Acquire(p.ctx, b.weight); err != nil {
		p.reuse(b)
		return err
	}
	b.header[0] = kgo.RecordHeader{Key: record.HeaderRows, Value: strconv.AppendInt(b.count[:0], int64(rows), 10)}
	b.rec = kgo.Record{Topic: p.topic, Partition: int32(part), Value: b.data, Headers: b.header[:], Timestamp: b.at}
	p.wg.Add(1)
	p.producer.Produce(p.produceCtx, &b.rec, b.ack)
	return nil
}

// buffer returns an acknowledged buffer or a new one.
func (p *batchProducer) buffer() *batchBuf {
	p.mu.Lock()
	defer p.mu.Unlock()
	if n := len(p.free); n > 0 {
		b := p.free[n-1]
		p.free = p.free[:n-1]
		return b
	}
	b := &batchBuf{data: make([]byte, 0, batchBytes+batchBytes/4), owner: p}
	b.ack = b.done
	return b
}

// done is the promise of b's record.
func (b *batchBuf) done(_ *kgo.Record, err error) {
	p := b.owner
	p.failure.keep(err)
	p.inFlight.Release(b.weight)
	p.reuse(b)
	p.wg.Done()
}

// reuse keeps b for a later batch, unless enough are kept or a huge row
// made it large. Kafka's client no longer reads a record once its promise
// has returned.
func (p *batchProducer) reuse(b *batchBuf) {
	b.rec = kgo.Record{}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.free) < keptBatchBuffers && cap(b.data) <= 2*batchBytes {
		p.free = append(p.free, b)
	}
}

// wait produces the open batches (all of them, or with abandon none) and
// returns once every produced batch was acknowledged, with the first
// produce error.
func (p *batchProducer) wait(abandon bool) error {
	var err error
	for part := range p.open {
		if p.open[part].buf == nil {
			continue
		}
		if abandon || err != nil {
			p.open[part] = openBatch{}
			continue
		}
		err = p.send(part)
	}
	p.wg.Wait()
	if failure := p.failure.get(); failure != nil {
		return failure
	}
	return err
}
