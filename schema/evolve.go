package schema

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/walhouse/walhouse/record"
)

// ExistingColumn is a column of the ClickHouse table as it is, as
// system.columns shows it.
type ExistingColumn struct {
	Name    string
	Type    string // e.g. "Nullable(Int32)"
	Comment string // walhouse's notes on the column (see columnComment)
	// InSortingKey is system.columns' is_in_sorting_key (ReadColumns).
	InSortingKey bool
	// InPartitionKey is system.columns' is_in_partition_key: the query
	// API merges FINAL across partitions when a partition column is
	// outside the sorting key.
	InPartitionKey bool
}

// Plan is what it takes to bring an existing ClickHouse table to the shape
// of a record's columns, and where that shape's values then go. It is
// computed by PlanEvolution and executed, in order, by package clickhouse.
type Plan struct {
	Table *Table
	// Columns says, for each of Table.Columns in order, which ClickHouse
	// column receives its values and the type they are converted for: a
	// column renamed by a newer shape keeps its new name, and a column
	// wider than the source's type keeps its width.
	Columns []Target
	// Changes are the statements to run, in order. Empty when the table
	// already has the shape.
	Changes []Change
}

// Target is the ClickHouse column that receives a source column's values.
type Target struct {
	Name string
	Type Type
}

// Op is what a Change does.
type Op uint8

// The changes a plan is made of.
const (
	// AddColumn adds a column new in the source, with the value PostgreSQL
	// gives older rows as its default where ClickHouse can express it.
	AddColumn Op = iota + 1
	// RenameColumn follows a RENAME COLUMN, found by attnum.
	RenameColumn
	// NoteColumn records the source column's attnum and the shape's LSN in
	// the column's comment (after a rename, or on a column created before
	// its attnum was known), so later renames can be followed.
	NoteColumn
	// WidenColumn widens a column to a type that holds every old value.
	WidenColumn
	// MarkDropped marks a column whose source column was dropped; the
	// column and its history stay.
	MarkDropped
)

// String returns what the change did, for the log.
func (o Op) String() string {
	switch o {
	case AddColumn:
		return "added column"
	case RenameColumn:
		return "renamed column"
	case NoteColumn:
		return "noted column's source"
	case WidenColumn:
		return "widened column"
	case MarkDropped:
		return "column dropped in PostgreSQL; kept with its history"
	}
	return "op " + strconv.Itoa(int(o))
}

// Change is one step of a Plan.
type Change struct {
	Op Op
	// Column is the ClickHouse column the change leaves behind (a renamed
	// column's new name).
	Column string
	// From and To describe the change: the old and new name of a rename,
	// the old and new type of a widening, the type of an added column.
	From, To string
	// SQL is the statement that makes the change: on one server to the
	// table, on a cluster ON CLUSTER to the local tables.
	SQL string
	// Distributed is, on a cluster, the same change to the Distributed
	// table, run after SQL so that it never has a column its local tables
	// lack; empty on one server.
	Distributed string
	// Warning says what the change cannot carry over from PostgreSQL (an
	// added column's default older rows cannot be given), or is empty.
	Warning string
}

// IncompatibleError is a source schema change walhouse cannot apply to its
// ClickHouse table. Loading the table must stop (other tables go on) until
// an operator resolves it as Fix says.
type IncompatibleError struct {
	Table  string // quoted database.table
	Column string // the ClickHouse column concerned
	Err    error  // what is incompatible
	Fix    string // what the operator does
}

// Error names the table, the cause and the fix.
func (e *IncompatibleError) Error() string {
	return fmt.Sprintf("table %s: %v; to resolve: %s", e.Table, e.Err, e.Fix)
}

// Unwrap returns the cause.
func (e *IncompatibleError) Unwrap() error { return e.Err }

// PlanEvolution computes the plan that brings the ClickHouse table, whose
// columns are have (in the table's order), to the shape of t, the shape of
// records first seen at lsn:
//   - a column new in the source is added;
//   - a column renamed in PostgreSQL (same attnum, new name) is renamed,
//     but only by a shape newer than the column's last rename, so records
//     of an older shape still arriving from another partition map to the
//     renamed column instead of renaming it back;
//   - a column whose type widened is widened, one that narrowed is kept;
//     a column whose type the table's layout overrides (Column.Override)
//     is never widened: it keeps its type, or is incompatible;
//   - a column that disappeared from the source is marked dropped in its
//     comment but kept, with its history.
//
// On a cluster, have must be the Distributed table's columns: its changes
// follow those of the local tables, so a plan cut short by a crash is
// planned again from where the Distributed table is, and every statement
// repeats harmlessly on local tables that are ahead (IF NOT EXISTS, IF
// EXISTS, the same type or comment again).
//
// A change no ClickHouse column can follow without loss (boolean to
// integer, a rename onto an existing name, a column of a type walhouse did
// not create) is an *IncompatibleError.
func PlanEvolution(t *Table, have []ExistingColumn, lsn record.LSN) (*Plan, error) {
	cols := make([]*existing, len(have))
	byName := map[string]*existing{}
	byAttnum := map[int16]*existing{}
	for i, h := range have {
		c := &existing{name: h.Name, typ: h.Type}
		c.attnum, c.lsn, c.dropped = parseColumnComment(h.Comment)
		cols[i], byName[c.name] = c, c
		if _, dup := byAttnum[c.attnum]; c.attnum > 0 && !dup {
			byAttnum[c.attnum] = c
		}
	}
	p := &Plan{Table: t, Columns: make([]Target, len(t.Columns))}
	seen := map[int16]bool{}
	for i, c := range t.Columns {
		cur := byName[c.Name]
		if c.Source.Attnum > 0 {
			seen[c.Source.Attnum] = true
			if byNum, ok := byAttnum[c.Source.Attnum]; ok {
				cur = byNum
			}
		}
		switch {
		case cur == nil:
			p.add(c, lsn)
			p.Columns[i] = Target{Name: c.Name, Type: c.Type}
			continue
		case cur.name != c.Name && lsn > cur.lsn:
			if _, taken := byName[c.Name]; taken {
				return nil, p.incompatible(cur.name, fmt.Errorf("column %s was renamed to %s in PostgreSQL, but %s already has a column %s", cur.name, c.Name, t.QualifiedName(), c.Name))
			}
			p.rename(cur.name, c.Name)
			p.note(c.Name, columnComment(c.Source.Attnum, lsn))
			delete(byName, cur.name)
			cur.name, cur.lsn = c.Name, lsn
			byName[c.Name] = cur
		}
		if cur.attnum == 0 && c.Source.Attnum > 0 {
			// Created before its number was known: note it now, so a later
			// rename can be followed.
			p.note(cur.name, columnComment(c.Source.Attnum, lsn))
			cur.attnum, cur.lsn = c.Source.Attnum, lsn
		}
		haveType, ok := parseType(cur.typ)
		if !ok {
			return nil, p.incompatible(cur.name, fmt.Errorf("column %s is %s, a type walhouse did not create", cur.name, cur.typ))
		}
		use, alter, err := reconcile(haveType, c.Type)
		if haveType.kind == kEnum && c.Type.kind == kEnum {
			// A label renamed in PostgreSQL: only a shape newer than the
			// column's last rename renames it, so records of an older shape
			// still arriving load the old name as the new one.
			use, alter, _, err = reconcileEnum(haveType, c.Type, lsn > cur.lsn)
		}
		if err == nil && alter && c.Override != "" && !(haveType.kind == kEnum && c.Type.kind == kEnum) {
			// The layout chose the column's type: a column of another
			// type (made before the override) is not changed behind it.
			// An Enum gains the labels its enum gained (reconcileEnum).
			err = fmt.Errorf("ClickHouse column is %s, not the %s its layout gives it, and cannot hold every value of it; walhouse changes no column whose type a layout overrides", haveType.DDL, c.Type.DDL)
		}
		if err != nil {
			return nil, p.incompatible(cur.name, fmt.Errorf("column %s: %w", cur.name, err))
		}
		if alter {
			p.widen(cur.name, cur.typ, use.DDL)
			cur.typ = use.DDL
		}
		if alter && haveType.kind == kEnum && c.Type.kind == kEnum && c.Source.Attnum > 0 {
			// Noted, so that a shape older than the change is known as one
			// (reconcileEnum).
			p.note(cur.name, columnComment(c.Source.Attnum, lsn))
			cur.lsn = lsn
		}
		p.Columns[i] = Target{Name: cur.name, Type: use}
	}
	for _, c := range cols {
		if c.attnum > 0 && !seen[c.attnum] && !c.dropped && lsn > c.lsn {
			p.Changes = append(p.Changes, p.change(Change{Op: MarkDropped, Column: c.name}, p.commentAction(c.name, droppedComment(c.attnum, lsn))))
		}
	}
	return p, nil
}

// existing is an ExistingColumn with walhouse's notes read, as the plan
// changes it.
type existing struct {
	name, typ string
	attnum    int16
	lsn       record.LSN // when walhouse last named the column
	dropped   bool
}

func (p *Plan) add(c Column, lsn record.LSN) {
	ch := Change{Op: AddColumn, Column: c.Name, To: c.Type.DDL}
	def := ""
	if c.Source.Missing != nil {
		var ok bool
		if def, ok = defaultClause(c.Type, *c.Source.Missing); !ok {
			ch.Warning = "added column's default cannot be given to older rows; they read NULL"
		}
	}
	p.Changes = append(p.Changes, p.change(ch, fmt.Sprintf("ADD COLUMN IF NOT EXISTS %s %s%s%s", QuoteIdent(c.Name), c.Type.DDL, def, columnComment(c.Source.Attnum, lsn))))
}

func (p *Plan) rename(from, to string) {
	ifExists := ""
	if p.Table.Placement().OnCluster() {
		ifExists = "IF EXISTS " // the local tables may be renamed already: see PlanEvolution
	}
	p.Changes = append(p.Changes, p.change(Change{Op: RenameColumn, Column: to, From: from, To: to},
		fmt.Sprintf("RENAME COLUMN %s%s TO %s", ifExists, QuoteIdent(from), QuoteIdent(to))))
}

func (p *Plan) note(column, comment string) {
	p.Changes = append(p.Changes, p.change(Change{Op: NoteColumn, Column: column}, p.commentAction(column, comment)))
}

func (p *Plan) widen(column, from, to string) {
	p.Changes = append(p.Changes, p.change(Change{Op: WidenColumn, Column: column, From: from, To: to},
		fmt.Sprintf("MODIFY COLUMN %s %s", QuoteIdent(column), to)))
}

// change returns c with the statements of an ALTER TABLE action on the
// plan's table (see Placement.Alter).
func (p *Plan) change(c Change, action string) Change {
	stmts := p.Table.Placement().Alter(p.Table.Name, action)
	c.SQL = stmts[0]
	if len(stmts) > 1 {
		c.Distributed = stmts[1]
	}
	return c
}

// commentAction sets a column's comment; comment is a COMMENT clause.
func (p *Plan) commentAction(column, comment string) string {
	return fmt.Sprintf("COMMENT COLUMN %s%s", QuoteIdent(column), strings.TrimPrefix(comment, " COMMENT"))
}

func (p *Plan) incompatible(column string, err error) *IncompatibleError {
	t := p.Table
	return &IncompatibleError{
		Table:  t.QualifiedName(),
		Column: column,
		Err:    err,
		Fix: fmt.Sprintf("either change the ClickHouse column by hand (%s) so it holds the new values, "+
			"or drop the table (%s) and copy it again with `walhouse capture --resnapshot %s.%s`; then restart the sink",
			strings.Join(t.Placement().Alter(t.Name, "..."), ", then "), strings.Join(t.Placement().Drop(t.Name), ", then "), t.Source.Schema, t.Source.Table),
	}
}

// Failed returns the error of change c whose statement failed with err.
// ClickHouse refusing a rename (of a sort-key column) or a widening leaves
// the table unable to take the new shape: an *IncompatibleError, whose fix
// for a column the layout sorts or partitions by is a relayout. Any other
// failure is an error worth a retry.
func (p *Plan) Failed(c Change, err error) error {
	switch c.Op {
	case RenameColumn:
		return p.incompatible(c.From, fmt.Errorf("rename column %s to %s: %w (ClickHouse cannot rename sort-key columns)", c.From, c.To, err))
	case WidenColumn:
		ie := p.incompatible(c.Column, fmt.Errorf("widen column %s from %s to %s: %w", c.Column, c.From, c.To, err))
		if t := p.Table; slices.Contains(t.keyColumns(), c.Column) {
			// No ALTER changes a key column's type; a relayout builds the
			// table with it (PlanRetype).
			ie.Fix = fmt.Sprintf("run `walhouse relayout %s.%s` (or start the sink with --relayout): ClickHouse changes the type of no column a table sorts or partitions by, and the relayout builds the table again with the new type; "+
				"or drop the table (%s) and copy it again with `walhouse capture --resnapshot %s.%s`; then restart the sink",
				t.Source.Schema, t.Source.Table, strings.Join(t.Placement().Drop(t.Name), ", then "), t.Source.Schema, t.Source.Table)
		}
		return ie
	case AddColumn:
		return fmt.Errorf("add column %s to %s: %w", c.Column, p.Table.QualifiedName(), err)
	}
	return fmt.Errorf("comment column %s of %s: %w", c.Column, p.Table.QualifiedName(), err)
}

// String lists the plan: where each source column goes, then the
// statements.
func (p *Plan) String() string {
	var b strings.Builder
	for i, c := range p.Table.Columns {
		fmt.Fprintf(&b, "-- %s → %s %s\n", c.Name, p.Columns[i].Name, p.Columns[i].Type.DDL)
	}
	for _, c := range p.Changes {
		if c.Warning != "" {
			fmt.Fprintf(&b, "-- warning: %s: %s\n", c.Column, c.Warning)
		}
		fmt.Fprintf(&b, "%s;\n", c.SQL)
		if c.Distributed != "" {
			fmt.Fprintf(&b, "%s;\n", c.Distributed)
		}
	}
	return b.String()
}

// defaultClause returns the DEFAULT clause that gives rows older than an
// added column the value PostgreSQL gives them (its "missing" value).
// ClickHouse computes a new column's default for parts written before it,
// so old rows read the same on both sides. ok is false for types whose text
// cannot be written as a ClickHouse literal (arrays); those old rows read
// NULL.
func defaultClause(t Type, text string) (string, bool) {
	if t.array {
		return "", false
	}
	v, err := t.Convert(text)
	if err != nil {
		return "", false
	}
	var lit string
	switch x := v.(type) {
	case nil:
		return "", false
	case string:
		lit = x
	case bool:
		lit = strconv.FormatBool(x)
	case time.Time:
		lit = x.UTC().Format("2006-01-02 15:04:05.000000")
	default:
		lit = fmt.Sprint(x)
	}
	return fmt.Sprintf(" DEFAULT CAST(%s AS %s)", QuoteString(lit), t.DDL), true
}
