package schema

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/walhouse/walhouse/record"
)

// A layout may store a PostgreSQL enum column as a ClickHouse Enum8 or
// Enum16 (ColumnLayout), built from the labels capture reads from pg_enum
// (record.Column.Labels).
//
// Numbers: a new column numbers the labels 1..n in PostgreSQL's order
// (pg_enum.enumsortorder), so ClickHouse sorts the column as PostgreSQL
// sorts the enum. A label added later (ALTER TYPE ... ADD VALUE) keeps
// every existing label's number, which ClickHouse forbids changing, and
// gets the next free number: one added at the end sorts last in both,
// one added BEFORE or AFTER another sorts last in ClickHouse only.
// (Renumbering would rewrite every part of the column.) The numbers are
// read back from the ClickHouse column each time, so every sink and every
// restart agrees on them.
//
// A label renamed in PostgreSQL (ALTER TYPE ... RENAME VALUE) is renamed
// in the column too, keeping its number (reconcileEnum), so the rows
// ClickHouse holds read the new name, as PostgreSQL's do.

// Enum widths: the most labels each holds numbered from 1.
const (
	enum8Max  = 127
	enum16Max = 32767
)

// enumLabel is one label of a ClickHouse Enum and its number.
type enumLabel struct {
	name  string
	value int
}

// enumOverride returns the type of an enum column c under an Enum8,
// Enum16 or Enum override (bits 8, 16 or 0: the narrower that holds c's
// labels), numbered 1..n in PostgreSQL's order.
func enumOverride(c record.Column, bits int, nullable bool) (Type, error) {
	switch {
	case !c.Enum || c.Array:
		return Type{}, fmt.Errorf("%s is %s, not a PostgreSQL enum; Enum8 and Enum16 are for enum columns (LowCardinality(String) is for text)", c.Name, pgTypeName(c))
	case len(c.Labels) == 0:
		return Type{}, fmt.Errorf("%s: its records carry no enum labels, which capture adds only for enum columns its layout stores as Enum8 or Enum16: give capture the same layout as the sink (one configuration file), and restart capture", c.Name)
	}
	n := len(c.Labels)
	if bits == 0 {
		bits = 8
		if n > enum8Max {
			bits = 16
		}
	}
	switch {
	case bits == 8 && n > enum8Max:
		return Type{}, fmt.Errorf("%s: enum %s has %d labels, more than the %d an Enum8 holds: use Enum16 (or Enum, the narrower that fits) or LowCardinality(String)", c.Name, c.Type, n, enum8Max)
	case n > enum16Max:
		return Type{}, fmt.Errorf("%s: enum %s has %d labels, more than the %d an Enum16 holds: use LowCardinality(String)", c.Name, c.Type, n, enum16Max)
	}
	labels := make([]enumLabel, 0, n)
	var unread []string
	for i, l := range c.Labels {
		if readable(l) {
			labels = append(labels, enumLabel{name: l, value: i + 1})
		} else {
			unread = append(unread, l)
		}
	}
	if len(labels) == 0 {
		return Type{}, fmt.Errorf("%s: no label of enum %s can be an Enum label walhouse reads back (every one has a quote, a backslash or a control character): use LowCardinality(String)", c.Name, c.Type)
	}
	t := newEnumType(bits, labels, nullable)
	t.enumUnread = unread
	return t, nil
}

// readable reports whether label can be a label of walhouse's Enum
// columns. ClickHouse writes a column's type with ', \ and control
// characters escaped, and clickhouse-go (v2.50.0) misreads every label
// after an escaped one when it builds an insert, which would fail every
// insert of the table. Such a label is left out of the column (its
// number stays taken, so a later fix can add it), and a value of it fails
// its record, which goes to the dead letters naming LowCardinality(String).
func readable(label string) bool {
	for i := 0; i < len(label); i++ {
		if c := label[i]; c == '\'' || c == '\\' || c < 0x20 || c == 0x7f {
			return false
		}
	}
	return true
}

func pgTypeName(c record.Column) string {
	if c.Array {
		return c.Type + "[]"
	}
	return c.Type
}

// newEnumType builds an Enum type of labels.
func newEnumType(bits int, labels []enumLabel, nullable bool) Type {
	t := Type{kind: kEnum, enumBits: bits, enum: labels, enumIndex: make(map[string]int, len(labels))}
	var b strings.Builder
	fmt.Fprintf(&b, "Enum%d(", bits)
	for i, l := range labels {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(QuoteString(l.name))
		b.WriteString(" = ")
		b.WriteString(strconv.Itoa(l.value))
		t.enumIndex[l.name] = l.value
	}
	b.WriteByte(')')
	t.DDL = b.String()
	if nullable {
		t.DDL = "Nullable(" + t.DDL + ")"
	}
	return t
}

// enumValue checks that s is a label of the ClickHouse column's Enum
// (clickhouse-go appends labels by name). A value it lacks fails its
// record, which goes to the dead letters, rather than the whole insert.
func enumValue(t Type, s string) (string, bool, error) {
	if _, ok := t.enumIndex[s]; ok {
		return s, true, nil
	}
	if renamed, ok := t.enumAlias[s]; ok {
		return renamed, true, nil // a label of an older shape, renamed since
	}
	if !readable(s) {
		return "", false, fmt.Errorf("enum value %q has a quote, a backslash or a control character, which walhouse does not put in a ClickHouse Enum (its client misreads such labels): store the column as LowCardinality(String)", truncate(s))
	}
	return "", false, fmt.Errorf("enum value %q is not a label of the ClickHouse column's Enum%d (%d labels): the enum gained it in a way walhouse could not follow (see docs/shaping-tables.md, Enums); store the column as LowCardinality(String) to take any label", truncate(s), t.enumBits, len(t.enum))
}

// parseEnum reads the inside of an Enum8 or Enum16 type as ClickHouse
// writes it, "Enum8('a' = 1, 'b\'c' = 2)", into a Type.
func parseEnum(ddl string) (Type, bool) {
	var bits int
	var rest string
	switch {
	case strings.HasPrefix(ddl, "Enum8("):
		bits, rest = 8, ddl[len("Enum8("):]
	case strings.HasPrefix(ddl, "Enum16("):
		bits, rest = 16, ddl[len("Enum16("):]
	default:
		return Type{}, false
	}
	var labels []enumLabel
	seen := map[string]bool{}
	for {
		rest = strings.TrimLeft(rest, " ")
		if !strings.HasPrefix(rest, "'") {
			return Type{}, false
		}
		var name strings.Builder
		i := 1
		for ; i < len(rest) && rest[i] != '\''; i++ {
			if rest[i] == '\\' && i+1 < len(rest) {
				i += unescape(&name, rest[i+1:])
				continue
			}
			name.WriteByte(rest[i])
		}
		if i >= len(rest) {
			return Type{}, false
		}
		rest = strings.TrimLeft(rest[i+1:], " ")
		if !strings.HasPrefix(rest, "=") {
			return Type{}, false
		}
		rest = strings.TrimLeft(rest[1:], " ")
		n := strings.IndexAny(rest, ",)")
		if n < 0 {
			return Type{}, false
		}
		v, err := strconv.Atoi(strings.TrimSpace(rest[:n]))
		if err != nil || seen[name.String()] {
			return Type{}, false
		}
		seen[name.String()] = true
		labels = append(labels, enumLabel{name: name.String(), value: v})
		if rest[n] == ')' {
			if n+1 != len(rest) {
				return Type{}, false
			}
			break
		}
		rest = rest[n+1:]
	}
	return newEnumType(bits, labels, false), true
}

// errEnumRenamed is reconcileEnum's error for labels renamed in a way it
// cannot follow.
var errEnumRenamed = errors.New("enum labels were renamed")

// reconcileEnum decides how an Enum column of type have serves a source
// column whose labels are want's (see the numbering rule above); newer
// tells whether want's shape is newer than the column's last rename
// (PlanEvolution knows it from the column's comment):
//   - want's labels are have's or fewer (records of an older shape): keep
//     have;
//   - want adds labels (ALTER TYPE ... ADD VALUE): have's labels with their
//     numbers, then the new ones numbered from have's highest + 1 in
//     PostgreSQL's order, as wide as have or want, whichever is wider
//     (alter);
//   - one label of have is gone and one label is new (ALTER TYPE ...
//     RENAME VALUE; PostgreSQL never drops a label, so a label that is
//     gone was renamed): a newer shape renames it in the column, keeping
//     its number (renamed, alter), which ClickHouse does in its metadata
//     alone, so the rows it holds read the new name as PostgreSQL's do;
//     an older shape keeps have and loads the old name as the new one;
//   - more labels gone and new at once: which became which is not known
//     (errEnumRenamed).
//
// A label gone without a new one is taken for an older shape, even in a
// newer one: an initial copy's records may carry labels the stream's
// first records do not, and stopping the table for that would be wrong.
// (It is also what a label renamed to one left out looks like, see
// readable: rows with the new name then go to the dead letters.)
//
// PlanEvolution notes every change of an Enum column's labels in its
// comment, so that a shape is newer only than the column's last change.
func reconcileEnum(have, want Type, newer bool) (use Type, alter, renamed bool, err error) {
	var gone, added []string
	for _, l := range have.enum {
		if _, ok := want.enumIndex[l.name]; !ok && readable(l.name) {
			gone = append(gone, l.name)
		}
	}
	for _, l := range want.enum { // readable labels only
		if _, ok := have.enumIndex[l.name]; !ok {
			added = append(added, l.name)
		}
	}
	switch {
	case len(gone) == 1 && len(added) == 1 && !newer:
		use = have
		use.enumAlias = map[string]string{added[0]: gone[0]}
		return use, false, false, nil
	case len(gone) == 1 && len(added) == 1:
		labels := slices.Clone(have.enum)
		for i := range labels {
			if labels[i].name == gone[0] {
				labels[i].name = added[0]
			}
		}
		return newEnumType(max(have.enumBits, want.enumBits), labels, have.nullable()), true, true, nil
	case len(gone) > 0 && len(added) > 0:
		return Type{}, false, false, fmt.Errorf("%w: the ClickHouse column's %s has labels %q that the PostgreSQL enum no longer has, and the enum has %q instead (ALTER TYPE ... RENAME VALUE), more than one at once, so which became which is not known", errEnumRenamed, have.DDL, gone, added)
	case len(added) == 0 && want.enumBits <= have.enumBits:
		return have, false, false, nil
	}
	labels := slices.Clone(have.enum)
	next := 0
	for _, l := range labels {
		next = max(next, l.value)
	}
	for _, name := range added {
		next++
		labels = append(labels, enumLabel{name: name, value: next})
	}
	bits := max(have.enumBits, want.enumBits)
	if limit := map[int]int{8: enum8Max, 16: enum16Max}[bits]; next > limit {
		return Type{}, false, false, fmt.Errorf("the PostgreSQL enum gained labels %q, which would number up to %d, beyond the %d an Enum%d holds: change the column's override to Enum16 (walhouse widens the column, keeping every label's number) or LowCardinality(String)", added, next, limit, bits)
	}
	return newEnumType(bits, labels, have.nullable()), true, false, nil
}
