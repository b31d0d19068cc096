package sink

import (
	"context"
	"errors"
	"sort"

	"golang.org/x/sync/errgroup"
)

// maxInsertParallelism bounds Config.InsertParallelism: more partitions
// loading at once than a ClickHouse server has insert threads only queue.
const maxInsertParallelism = 64

// loadChunks loads the units of one flush and returns the chunks whose
// offsets may be committed: every chunk loaded whole, and the loaded start
// of a chunk whose table stopped. The units load in lanes: a partition's
// (or, with CombinePartitions, a topic's), one unit after another, so each
// partition's chunks load in offset order; up to InsertParallelism lanes
// load at the same time, so one lane's decoding and Layer 2 round trips
// overlap another's insert, and a ClickHouse server runs their inserts in
// parallel. Each unit keeps its own batches and insert tokens, so a flush
// repeated after a crash inserts exactly the same batches, whichever
// finished first. The first error other than a TableError ends the flush
// (nothing is committed; the lanes loading meanwhile finish their current
// insert or stop at ctx).
func (s *Sink) loadChunks(ctx context.Context, units []unit) ([]chunk, error) {
	var lanes [][]unit // units by lane, in the order of units
	index := map[tp]int{}
	for _, u := range units {
		k := u[0].key()
		if s.cfg.CombinePartitions {
			k.partition = -1
		}
		i, ok := index[k]
		if !ok {
			i = len(lanes)
			index[k] = i
			lanes = append(lanes, nil)
		}
		lanes[i] = append(lanes[i], u)
	}
	results := make([]laneLoad, len(lanes))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(s.cfg.InsertParallelism)
	for i, us := range lanes {
		g.Go(func() error {
			if gctx.Err() != nil {
				return nil // another lane failed: the flush ends, as one after another
			}
			results[i] = s.loadLane(gctx, us)
			return results[i].err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err // stopping: lanes may have been skipped
	}
	var loaded []chunk
	for _, r := range results {
		loaded = append(loaded, r.loaded...)
		for _, st := range r.stops {
			s.stopTable(st.key, st.te)
		}
	}
	return loaded, nil
}

// laneLoad is what loading one lane's units did.
type laneLoad struct {
	loaded []chunk // chunks, or a chunk's start, safe to commit
	stops  []laneStop
	err    error
}

// laneStop is a partition whose table stopped at the chunk after those
// loaded.
type laneStop struct {
	key tp
	te  *TableError
}

// loadLane loads a lane's units in order, until the last or the first
// error. A partition whose table stopped loads nothing more; a group with
// such a member loads its other members apart.
func (s *Sink) loadLane(ctx context.Context, units []unit) laneLoad {
	var res laneLoad
	stopped := map[tp]bool{}
	for _, u := range units {
		live := make(unit, 0, len(u))
		for _, c := range u {
			if !stopped[c.key()] && s.stopped[c.key()] == nil {
				live = append(live, c)
			}
		}
		var outcomes []chunkLoad
		if len(live) > 1 && len(live) == len(u) {
			var err error
			if outcomes, err = s.loadGroup(ctx, live); err != nil {
				res.err = err
				return res
			}
		} else {
			for _, c := range live {
				o := chunkLoad{c: c, err: s.loadAlone(ctx, c)}
				if outcomes = append(outcomes, o); fatal(o.err) {
					break // the flush ends
				}
			}
		}
		for _, o := range outcomes {
			var te *TableError
			if errors.As(o.err, &te) {
				// Commit what was loaded before the record the table
				// stopped at: once an operator rebuilt the table, loading
				// resumes exactly at the change.
				var at *stopAt
				items := o.c.items
				if errors.As(o.err, &at) {
					if i := sort.Search(len(items), func(i int) bool { return items[i].Offset >= at.next }); i > 0 {
						res.loaded = append(res.loaded, chunk{items: items[:i]})
					}
				}
				stopped[o.c.key()] = true
				res.stops = append(res.stops, laneStop{key: o.c.key(), te: te})
				continue
			}
			if o.err != nil {
				res.err = o.err
				return res
			}
			res.loaded = append(res.loaded, *o.c)
		}
	}
	return res
}

// chunkLoad is how loading one chunk ended: nil, a TableError (a stopAt
// when part of it loaded) or the error that ends the flush.
type chunkLoad struct {
	c   *chunk
	err error
}

// loadAlone loads one chunk as its own batches, with a decoder of the
// sink's.
func (s *Sink) loadAlone(ctx context.Context, c *chunk) error {
	dec := <-s.decoders
	defer func() { s.decoders <- dec }()
	return s.loadChunk(ctx, dec, c.items)
}
