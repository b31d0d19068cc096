package clickhouse

import (
	"context"
	"fmt"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"

	"github.com/walhouse/walhouse/record"
	"github.com/walhouse/walhouse/schema"
	"github.com/walhouse/walhouse/sink"
)

var _ sink.RecopyBarrier = (*Writer)(nil)

// RecopyTable is the table, in the Writer's database, where sinks record
// which partitions of a table's topic passed the re-copy done marker of a
// request (sink/recopy.go): the last one to pass, by any sink, sweeps.
const RecopyTable = "_walhouse_recopy"

func recopyTableStatements(p schema.Placement) []string {
	ddl := p.CreateLocal(RecopyTable) + `
(
    recopy_id    String,
    source_table String,
    partition    Int32,
    partitions   Int32,
    lsn          UInt64,
    passed_at    DateTime64(6, 'UTC')
)
` + p.Engine(RecopyTable, "passed_at") + `
ORDER BY (recopy_id, partition)`
	if !p.OnCluster() {
		return []string{ddl}
	}
	// All of a request's rows meet on one shard.
	return []string{ddl, p.DistributedDDL(RecopyTable, "cityHash64(recopy_id)", "")}
}

// PassRecopy records that partition passed the re-copy done marker d and
// reports whether every one of d.Partitions partitions has. The insert is
// synchronous (on a cluster too), so of sinks passing the last partitions
// at once, at least the last one to insert sees them all.
func (w *Writer) PassRecopy(ctx context.Context, d record.RecopyDone, partition int32) (bool, error) {
	w.mu.Lock()
	ready := w.recopyReady
	w.mu.Unlock()
	if !ready {
		for _, stmt := range recopyTableStatements(w.placement) {
			if err := w.conn.Exec(ctx, stmt); err != nil {
				return false, fmt.Errorf("create %s: %w", RecopyTable, err)
			}
		}
		w.mu.Lock()
		w.recopyReady = true
		w.mu.Unlock()
	}
	table := w.placement.Qualified(RecopyTable)
	ictx := ch.Context(ctx, ch.WithSettings(ch.Settings{"insert_distributed_sync": 1}))
	err := w.conn.Exec(ictx, fmt.Sprintf("INSERT INTO %s (recopy_id, source_table, partition, partitions, lsn, passed_at) VALUES (?, ?, ?, ?, ?, ?)", table),
		d.ID, schema.TableName(d.Source), partition, d.Partitions, uint64(d.LSN), time.Now().UTC())
	if err != nil {
		return false, fmt.Errorf("record the re-copy %s in %s: %w", d.ID, RecopyTable, err)
	}
	var passed uint64
	qctx := ch.Context(ctx, ch.WithParameters(ch.Parameters{"id": d.ID, "n": fmt.Sprint(d.Partitions)}))
	err = w.conn.QueryRow(qctx, fmt.Sprintf("SELECT uniqExact(partition) FROM %s WHERE recopy_id = {id:String} AND partition >= 0 AND partition < {n:Int32}", table)).Scan(&passed)
	if err != nil {
		return false, fmt.Errorf("read the re-copy %s from %s: %w", d.ID, RecopyTable, err)
	}
	return passed >= uint64(d.Partitions), nil
}
