package capture

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/walhouse/walhouse/record"
	"github.com/walhouse/walhouse/schema"
)

// Without the event trigger's notices (capture not a superuser, a standby
// whose primary has no trigger, PostgreSQL 13) nothing reports ALTER TYPE
// ... RENAME VALUE, after which every stored value of the label reads as
// the new one in PostgreSQL while ClickHouse keeps the old one in every row
// not changed since. Capture notices what it can: it reads the labels of
// the captured tables' enums when the stream starts (an enum of a table
// captured later at its first value), and a value it does not know makes
// it read them again. PostgreSQL never drops a label (only the
// whole type), so a label that is gone since, or a value that is no label
// any more, means a rename. Where in the stream the rename sits is not
// known, so no copy can be placed exactly: every captured table with a
// column of the enum (not one a layout stores as Enum8/Enum16, which
// follows renames) is marked inexact, with the fix (a re-copy), as a
// rewrite that is not copied is. A rename that no change shows afterwards
// (no row written with the new label, or with a label renamed since it
// was written) stays unnoticed.

// capturedEnums reads the labels of every enum that tables (schema.table)
// hold in a column, an array or a domain, at the start of the stream: a
// rename before a table's first change since is then noticed too.
// Enums of tables captured later are read at their first value.
func capturedEnums(ctx context.Context, conn *pgx.Conn, tables []string) (map[uint32]*enumWatch, error) {
	names := make([]string, len(tables))
	for i, t := range tables {
		names[i] = quoteTable(t)
	}
	rows, err := conn.Query(ctx, `WITH RECURSIVE types(rel, typ) AS (
  SELECT x.name, a.atttypid FROM unnest($1::text[], $2::text[]) x(name, quoted)
  JOIN pg_catalog.pg_attribute a ON a.attrelid = to_regclass(x.quoted) AND a.attnum > 0 AND NOT a.attisdropped
  UNION
  SELECT types.rel, CASE WHEN t.typtype = 'd' THEN t.typbasetype ELSE t.typelem END FROM types JOIN pg_catalog.pg_type t ON t.oid = types.typ
  WHERE t.typtype = 'd' OR t.typcategory = 'A' AND t.typelem <> 0)
SELECT e.enumtypid, array_agg(e.enumlabel::text ORDER BY e.enumsortorder),
  (SELECT array_agg(DISTINCT rel ORDER BY rel) FROM types WHERE typ = e.enumtypid)
FROM pg_catalog.pg_enum e WHERE e.enumtypid IN (SELECT typ FROM types) GROUP BY e.enumtypid`, tables, names)
	if err != nil {
		return nil, fmt.Errorf("read the labels of the captured tables' enums: %w", err)
	}
	out := map[uint32]*enumWatch{}
	for rows.Next() {
		var (
			oid            uint32
			labels, tables []string
		)
		if err := rows.Scan(&oid, &labels, &tables); err != nil {
			return nil, fmt.Errorf("read the labels of the captured tables' enums: %w", err)
		}
		out[oid] = &enumWatch{labels: labelSet(labels), tables: tables}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the labels of the captured tables' enums: %w", err)
	}
	return out, nil
}

// enumColumn is an enum column stored as text, or an array or domain of
// an enum, whose values are checked against its labels (relation.enums).
type enumColumn struct {
	idx   int    // in relation.columns
	oid   uint32 // the enum type
	array bool
}

// enumWatch is what capture knows of one enum's labels.
type enumWatch struct {
	labels  map[string]bool // as last read
	tables  []string        // captured tables that hold the enum, as read at the start (capturedEnums)
	renamed bool            // reported: its tables are marked inexact
}

// watchEnums checks the enum values of a change of rel, at lsn, against
// their enums' labels (see above).
func (t *translator) watchEnums(ctx context.Context, rel *relation, lsn record.LSN, values []record.Value) error {
	for _, c := range rel.enums {
		v := values[c.idx]
		if v.Null || v.Unchanged {
			continue
		}
		w := t.enums[c.oid]
		if w == nil {
			labels, err := t.cat.enumLabels(ctx, c.oid)
			if err != nil {
				return fmt.Errorf("table %s column %s: %w", rel.name, rel.columns[c.idx].Name, err)
			}
			w = &enumWatch{labels: labelSet(labels)}
			t.enums[c.oid] = w
		}
		if w.renamed {
			continue
		}
		value, ok := unknownLabel(w.labels, v.Text, c.array)
		if !ok {
			continue
		}
		labels, err := t.cat.enumLabels(ctx, c.oid)
		if err != nil {
			return fmt.Errorf("table %s column %s: %w", rel.name, rel.columns[c.idx].Name, err)
		}
		why := renamedLabel(w.labels, labels, value)
		w.labels = labelSet(labels)
		if why == "" {
			continue // a label added since (ADD VALUE)
		}
		w.renamed = true
		if err := t.enumRenamedUnnoticed(ctx, lsn, c.oid, w.tables, rel.columns[c.idx].Type, why); err != nil {
			return err
		}
	}
	return nil
}

// enumRenamedUnnoticed marks every captured table with a column of the
// enum oid (named typ) inexact: a label of it was renamed (why). Those
// are the tables held (read at the start) and those whose relation has
// such a column (captured later, or retyped since).
func (t *translator) enumRenamedUnnoticed(ctx context.Context, lsn record.LSN, oid uint32, held []string, typ, why string) error {
	tables := slices.DeleteFunc(slices.Clone(held), func(name string) bool { return t.cfg.excluded(name) || !t.tables.captured(name) })
	for _, r := range t.rels {
		if !r.skip && slices.ContainsFunc(r.enums, func(c enumColumn) bool { return c.oid == oid }) && !slices.Contains(tables, r.name) {
			tables = append(tables, r.name)
		}
	}
	slices.Sort(tables)
	for _, table := range tables {
		rw := rewrite{table: table, at: lsn, enum: typ,
			inexact: why + ", and no event trigger notice says where in the stream: run capture as a superuser, whose trigger reports renames so that the tables are copied again"}
		if err := t.tables.rewritten(ctx, rw); err != nil {
			return err
		}
	}
	return nil
}

// unknownLabel returns the first value of text (an enum value, or an
// array of them) that labels lack. An array it cannot read is left alone:
// the check must not stop the stream.
func unknownLabel(labels map[string]bool, text string, array bool) (string, bool) {
	if !array {
		if labels[text] {
			return "", false
		}
		return text, true
	}
	elems, err := schema.ParseArrayText(text)
	if err != nil {
		return "", false
	}
	for _, e := range elems {
		if e != nil && !labels[*e] {
			return *e, true
		}
	}
	return "", false
}

// renamedLabel says why labels read now (in their order), compared with
// those read before and with value, a value a change carried that before
// lacked, show a rename: value is no label now (renamed since the change
// was written), or a label read before is gone. "" when they show none
// (labels were added).
func renamedLabel(before map[string]bool, now []string, value string) string {
	if !slices.Contains(now, value) {
		return fmt.Sprintf("enum value %q is no label of the enum any more: it was renamed (ALTER TYPE ... RENAME VALUE) after the change was written", value)
	}
	var gone []string
	for l := range before {
		if !slices.Contains(now, l) {
			gone = append(gone, l)
		}
	}
	if len(gone) == 0 {
		return ""
	}
	slices.Sort(gone)
	return fmt.Sprintf("enum label %q is gone: it was renamed (ALTER TYPE ... RENAME VALUE)", gone[0])
}

// labelSet returns labels as a set.
func labelSet(labels []string) map[string]bool {
	s := make(map[string]bool, len(labels))
	for _, l := range labels {
		s[l] = true
	}
	return s
}
