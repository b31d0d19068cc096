package capture

import (
	"context"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walhouse/walhouse/record"
)

// A snapshot produces millions of records whose memory is needed only until
// Kafka acknowledges them. Instead of allocating a key, a value and a
// kgo.Record per row (and leaving them to the garbage collector), a chunk
// reader encodes rows into slabs: blocks of bytes and records that are
// reused once every record in them has been acknowledged.

const (
	slabBytes   = 256 << 10 // encoded keys and values per slab
	slabRecords = 256       // records per slab; rows of about 1 KB fill both together
	// maxSlabs bounds one chunk reader's slabs, hence the bytes it has in
	// flight (16 MiB): enough to keep the broker busy (a produce request
	// carries at most 1 MiB per partition), little enough that a few
	// workers stay well inside the memory budget. A reader that has them
	// all in flight waits for an acknowledgement.
	maxSlabs = 64
)

// slab is a block of encoded records. pending counts its records not yet
// acknowledged, plus one while the reader is still filling it; the slab is
// reused when it drops to zero.
type slab struct {
	buf     []byte
	recs    []kgo.Record
	n       int // records handed out
	pending atomic.Int32
	owner   *slabProducer
	ack     func(*kgo.Record, error) // bound once per slab, not per record
}

// slabProducer produces one chunk's records from slabs and waits for their
// acknowledgements. produce is called from one goroutine; acknowledgements
// arrive on the Kafka client's.
type slabProducer struct {
	producer   Producer
	ctx        context.Context // the read's: cancelling it stops a wait for a free slab
	produceCtx context.Context // outlives a cancelled read: the chunk waits for its acks
	maxRecord  int             // the record bound (WithMaxRecordBytes)
	cur        *slab
	last       int // size of the last encoded record
	made       int // slabs allocated so far, at most maxSlabs
	// free holds acknowledged slabs; its capacity is maxSlabs, so
	// returning one never blocks.
	free    chan *slab
	wg      sync.WaitGroup // records produced, not yet acknowledged
	failure firstError     // of the produces
}

func newSlabProducer(ctx context.Context, p Producer, maxRecord int) *slabProducer {
	return &slabProducer{producer: p, ctx: ctx, produceCtx: context.WithoutCancel(ctx), maxRecord: maxRecord, free: make(chan *slab, maxSlabs)}
}

// produce encodes r with enc into the current slab and produces it to
// topic; the memory is reused once Kafka acknowledged it. It fails when
// the read's context ends while it waits for a free slab, and with
// ErrRowTooLarge for a record over the record bound, which is not
// produced.
func (p *slabProducer) produce(enc *record.Encoder, topic string, r *record.Record) error {
	exact, err := preflight(enc, r, p.maxRecord)
	if err != nil {
		return err // before a slab is taken or anything encoded
	}
	s := p.cur
	if s != nil && cap(s.buf)-len(s.buf) < 2*p.last {
		p.retire(s) // full: the next record would probably not fit
		s = nil
	}
	if s == nil {
		var err error
		if s, err = p.slab(); err != nil {
			return err
		}
	}
	start := len(s.buf)
	// Appending to an empty slice at the slab's end: a record that does not
	// fit after all is copied to memory of its own, not the whole slab.
	free := s.buf[start:start]
	dst := free
	if exact > cap(free) {
		dst = make([]byte, 0, exact) // sized once
	}
	out, key, value := enc.AppendKeyValue(dst, r)
	if err := checkRecordSize(len(key)+len(value), p.maxRecord); err != nil {
		p.cur = s // nothing of the slab was used
		return err
	}
	fits := unsafe.SliceData(out) == unsafe.SliceData(free)
	if fits {
		s.buf = s.buf[:start+len(out)]
	}
	p.last = max(len(out), 256)
	rec := &s.recs[s.n]
	s.n++
	*rec = kgo.Record{Topic: topic, Key: key, Value: value, Timestamp: r.IngestedAt}
	s.pending.Add(1)
	p.wg.Add(1)
	p.producer.Produce(p.produceCtx, rec, s.ack)
	if !fits || s.n == len(s.recs) {
		p.retire(s)
		s = nil
	}
	p.cur = s
	return nil
}

// slab returns an acknowledged slab, a new one while fewer than maxSlabs
// exist, or else waits for one; the slab is marked as being filled.
func (p *slabProducer) slab() (*slab, error) {
	var s *slab
	select {
	case s = <-p.free:
	default:
		if p.made < maxSlabs {
			p.made++
			s = &slab{buf: make([]byte, 0, slabBytes), recs: make([]kgo.Record, slabRecords), owner: p}
			s.ack = s.done
			break
		}
		select {
		case s = <-p.free:
		case <-p.ctx.Done():
			return nil, p.ctx.Err()
		}
	}
	s.pending.Store(1)
	return s, nil
}

// retire ends filling s: it is reused once its records are acknowledged.
func (p *slabProducer) retire(s *slab) {
	if s.pending.Add(-1) == 0 {
		p.reuse(s)
	}
}

// done is the promise of every record of s.
func (s *slab) done(_ *kgo.Record, err error) {
	p := s.owner
	p.failure.keep(err)
	if s.pending.Add(-1) == 0 {
		p.reuse(s)
	}
	p.wg.Done()
}

// reuse puts an acknowledged slab on the free list. Kafka's client no
// longer reads a record once its promise has returned.
func (p *slabProducer) reuse(s *slab) {
	clear(s.recs[:s.n]) // drop references to keys, values and contexts
	s.buf, s.n = s.buf[:0], 0
	p.free <- s
}

// wait retires the current slab and returns once every produced record was
// acknowledged, with the first produce error.
func (p *slabProducer) wait() error {
	if p.cur != nil {
		p.retire(p.cur)
		p.cur = nil
	}
	p.wg.Wait()
	return p.failure.get()
}

// firstError keeps the first error of the promises Kafka's client calls,
// each on a goroutine of its own.
type firstError struct {
	mu  sync.Mutex
	err error
}

// keep records err unless it is nil or an error came before it.
func (f *firstError) keep(err error) {
	if err == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err == nil {
		f.err = err
	}
}

// get returns the first error kept, or nil.
func (f *firstError) get() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}
