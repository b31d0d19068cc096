package capture

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/errgroup"

	"github.com/walhouse/walhouse/record"
)

// A snapshot reads the rows that existed before the stream starts. Every
// row gets record.SnapshotVersion (0), below every streamed change, so the
// snapshot only has to be no older than the slot's consistent point:
//   - on the first start, chunks read the snapshot the slot exported, which
//     is exactly the consistent point;
//   - after a crash, the unfinished chunks are read with fresh snapshots.
//     A fresh snapshot is newer than the consistent point, and whatever
//     changed in between is also in the stream (which starts at the
//     consistent point) with a higher version, so ClickHouse ends up equal.
//
// Tables are split into chunks of heap pages read with TID range scans, in
// parallel. A chunk counts as done once Kafka acknowledged all its rows;
// done chunks are saved in the StateStore, so a restart resumes with the
// first unfinished chunk. Streaming starts when the snapshot is complete, so
// a row's snapshot record precedes its changes in its partition.

// snapshotPlan is the durable progress of one table's snapshot.
type snapshotPlan struct {
	Table      string    `json:"table"`
	CP         string    `json:"consistentPoint"`
	At         time.Time `json:"at"`
	Pages      int64     `json:"pages"`
	ChunkPages int64     `json:"chunkPages"`
	Chunks     int       `json:"chunks"`
	Done       []int     `json:"done"`
	Complete   bool      `json:"complete"`
	// Parts are the leaf partitions of a partitioned table, whose chunks
	// are read from each leaf (the root has no heap to scan by TID); empty
	// for a plain table, and in plans saved before partitions were split,
	// which read the whole table as one chunk.
	Parts []partPlan `json:"partitions,omitempty"`
	// Leaves are all leaf partitions ("schema.name") of a partitioned table
	// when the plan was made, copied before or by it: a leaf that is not
	// among them when capture starts was attached while capture was
	// stopped, and is copied then. Nil for a plain table and in plans saved
	// before leaves were kept (whose tables' leaves are taken as copied).
	Leaves []string `json:"leaves"`
	// Membership identifies the table's entry in the publication when the
	// plan was made (the oid of its pg_publication_rel row; 0 for a
	// publication FOR ALL TABLES or of whole schemas). A table removed from
	// the publication and added again gets a new entry: its changes in
	// between were never captured, so a start that finds another entry
	// copies the table again.
	Membership uint32 `json:"membership,omitempty"`
	// LeftOut is the stream position at which the table, captured under
	// this plan, was left out of the stream or left the publication: its
	// changes from there on were not captured, so whenever it is captured
	// again, in this process or after a restart, it is copied again
	// (plan), and the new plan clears the mark.
	LeftOut string `json:"leftOut,omitempty"`
	// Inexact says that the table was left out since its last
	// --resnapshot: its copy again cannot replace rows ClickHouse holds
	// nor remove rows deleted meanwhile (walhouse_capture_tables_inexact).
	Inexact bool `json:"inexact,omitempty"`
	// Rewrite says that the plan copies the table again after a DDL
	// rewrote it at CP: its rows carry record.RewriteCopyVersion(CP)
	// instead of version 0 (rewrite.go).
	Rewrite bool `json:"rewrite,omitempty"`
	// Recopy is the re-copy request (record.RecopyRequest.ID) this
	// rewrite plan's copy answers (recopy.go); RecopyRefused the one whose
	// copy was given up (rewriteNotCopied), so that no done marker claims
	// it.
	Recopy        string `json:"recopy,omitempty"`
	RecopyRefused string `json:"recopyRefused,omitempty"`
	// Sweep says that once this rewrite plan's copy is complete its done
	// markers (record.RewriteSweepID) are still to be sent, for the sink
	// to sweep the table at CP: a rewrite that converted a column of the
	// ClickHouse sorting or partition key (or the key) moved rows, and
	// their copies at the new positions do not replace the versions at
	// the old ones (rewrite.go). Cleared once Kafka acknowledged the
	// markers; a plan that answers a re-copy request sweeps through it.
	Sweep bool       `json:"sweep,omitempty"`
	mu    sync.Mutex `json:"-"`
}

// sweepPending reports whether p's copy is complete and its done markers
// are still to be sent (Sweep).
func (p *snapshotPlan) sweepPending() bool {
	return p.Sweep && p.Rewrite && p.Complete && p.Recopy == "" && p.Chunks > 0 && len(p.Done) >= p.Chunks
}

// version returns the version of the plan's rows, copied at cp.
func (p *snapshotPlan) version(cp record.LSN) uint64 {
	if p.Rewrite {
		return record.RewriteCopyVersion(cp)
	}
	return record.SnapshotVersion
}

// partPlan is one leaf partition in a snapshot plan: it owns the plan's
// chunks First to First+Chunks-1.
type partPlan struct {
	Schema string `json:"schema"`
	Name   string `json:"name"`
	Pages  int64  `json:"pages"`
	First  int    `json:"first"`
	Chunks int    `json:"chunks"`
	// Whole is true for a leaf without a heap to scan by TID (a foreign
	// table): it is read in one chunk.
	Whole bool `json:"whole,omitempty"`
}

// chunkQuery returns the query that reads chunk i of p, selecting cols (a
// quoted, comma-separated list) of the rows that match filter (the
// publication's row filter as PostgreSQL deparses it; "" reads every
// row). A plain table's chunks are TID ranges of its heap; a partitioned
// table's are TID ranges of its leaves, whose rows are the root's rows
// under the root's column names, so the root's filter reads them too.
func (p *snapshotPlan) chunkQuery(i int, cols, filter string) string {
	if len(p.Parts) == 0 {
		if p.Chunks <= 1 {
			return addWhere(fmt.Sprintf("SELECT %s FROM %s", cols, quoteTable(p.Table)), "", filter)
		}
		return tidRangeQuery(cols, quoteTable(p.Table), int64(i)*p.ChunkPages, int64(i+1)*p.ChunkPages, i == p.Chunks-1, filter)
	}
	for _, part := range p.Parts {
		if i < part.First || i >= part.First+part.Chunks {
			continue
		}
		leaf := pgx.Identifier{part.Schema, part.Name}.Sanitize()
		if part.Whole || part.Chunks == 1 {
			return addWhere(fmt.Sprintf("SELECT %s FROM ONLY %s", cols, leaf), "", filter)
		}
		j := int64(i - part.First)
		return tidRangeQuery(cols, leaf, j*p.ChunkPages, (j+1)*p.ChunkPages, int(j) == part.Chunks-1, filter)
	}
	// Not reached for a chunk of the plan: pending() lists only those.
	return fmt.Sprintf("SELECT %s FROM %s WHERE false", cols, quoteTable(p.Table))
}

// tidRangeQuery reads the heap pages [from, to) of table; the last chunk is
// open-ended, so rows in pages added since planning are read too.
func tidRangeQuery(cols, table string, from, to int64, last bool, filter string) string {
	cond := fmt.Sprintf("ctid >= '(%d,0)'::tid", from)
	if !last {
		cond += fmt.Sprintf(" AND ctid < '(%d,0)'::tid", to)
	}
	return addWhere(fmt.Sprintf("SELECT %s FROM ONLY %s", cols, table), cond, filter)
}

// addWhere appends to q the conditions cond and filter, each optional; the
// filter is parenthesized, as it is an expression of any precedence.
func addWhere(q, cond, filter string) string {
	switch {
	case cond != "" && filter != "":
		return q + " WHERE " + cond + " AND (" + filter + ")"
	case cond != "":
		return q + " WHERE " + cond
	case filter != "":
		return q + " WHERE (" + filter + ")"
	}
	return q
}

func (p *snapshotPlan) pending() []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []int
	for i := 0; i < p.Chunks; i++ {
		if !slices.Contains(p.Done, i) {
			out = append(out, i)
		}
	}
	return out
}

func stateKey(slot, table string) string { return "snapshot/" + slot + "/" + table }

// Which tables are read: all of them when the slot was created by this
// start (from the slot's exported snapshot, before streaming starts);
// otherwise, with a StateStore, those whose snapshot is unfinished or was
// never taken (a table added to the publication while capture was down, or a
// slot created by hand), and tables added to the publication while capture
// streams. Those are read online, next to the stream: see online.go.

// snapshotter runs the snapshot of some tables.
type snapshotter struct {
	c        *Capturer
	sourceID string
	cp       record.LSN
	name     string // exported snapshot, empty for fresh snapshots
	rewrite  bool   // new plans copy after a rewrite at cp (snapshotPlan.Rewrite)
	recopy   string // and answer this re-copy request (snapshotPlan.Recopy)
	log      *slog.Logger
	rows     atomic.Int64
	chunks   atomic.Int64 // chunks finished by this run
}

func (c *Capturer) newSnapshotter(sourceID string, cp record.LSN, name string) *snapshotter {
	return &snapshotter{c: c, sourceID: sourceID, cp: cp, name: name, log: c.log.With("phase", "snapshot")}
}

// snapshot copies the tables of a slot this start created, from the slot's
// exported snapshot, before streaming starts: every row's snapshot record
// then precedes its changes in its partition.
func (c *Capturer) snapshot(ctx context.Context, sourceID string, tables []string, cp record.LSN, name string) error {
	s := c.newSnapshotter(sourceID, cp, name)
	plans, estimate, err := s.planAll(ctx, tables, true, false)
	if err != nil {
		return err
	}
	return s.read(ctx, plans, estimate)
}

// planAll loads or makes the plans of tables and returns the unfinished
// ones with an estimate of their remaining rows. created says the slot was
// just created; fresh says the tables are new to the stream, so whatever
// was saved about them is out of date.
func (s *snapshotter) planAll(ctx context.Context, tables []string, created, fresh bool) ([]*snapshotPlan, int64, error) {
	c := s.c
	conn, err := connect(ctx, c.cfg.connString, connOptions{})
	if err != nil {
		return nil, 0, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var plans []*snapshotPlan
	var estimate int64
	for _, t := range tables {
		p, err := s.plan(ctx, conn, t, created, fresh)
		if err != nil {
			return nil, 0, err
		}
		if p == nil || p.Complete && !p.sweepPending() {
			continue
		}
		if tc := c.cfg.topics; tc != nil {
			if err := tc.CreateTopic(ctx, c.cfg.topicOf(t), c.cfg.partitions, c.cfg.replication); err != nil {
				return nil, 0, err
			}
		}
		var tuples int64
		// The leaves' statistics: a partitioned root has none of its own.
		_ = conn.QueryRow(ctx, `SELECT coalesce(sum(greatest(c.reltuples, 0)), 0)::bigint
			FROM pg_partition_tree($1::regclass) t JOIN pg_class c ON c.oid = t.relid WHERE t.isleaf`, quoteTable(t)).Scan(&tuples)
		estimate += tuples * int64(len(p.pending())) / int64(max(p.Chunks, 1))
		plans = append(plans, p)
	}
	return plans, estimate, nil
}

// read copies the pending chunks of plans with the configured number of
// workers, returning once Kafka acknowledged every row.
func (s *snapshotter) read(ctx context.Context, plans []*snapshotPlan, estimate int64) error {
	if len(plans) == 0 {
		return nil
	}
	c := s.c
	tables := make([]string, len(plans))
	for i, p := range plans {
		tables[i] = p.Table
	}
	s.log.Info("starting", "tables", tables, "estimated_rows", estimate, "workers", c.cfg.workers, "consistent_point", s.cp, "exported_snapshot", s.name != "")
	pending := 0
	for _, p := range plans {
		pending += len(p.pending())
	}
	type task struct {
		plan  *snapshotPlan
		chunk int
	}
	tasks := make(chan task)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		defer close(tasks)
		for _, p := range plans {
			for _, i := range p.pending() {
				select {
				case tasks <- task{p, i}:
				case <-gctx.Done():
					return gctx.Err()
				}
			}
		}
		return nil
	})
	for w := 0; w < c.cfg.workers; w++ {
		g.Go(func() error {
			// Rows over the bound are replaced before they are read
			// (receive_bound.go); readChunk asks bound which.
			var bound *boundedReader
			wc, err := connect(gctx, c.cfg.connString, connOptions{
				maxRow: c.cfg.maxRecordBytes + receiveSlack, bounded: func(b *boundedReader) { bound = b },
			})
			if err != nil {
				return err
			}
			defer wc.Close(context.WithoutCancel(gctx))
			for t := range tasks {
				if err := s.readChunk(gctx, wc, bound, t.plan, t.chunk); err != nil {
					return err
				}
				if err := s.finishChunk(gctx, t.plan, t.chunk); err != nil {
					return err
				}
				s.chunks.Add(1)
			}
			return nil
		})
	}
	stopProgress := s.progress(estimate, pending)
	err := g.Wait()
	stopProgress()
	if err != nil {
		return fmt.Errorf("snapshot of %s: %w (finished chunks are kept; a restart resumes with the rest)", strings.Join(tables, ", "), err)
	}
	s.log.Info("complete", "tables", tables, "rows", s.rows.Load())
	return nil
}

// progress logs rows, rows/s and an ETA every 5 seconds. The ETA comes
// from the row estimate (the planner's statistics) while it holds, and
// from the share of chunks done when the table was never analyzed or the
// estimate is exceeded.
func (s *snapshotter) progress(estimate int64, chunks int) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		start := time.Now()
		t := time.NewTicker(5 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				rows, finished := s.rows.Load(), s.chunks.Load()
				elapsed := time.Since(start)
				rate := float64(rows) / elapsed.Seconds()
				eta := "unknown"
				switch {
				case rate > 0 && estimate > rows:
					eta = (time.Duration(float64(estimate-rows)/rate) * time.Second).Round(time.Second).String()
				case finished > 0 && int(finished) < chunks:
					eta = (elapsed * time.Duration(int64(chunks)-finished) / time.Duration(finished)).Round(time.Second).String()
				}
				s.log.Info("progress", "rows", rows, "estimated_rows", estimate, "rows_per_s", int64(rate),
					"chunks_done", finished, "chunks", chunks, "eta", eta)
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}

// plan loads or makes the snapshot plan of a table; nil means the table
// needs no snapshot.
func (s *snapshotter) plan(ctx context.Context, conn *pgx.Conn, table string, created, fresh bool) (*snapshotPlan, error) {
	cfg := &s.c.cfg
	resnapshot := (cfg.resnapshot[table] || cfg.resnapshotAll) && !fresh
	again := resnapshot || fresh
	if cfg.state == nil && !created && !again {
		// Without saved progress there is no telling whether an existing
		// slot's tables were ever copied: only a new slot gets a snapshot.
		return nil, nil
	}
	var inexact bool // the new plan's Inexact
	if cfg.state != nil && !created {
		old, err := loadPlan(ctx, cfg, table)
		if err != nil {
			return nil, err
		}
		if old != nil {
			// A --resnapshot (of a table whose ClickHouse table was
			// dropped first, as the fix says) ends the inexactness.
			inexact = (old.Inexact || old.LeftOut != "") && !resnapshot
		}
		switch {
		case again || old == nil:
		case old.LeftOut != "":
			s.log.Warn("table was left out of the stream at "+old.LeftOut+" and is captured again: "+rejoinedFix, "table", table, "publication", cfg.publication)
		default:
			now, err := membership(ctx, conn, cfg.publication, table)
			if err != nil {
				return nil, err
			}
			if old.Membership == 0 || now == 0 || now == old.Membership {
				if !old.Complete {
					s.log.Info("resuming", "table", table, "chunks_done", len(old.Done), "chunks", old.Chunks)
				}
				s.c.refused.setInexact(table, old.Inexact)
				return old, nil
			}
			// Its changes while it was out of the publication were never
			// sent. A new copy brings in the rows inserted meanwhile; the
			// rows it copies again have version 0 and cannot replace what
			// ClickHouse holds, nor remove rows deleted meanwhile.
			inexact = !resnapshot
			s.log.Warn("table left the publication and joined it again while capture was stopped: "+rejoinedFix, "table", table, "publication", cfg.publication)
		}
		if old == nil && !again {
			// An existing slot with no copy saved under it (a slot made by
			// hand, another --topic-prefix, --snapshot never before): the
			// copy is harmless (its rows have version 0, below every
			// streamed change) but may be long, so say why it runs.
			s.log.Info("existing slot, but no copy of this table was ever made under it (nothing saved in the state topic): copying it next to the stream once; --snapshot never skips it",
				"table", table, "slot", cfg.slot)
		}
	}
	var pages int64
	var kind string
	err := conn.QueryRow(ctx, "SELECT pg_relation_size(c.oid) / current_setting('block_size')::bigint, c.relkind::text FROM pg_class c WHERE c.oid = $1::regclass", quoteTable(table)).Scan(&pages, &kind)
	if err != nil {
		return nil, fmt.Errorf("size table %s for the snapshot: %w", table, err)
	}
	p := &snapshotPlan{Table: table, CP: s.cp.String(), At: time.Now().UTC(), Pages: pages, ChunkPages: cfg.chunkPages, Inexact: inexact, Rewrite: s.rewrite, Recopy: s.recopy, Sweep: s.rewrite && s.recopy == ""}
	s.c.refused.setInexact(table, inexact)
	p.Chunks = chunksOf(pages, cfg.chunkPages)
	if p.Membership, err = membership(ctx, conn, cfg.publication, table); err != nil {
		return nil, err
	}
	switch kind {
	case "r":
	case "p":
		leaves, err := partitionLeaves(ctx, conn, []string{table})
		if err != nil {
			return nil, err
		}
		p.setParts(leaves[table])
		p.Leaves = leafNames(leaves[table])
		if p.Chunks == 0 { // no partitions yet: read the (empty) root once
			p.Parts, p.Chunks = nil, 1
		}
	default:
		p.Chunks = 1 // not a heap (a foreign table, say): read whole
	}
	if err := s.save(ctx, p); err != nil {
		return nil, err
	}
	return p, nil
}

// loadPlan returns the saved snapshot plan of table, nil if none.
func loadPlan(ctx context.Context, cfg *config, table string) (*snapshotPlan, error) {
	raw, err := cfg.state.Load(ctx, stateKey(cfg.slot, table))
	if err != nil {
		return nil, fmt.Errorf("read the snapshot state of %s: %w", table, err)
	}
	if raw == nil {
		return nil, nil
	}
	p := &snapshotPlan{}
	if err := json.Unmarshal(raw, p); err != nil {
		return nil, fmt.Errorf("snapshot state of %s is unreadable: %w; delete it from the state topic to snapshot the table again", table, err)
	}
	return p, nil
}

// markLeftOut records in table's saved snapshot plan, if it has one, that
// the stream stopped capturing it at at (see snapshotPlan.LeftOut), so
// that it is copied again when it is captured again, even after a restart.
func (c *Capturer) markLeftOut(ctx context.Context, table string, at record.LSN) error {
	if c.cfg.state == nil {
		return nil
	}
	p, err := loadPlan(ctx, &c.cfg, table)
	if err != nil || p == nil || p.LeftOut != "" {
		return err
	}
	p.LeftOut = at.String()
	raw, err := json.Marshal(p)
	if err != nil {
		return err
	}
	if err := c.cfg.state.Save(ctx, stateKey(c.cfg.slot, table), raw); err != nil {
		return fmt.Errorf("save that table %s was left out of the stream: %w", table, err)
	}
	c.refused.setInexact(table, true)
	return nil
}

// rejoinedFix says what a table that left the publication and joined it
// again needs, and how to get it.
const rejoinedFix = "its changes in between were not captured; it is copied again, which brings in rows inserted meanwhile " +
	"but cannot replace newer rows in ClickHouse nor remove rows deleted meanwhile. For an exact copy: once the sink " +
	"has caught up, stop it, drop the table's ClickHouse table and run capture once with --resnapshot <table>"

// setParts makes p read the given leaf partitions, in chunks of
// p.ChunkPages pages.
func (p *snapshotPlan) setParts(parts []partPlan) {
	p.Parts, p.Chunks, p.Pages = parts, 0, 0
	for i := range p.Parts {
		part := &p.Parts[i]
		part.First, part.Chunks = p.Chunks, chunksOf(part.Pages, p.ChunkPages)
		if part.Whole {
			part.Chunks = 1
		}
		p.Chunks += part.Chunks
		p.Pages += part.Pages
	}
}

// chunksOf returns how many chunks of chunkPages pages cover pages, at
// least one (an empty table is read once, in case rows arrived since it
// was sized).
func chunksOf(pages, chunkPages int64) int {
	return max(1, int((pages+chunkPages-1)/chunkPages))
}

func (s *snapshotter) save(ctx context.Context, p *snapshotPlan) error {
	if s.c.cfg.state == nil {
		return nil
	}
	p.mu.Lock()
	raw, err := json.Marshal(p)
	p.mu.Unlock()
	if err != nil {
		return err
	}
	return s.c.cfg.state.Save(ctx, stateKey(s.c.cfg.slot, p.Table), raw)
}

func (s *snapshotter) finishChunk(ctx context.Context, p *snapshotPlan, chunk int) error {
	p.mu.Lock()
	p.Done = append(p.Done, chunk)
	slices.Sort(p.Done)
	p.Complete = len(p.Done) >= p.Chunks
	p.mu.Unlock()
	return s.save(ctx, p)
}

// quoteTable quotes "schema.table" as an SQL identifier.
func quoteTable(table string) string {
	schema, name, _ := strings.Cut(table, ".")
	return pgx.Identifier{schema, name}.Sanitize()
}
