package capture

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/walhouse/walhouse/record"
)

// Nothing a PostgreSQL user can write may stop capture: a stopped capture
// pins WAL on the primary until its disk fills. A published table that
// capture cannot capture whole (no primary key, REPLICA IDENTITY NOTHING,
// no tenant column, published with a column list that leaves out a key,
// tenant or sorting column, or under a captured table's ClickHouse table
// or topic) is therefore left out of
// the stream, like an excluded table, and the other tables go on: when it
// joins the publication, when it becomes uncapturable while captured, at
// start once the slot exists (it pins WAL from then on), and when its copy
// finds it so. A captured table's key, identity and tenant column are
// judged by its Relation messages, at their place in the WAL; how the
// publication sends it, only the catalog says (checkTables, checkEntry).
// Only a first start, which has no slot yet, refuses such a table, with
// the fix. A table left out is marked so in its saved snapshot plan
// (markLeftOut): whenever it is captured again it is copied again, and it
// counts as inexact until a --resnapshot.
//
// A table left out is never streamed in part: its changes are counted, not
// produced, its heartbeats stop (so its lastSyncAt stops, truthfully) and
// ClickHouse keeps it as it was. Streaming the changes PostgreSQL still
// sends would write rows that look maintained and are not: a column list
// without the key or tenant column sends rows that cannot be identified,
// and a table without a key in its Relation message has no key to write
// rows under (a former key no longer guarantees one row per key). A row
// filter or a column list that keeps those is honoured, not refused: the
// copies read what the publication sends (snapshotRelation). Once fixed,
// the table joins the stream again with a copy, which cannot repair rows
// changed while it was out: docs/limits.md.

// Why a table is left out: the reason label of the metrics and of
// record.RefusedTable.Reasons.
const (
	reasonNoKey       = "no_primary_key"
	reasonIdentity    = "replica_identity" // NOTHING, or a key or tenant column outside it
	reasonNoTenant    = "no_tenant_column"
	reasonColumnList  = "column_list" // leaves out a key, tenant or sorting column
	reasonGenerated   = "generated_columns"
	reasonNameClash   = "name_clash"
	reasonColumns     = "invalid_columns"
	reasonInvalidName = "invalid_name" // a schema name with a dot
	reasonPublish     = "publish_actions"
	reasonLayout      = "layout" // the layout names columns the table lacks, or not the tenant first
)

// errUncapturable marks the reasons a table cannot be captured (no key, no
// tenant, a filtered publication...), as against a failed catalog query.
var errUncapturable = errors.New("the table cannot be captured")

// errTableRefused is returned by addTable for a table that joined the
// publication but cannot be captured: it is left out of the stream (like
// an excluded table), and the other tables go on.
var errTableRefused = errors.New("the table is left out of the stream")

// tableRefusal is one reason why a table cannot be captured, with a
// message that names the fix; errors.Is(err, errUncapturable) holds.
type tableRefusal struct {
	reason string
	err    error
}

// refusal returns a tableRefusal for reason with a formatted message.
func refusal(reason, format string, args ...any) error {
	return &tableRefusal{reason: reason, err: fmt.Errorf(format, args...)}
}

func (r *tableRefusal) Error() string   { return r.err.Error() }
func (r *tableRefusal) Unwrap() []error { return []error{errUncapturable, r.err} }

// refusalReasons returns the reasons of every tableRefusal in err's tree,
// sorted and distinct.
func refusalReasons(err error) []string {
	var out []string
	var walk func(error)
	walk = func(e error) {
		switch u := e.(type) {
		case *tableRefusal:
			out = append(out, u.reason)
		case interface{ Unwrap() []error }:
			for _, x := range u.Unwrap() {
				walk(x)
			}
		case interface{ Unwrap() error }:
			if x := u.Unwrap(); x != nil {
				walk(x)
			}
		}
	}
	walk(err)
	slices.Sort(out)
	return slices.Compact(out)
}

// refusedTables keeps the tables capture leaves out, for /metrics, /status
// and the log, across the sessions of one Capturer. It is safe for
// concurrent use.
type refusedTables struct {
	log     *slog.Logger
	gauge   *prometheus.GaugeVec   // table, reason: 1 while left out
	changes *prometheus.CounterVec // table: changes left out
	inexact *prometheus.GaugeVec   // table: 1 from a leave-out until a --resnapshot
	now     func() time.Time

	mu     sync.Mutex
	tables map[string]record.RefusedTable
}

func newRefusedTables(log *slog.Logger) *refusedTables {
	return &refusedTables{
		log: log,
		gauge: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "walhouse_capture_tables_refused",
			Help: "Published tables capture leaves out because it cannot capture them whole (1 per table and reason): ClickHouse no longer follows them.",
		}, []string{"table", "reason"}),
		changes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "walhouse_capture_refused_changes_total",
			Help: "Changes (rows and TRUNCATEs) of tables left out (walhouse_capture_tables_refused) that capture read and did not produce, by table.",
		}, []string{"table"}),
		inexact: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "walhouse_capture_tables_inexact",
			Help: "Tables that were left out of the stream (or left the publication), or rewritten by DDL and not copied again (--rewrite-copy off, --rewrite-copy-max-rows; an enum label renamed without the event trigger), since their last --resnapshot: 1 while their ClickHouse table may still hold rows changed, deleted or rewritten meanwhile, which a copy cannot replace or remove.",
		}, []string{"table"}),
		now:    time.Now,
		tables: map[string]record.RefusedTable{},
	}
}

// leave records table as left out because of why (a tree of
// tableRefusals) and logs it, with the fix, when it is news: the table was
// not left out for the same reasons before.
func (r *refusedTables) leave(table, publication string, why error) {
	reasons := refusalReasons(why)
	r.mu.Lock()
	prev, known := r.tables[table]
	news := !known || !slices.Equal(prev.Reasons, reasons)
	cur := record.RefusedTable{Table: table, Reasons: reasons, Since: r.now().UTC(), Error: why.Error()}
	if known {
		cur.Since = prev.Since
	}
	if !news {
		cur.Error = prev.Error // the first says since when
	}
	r.tables[table] = cur
	if news {
		r.gauge.DeletePartialMatch(prometheus.Labels{"table": table})
		for _, reason := range reasons {
			r.gauge.WithLabelValues(table, reason).Set(1)
		}
	}
	r.mu.Unlock()
	if news {
		r.log.Error("table left out of the stream: it cannot be captured whole, so its changes are not captured (counted in walhouse_capture_refused_changes_total); the other tables go on. Fix it as the error says: the table then joins the stream again with a copy",
			"table", table, "publication", publication, "reasons", reasons, "err", why)
	}
}

// rejoin forgets table, which is captured again; it reports whether it was
// left out.
func (r *refusedTables) rejoin(table string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.tables[table]; !ok {
		return false
	}
	delete(r.tables, table)
	r.gauge.DeletePartialMatch(prometheus.Labels{"table": table})
	return true
}

// retain forgets the tables left out that keep does not report (they left
// the publication, or are captured).
func (r *refusedTables) retain(keep func(table string) bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for t := range r.tables {
		if !keep(t) {
			delete(r.tables, t)
			r.gauge.DeletePartialMatch(prometheus.Labels{"table": t})
		}
	}
}

// setInexact records whether table's ClickHouse table may be inexact.
func (r *refusedTables) setInexact(table string, inexact bool) {
	if inexact {
		r.inexact.WithLabelValues(table).Set(1)
	} else {
		r.inexact.DeleteLabelValues(table)
	}
}

// counter returns the counter of table's changes left out.
func (r *refusedTables) counter(table string) prometheus.Counter {
	return r.changes.WithLabelValues(table)
}

// list returns the tables left out, by name.
func (r *refusedTables) list() []record.RefusedTable {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]record.RefusedTable, 0, len(r.tables))
	for _, t := range r.tables {
		t.Reasons = slices.Clone(t.Reasons)
		out = append(out, t)
	}
	slices.SortFunc(out, func(a, b record.RefusedTable) int { return strings.Compare(a.Table, b.Table) })
	return out
}
