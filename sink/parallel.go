package sink

import (
	"context"
	"errors"
	"sort"

	"golang.org/x/sync/errgroup"

	"github.com/walhouse/walhouse/record"
)

// maxInsertParallelism bounds Config.InsertParallelism: more partitions
// loading at once than a ClickHouse server has insert threads only queue.
const maxInsertParallelism = 64

// loadChunks loads the chunks of one flush and returns those whose offsets
// may be committed: every chunk loaded whole, and the loaded start of a
// chunk whose table stopped. Each partition's chunks load in offset order,
// one after another; up to Config.InsertParallelism partitions load at the
// same time, so one partition's decoding and Layer 2 round trips overlap
// another's insert, and a ClickHouse server runs their inserts in parallel.
// Each partition keeps its own batches and insert tokens, so a flush
// repeated after a crash inserts exactly the same batches, whichever
// finished first. The first error other than a TableError ends the flush
// (nothing is committed; the partitions loading meanwhile finish their
// current insert or stop at ctx).
func (s *Sink) loadChunks(ctx context.Context, chunks [][]item) ([][]item, error) {
	var parts [][][]item // chunks by partition, in the order of chunks
	index := map[tp]int{}
	for _, c := range chunks {
		k := tp{c[0].Topic, c[0].Partition}
		if s.stopped[k] != nil {
			continue
		}
		i, ok := index[k]
		if !ok {
			i = len(parts)
			index[k] = i
			parts = append(parts, nil)
		}
		parts[i] = append(parts[i], c)
	}
	results := make([]partitionLoad, len(parts))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(s.cfg.InsertParallelism)
	for i, cs := range parts {
		g.Go(func() error {
			if gctx.Err() != nil {
				return nil // another partition failed: the flush ends, as one after another
			}
			dec := <-s.decoders
			defer func() { s.decoders <- dec }()
			results[i] = s.loadPartition(gctx, dec, cs)
			return results[i].err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err // stopping: partitions may have been skipped
	}
	var loaded [][]item
	for _, r := range results {
		loaded = append(loaded, r.loaded...)
		if r.stop != nil {
			s.stopTable(r.key, r.stop)
		}
	}
	return loaded, nil
}

// partitionLoad is what loading one partition's chunks did.
type partitionLoad struct {
	key    tp
	loaded [][]item    // chunks, or a chunk's start, safe to commit
	stop   *TableError // the table stopped at the chunk after loaded
	err    error
}

// loadPartition loads one partition's chunks in order, decoding with dec,
// until the last or the first error.
func (s *Sink) loadPartition(ctx context.Context, dec *record.Decoder, chunks [][]item) partitionLoad {
	res := partitionLoad{key: tp{chunks[0][0].Topic, chunks[0][0].Partition}}
	for _, c := range chunks {
		err := s.loadChunk(ctx, dec, c)
		var te *TableError
		if errors.As(err, &te) {
			// Commit what was loaded before the record the table stopped
			// at: once an operator rebuilt the table, loading resumes
			// exactly at the change.
			var at *stopAt
			if errors.As(err, &at) {
				if i := sort.Search(len(c), func(i int) bool { return c[i].Offset >= at.next }); i > 0 {
					res.loaded = append(res.loaded, c[:i])
				}
			}
			res.stop = te
			return res
		}
		if err != nil {
			res.err = err
			return res
		}
		res.loaded = append(res.loaded, c)
	}
	return res
}
