package capture

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/walhouse/walhouse/record"
)

// labelledColumn is an enum column whose records carry its labels
// (record.Column.Labels), for a layout that stores it as a ClickHouse
// Enum8 or Enum16.
type labelledColumn struct {
	idx    int    // in relation.columns
	oid    uint32 // the enum type
	labels map[string]bool
	// missing are values the catalog lacked even when read again (a
	// label renamed since the change was written): not read again for
	// each row. Bounded by maxMissingLabels.
	missing map[string]bool
}

// maxMissingLabels bounds labelledColumn.missing: past it, a value the
// labels lack makes capture read them again each time.
const maxMissingLabels = 1024

func newLabelledColumn(idx int, oid uint32, labels []string) labelledColumn {
	l := labelledColumn{idx: idx, oid: oid, labels: make(map[string]bool, len(labels))}
	for _, s := range labels {
		l.labels[s] = true
	}
	return l
}

// refreshLabels makes sure the labels r's records carry hold every enum
// value of values. A label added since the relation was built (ALTER TYPE
// ... ADD VALUE changes neither the type's OID nor the table, so no
// Relation message follows it) makes capture read the labels again and
// the relation a new schema, published before the record that uses it:
// the sink then widens its Enum column rather than set the row aside. A
// value the catalog still lacks (renamed since: ALTER TYPE ... RENAME
// VALUE) is left to the sink, which refuses it with the fix.
func (t *translator) refreshLabels(ctx context.Context, r *relation, values []record.Value) error {
	stale := false
	for _, l := range r.labelled {
		v := values[l.idx]
		if !v.Null && !v.Unchanged && !l.labels[v.Text] && !l.missing[v.Text] {
			stale = true
			break
		}
	}
	if !stale {
		return nil
	}
	cols := slices.Clone(r.columns)
	changed := false
	for i := range r.labelled {
		l := &r.labelled[i]
		labels, err := t.cat.enumLabels(ctx, l.oid)
		if err != nil {
			return fmt.Errorf("table %s column %s: %w", r.name, cols[l.idx].Name, err)
		}
		if len(labels) > record.MaxEnumLabels || slices.Equal(labels, cols[l.idx].Labels) {
			// Too many for any Enum: the records keep the labels they
			// have, and the sink sets the values beyond them aside.
		} else {
			cols[l.idx].Labels = labels
			*l = newLabelledColumn(l.idx, l.oid, labels)
			changed = true
		}
		if v := values[l.idx]; !v.Null && !v.Unchanged && !l.labels[v.Text] && len(l.missing) < maxMissingLabels {
			if l.missing == nil {
				l.missing = map[string]bool{}
			}
			l.missing[strings.Clone(v.Text)] = true // v.Text aliases the WAL buffer
		}
	}
	if !changed {
		return nil
	}
	if err := r.relabel(ctx, t.cfg, cols); err != nil {
		return err
	}
	slog.Default().InfoContext(ctx, "enum labels changed: new schema", "component", "capture", "table", r.name, "schema", r.schemaID)
	return nil
}

// relabel makes cols, r's columns with other labels, its schema.
func (r *relation) relabel(ctx context.Context, cfg *config, cols []record.Column) error {
	if err := record.ValidateColumns(r.tenantColumn, cols); err != nil {
		return fmt.Errorf("table %s: the enum labels read again make no valid schema: %w", r.name, err)
	}
	r.columns = cols
	return r.setSchema(ctx, cfg)
}

// snapshotLabels reads the labels of r's labelled columns again in a
// copy's transaction, whose snapshot its rows are read from: the labels
// are then those of its rows, even when one was added after the relation
// was built (an online copy's rows are newer than that).
func snapshotLabels(ctx context.Context, tx pgx.Tx, r *relation, cfg *config) error {
	if len(r.labelled) == 0 {
		return nil
	}
	cols := slices.Clone(r.columns)
	changed := false
	for i := range r.labelled {
		l := &r.labelled[i]
		labels, err := queryEnumLabels(ctx, tx, l.oid)
		if err != nil {
			return fmt.Errorf("column %s: %w", cols[l.idx].Name, err)
		}
		if len(labels) <= record.MaxEnumLabels && !slices.Equal(labels, cols[l.idx].Labels) {
			cols[l.idx].Labels = labels
			*l = newLabelledColumn(l.idx, l.oid, labels)
			changed = true
		}
	}
	if !changed {
		return nil
	}
	return r.relabel(ctx, cfg, cols)
}
