package schema

import (
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"github.com/walhouse/walhouse/record"
)

// Layout is a table's shape chosen by its user (the configuration file's
// layout key, docs/shaping-tables.md) instead of walhouse's default: the
// sorting key, the partitioning and MergeTree settings. The zero Layout is
// the default shape.
//
// ReplacingMergeTree collapses the versions of a row by sorting key within
// a partition, so every column OrderBy and PartitionBy name is, for
// walhouse, part of the row's position: capture turns an update that
// changes one into a tombstone at the old position and the row at the new
// one, as for a primary-key change, which needs the old values in the
// replica identity (Columns lists them for capture's check).
type Layout struct {
	// OrderBy is the sorting key: the tenant column first (reads, erasure
	// and verify find the tenant there), then any columns, among them
	// every primary-key column. Empty: tenant, then primary key.
	OrderBy []string `json:"order_by,omitempty"`
	// PartitionBy is a partition expression over the table's columns,
	// built from the functions of PartitionFunctions only (see
	// CheckPartitionExpr). Empty: walhouse's default partitioning.
	PartitionBy string `json:"partition_by,omitempty"`
	// Settings are MergeTree settings of the table, name to value; the
	// ones walhouse relies on are refused (reservedSettings).
	// index_granularity here replaces Options.IndexGranularity.
	Settings map[string]string `json:"settings,omitempty"`
	// ExcludeColumns are source columns that never leave PostgreSQL:
	// capture reads them neither in copies nor in the stream, so they
	// reach neither Kafka nor ClickHouse. A key, tenant or sorting column
	// cannot be excluded.
	ExcludeColumns []string `json:"exclude_columns,omitempty"`
	// Columns override the ClickHouse type of some columns, by name
	// (ColumnLayout).
	Columns map[string]ColumnLayout `json:"columns,omitempty"`
}

// ColumnLayout is the ClickHouse type a user chose for one column instead
// of walhouse's mapping (Map). The overrides and the columns they apply
// to:
//
//   - LowCardinality(String): text, varchar, char, citext, enums: the same
//     values, stored as a dictionary;
//   - Decimal(P, S), String or Float64: numeric. A value that Decimal(P, S)
//     cannot hold exactly (more than P-S digits before the point, or more
//     than S after it: never rounded) fails its record, which goes to the
//     dead letters (on_overflow dead_letter), or, beyond the range only,
//     is clamped to the bound (on_overflow clamp).
//     Float64 is approximate by choice: a numeric is stored as the
//     nearest double; one beyond its range fails its record. String keeps
//     PostgreSQL's text.
//   - DateTime64(P), 0 <= P <= 6: timestamp and timestamptz with P
//     fractional digits, the rest of the fraction truncated (towards the
//     earlier time), never rounded up;
//   - Enum8, Enum16 or Enum (the narrower that holds the labels): a
//     PostgreSQL enum, as a ClickHouse Enum built from its labels, which
//     capture reads from pg_enum (enum.go: numbering, added and renamed
//     labels);
//   - JSON: json and jsonb, as ClickHouse's JSON type (server 25.3+),
//     read by path. Only objects fit it: a value that is a scalar or an
//     array at its top level, or that the type cannot hold as it is (a
//     path given twice, a number beyond Int64, UInt64 and Float64), fails
//     its record, which goes to the dead letters, like an overflow.
//
// Key, tenant and sorting columns keep walhouse's mapping: tombstones and
// lookups bind their values by it.
type ColumnLayout struct {
	// Type is the override: LowCardinality(String), Decimal(P, S), String,
	// Float64, DateTime64(P), JSON, Enum8, Enum16 or Enum.
	Type string `json:"type"`
	// OnOverflow is what happens to a value the type cannot hold:
	// dead_letter (the default) fails its record, which goes to the dead
	// letters; clamp, for Decimal(P, S) only, stores a value beyond the
	// range (more than P-S digits before the point, or an infinity) as the
	// type's bound of its sign, counted by the sink
	// (walhouse_sink_values_clamped_total). A value within the range with
	// more than S decimals still fails its record under clamp: nothing is
	// ever rounded.
	OnOverflow string `json:"on_overflow,omitempty"`
}

// IsZero reports whether l is the default shape.
func (l Layout) IsZero() bool {
	return len(l.OrderBy) == 0 && l.PartitionBy == "" && len(l.Settings) == 0 && len(l.ExcludeColumns) == 0 && len(l.Columns) == 0
}

// Excludes reports whether l excludes the source column name.
func (l Layout) Excludes(name string) bool { return slices.Contains(l.ExcludeColumns, name) }

// SortColumns returns the columns l names in its sorting key and partition
// expression, in that order, each once: the columns whose change moves a
// row in ClickHouse.
func (l Layout) SortColumns() []string {
	var out []string
	for _, c := range l.OrderBy {
		if !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	refs, _ := partitionRefs(l.PartitionBy)
	for _, c := range refs {
		if !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	return out
}

// Check returns every problem of l that needs no table to find: empty or
// repeated sorting-key columns, a partition expression outside the
// allowed functions, settings that are malformed or reserved. Columns
// that must exist, the tenant and the primary key are checked against
// the table (NewTable, and capture at the table's Relation message).
func (l Layout) Check() error {
	var errs []error
	seen := map[string]bool{}
	for _, c := range l.OrderBy {
		switch {
		case strings.TrimSpace(c) == "":
			errs = append(errs, errors.New("order_by: a column name is empty"))
		case seen[c]:
			errs = append(errs, fmt.Errorf("order_by: column %q is given twice", c))
		}
		seen[c] = true
	}
	if l.PartitionBy != "" {
		if err := CheckPartitionExpr(l.PartitionBy); err != nil {
			errs = append(errs, fmt.Errorf("partition_by: %w", err))
		}
	}
	excluded := map[string]bool{}
	for _, c := range l.ExcludeColumns {
		switch {
		case strings.TrimSpace(c) == "":
			errs = append(errs, errors.New("exclude_columns: a column name is empty"))
		case excluded[c]:
			errs = append(errs, fmt.Errorf("exclude_columns: column %q is given twice", c))
		case slices.Contains(l.SortColumns(), c):
			errs = append(errs, fmt.Errorf("exclude_columns: column %q is in order_by or partition_by; a column ClickHouse sorts or partitions by cannot be left out", c))
		}
		excluded[c] = true
	}
	for _, name := range slices.Sorted(maps.Keys(l.Columns)) {
		o := l.Columns[name]
		k, _, err := overrideShape(o.Type)
		if err != nil {
			errs = append(errs, fmt.Errorf("columns: %s: %w", name, err))
		}
		switch o.OnOverflow {
		case "", "dead_letter":
		case "clamp":
			if err == nil && k != kDecimal {
				errs = append(errs, fmt.Errorf("columns: %s: on_overflow clamp is for Decimal(P, S) overrides, not %s; use dead_letter (the default)", name, o.Type))
			}
		default:
			errs = append(errs, fmt.Errorf("columns: %s: on_overflow %q is not allowed; want dead_letter or, for Decimal(P, S), clamp", name, o.OnOverflow))
		}
		switch {
		case excluded[name]:
			errs = append(errs, fmt.Errorf("columns: %s is in exclude_columns too; an excluded column has no type to override: keep one of the two", name))
		case slices.Contains(l.SortColumns(), name):
			errs = append(errs, fmt.Errorf("columns: %s is in order_by or partition_by, whose columns keep walhouse's mapping (tombstones find rows by it): remove its override", name))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(l.Settings)) {
		v := l.Settings[name]
		switch {
		case !settingName.MatchString(name):
			errs = append(errs, fmt.Errorf("settings: %q is not a setting name (lower-case letters, digits and _)", name))
		case reservedSettings[name] != "":
			errs = append(errs, fmt.Errorf("settings: %s is walhouse's: %s", name, reservedSettings[name]))
		case !settingValue.MatchString(v):
			errs = append(errs, fmt.Errorf("settings: %s = %q is not a number or a word (letters, digits, _ and -)", name, v))
		}
	}
	return errors.Join(errs...)
}

var (
	settingName  = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)
	settingValue = regexp.MustCompile(`^(-?[0-9]+(\.[0-9]+)?|[A-Za-z_][A-Za-z0-9_-]*)$`)
)

// reservedSettings are the table settings walhouse sets itself, with why
// a layout may not change them.
var reservedSettings = map[string]string{
	"non_replicated_deduplication_window": "its window of insert tokens makes a repeated batch a no-op (Layer 3)",
	"replicated_deduplication_window":     "its window of insert tokens makes a repeated batch a no-op (Layer 3)",
	"allow_nullable_key":                  "walhouse sets it when a sorting or partition column is nullable",
	// A merge that drops tombstones on its own would let a replayed older
	// version of a deleted row come back: only walhouse cleanup, past its
	// horizon, may (docs/operations.md, Deleted rows).
	"allow_experimental_replacing_merge_with_cleanup":                "cleanup merges run only under walhouse cleanup's horizon",
	"enable_replacing_merge_with_cleanup_for_min_age_to_force_merge": "cleanup merges run only under walhouse cleanup's horizon",
	"clean_deleted_rows": "cleanup merges run only under walhouse cleanup's horizon",
}

// PartitionFunctions are the functions a layout's partition expression
// may call: deterministic functions of their arguments that map many rows
// to one partition (time buckets, hashes, arithmetic). Anything else
// (now(), rand(), dictionaries, subqueries) would place versions of one
// row in partitions that depend on when they were written, where FINAL
// never collapses them.
var PartitionFunctions = []string{
	"toYYYYMM", "toYYYYMMDD", "toYear", "toMonth", "toDate", "toDate32", "toMonday",
	"toStartOfDay", "toStartOfWeek", "toStartOfMonth", "toStartOfQuarter", "toStartOfYear",
	"toString", "cityHash64", "sipHash64", "xxHash64", "murmurHash3_32", "intDiv", "modulo", "lower",
}

// CheckPartitionExpr checks that expr is a partition expression a layout
// may use: column names (plain or back-quoted), whole numbers, the
// functions of PartitionFunctions, + - * / %, parentheses and commas.
func CheckPartitionExpr(expr string) error {
	refs, err := partitionRefs(expr)
	if err != nil {
		return err
	}
	if len(refs) == 0 {
		return fmt.Errorf("%q names no column: a constant partitions nothing", expr)
	}
	return nil
}

// partitionRefs returns the columns expr refers to, checking its tokens
// and that its parentheses balance.
func partitionRefs(expr string) ([]string, error) {
	var refs []string
	depth := 0
	s := expr
	operand := false // the last token ends an operand: a name, a number or )
	next := func(isOperand bool) error {
		if isOperand && operand {
			return fmt.Errorf("%q: two names or numbers in a row; want an operator or a comma between them", expr)
		}
		operand = isOperand
		return nil
	}
	for {
		s = strings.TrimLeft(s, " \t\n")
		if s == "" {
			break
		}
		switch c := s[0]; {
		case c == '(':
			if operand {
				return nil, fmt.Errorf("%q: a ( after a name or number that is not a function", expr)
			}
			depth++
			s = s[1:]
		case c == ')':
			if depth--; depth < 0 {
				return nil, fmt.Errorf("%q: a ) without its (", expr)
			}
			operand = true
			s = s[1:]
		case strings.IndexByte("+-*/%,", c) >= 0:
			operand = false
			s = s[1:]
		case c >= '0' && c <= '9':
			n := strings.IndexFunc(s, func(r rune) bool { return r < '0' || r > '9' })
			if n < 0 {
				n = len(s)
			}
			if err := next(true); err != nil {
				return nil, err
			}
			s = s[n:]
		case c == '`':
			name, rest, err := backquoted(s)
			if err != nil {
				return nil, fmt.Errorf("%q: %w", expr, err)
			}
			if err := next(true); err != nil {
				return nil, err
			}
			refs = appendNew(refs, name)
			s = rest
		case c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
			word, rest := bareWord(s)
			if strings.HasPrefix(strings.TrimLeft(rest, " \t\n"), "(") {
				if !slices.Contains(PartitionFunctions, word) {
					return nil, fmt.Errorf("%q: function %s is not allowed in a partition expression; want one of %s", expr, word, strings.Join(PartitionFunctions, ", "))
				}
				if operand {
					return nil, fmt.Errorf("%q: function %s follows a name or number; want an operator or a comma before it", expr, word)
				}
			} else {
				if err := next(true); err != nil {
					return nil, err
				}
				refs = appendNew(refs, word)
			}
			s = rest
		default:
			return nil, fmt.Errorf("%q: %q is not allowed in a partition expression; want columns, whole numbers, functions, + - * / %% and parentheses", expr, string(c))
		}
	}
	if depth != 0 {
		return nil, fmt.Errorf("%q: a ( without its )", expr)
	}
	return refs, nil
}

// backquoted reads the back-quoted name s starts with (escapes as
// QuoteIdent writes them) and returns it and the rest of s.
func backquoted(s string) (name, rest string, err error) {
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		switch s[i] {
		case '\\':
			if i+1 < len(s) {
				i += unescape(&b, s[i+1:])
			}
		case '`':
			return b.String(), s[i+1:], nil
		default:
			b.WriteByte(s[i])
		}
	}
	return "", "", errors.New("a back-quoted name is not closed")
}

// bareWord splits s, which starts with a letter or _, after its name or
// function name (letters, digits, _).
func bareWord(s string) (word, rest string) {
	n := strings.IndexFunc(s, func(r rune) bool {
		return !(r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9')
	})
	if n < 0 {
		n = len(s)
	}
	return s[:n], s[n:]
}

func appendNew(list []string, s string) []string {
	if slices.Contains(list, s) {
		return list
	}
	return append(list, s)
}

// partitionDDL returns expr with its column names quoted by QuoteIdent,
// as the CREATE TABLE writes it (expr passed CheckPartitionExpr).
func partitionDDL(expr string) string {
	var b strings.Builder
	s := expr
	for s != "" {
		c := s[0]
		switch {
		case c == '`':
			name, rest, err := backquoted(s)
			if err != nil {
				return expr
			}
			b.WriteString(QuoteIdent(name))
			s = rest
		case c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
			word, rest := bareWord(s)
			if strings.HasPrefix(strings.TrimLeft(rest, " \t\n"), "(") {
				b.WriteString(word)
			} else {
				b.WriteString(QuoteIdent(word))
			}
			s = rest
		default:
			b.WriteByte(c)
			s = s[1:]
		}
	}
	return b.String()
}

// settingLiteral writes a setting value that passed Check: a number as
// is, a word as a string literal.
func settingLiteral(v string) string {
	if v != "" && (v[0] == '-' || v[0] >= '0' && v[0] <= '9') {
		return v
	}
	return QuoteString(v)
}

// lowCardinalityTypes are the PostgreSQL types (besides enums) that take
// the override LowCardinality(String): text meant to be read as text, not
// the other types walhouse keeps as their text (json, inet, …), whose
// values are rarely few.
var lowCardinalityTypes = []string{"text", "varchar", "bpchar", "char", "citext"}

// overrideShape reads an override type: its kind, and for a Decimal its
// precision and scale in t.
func overrideShape(ddl string) (k kind, t Type, err error) {
	switch ddl {
	case "LowCardinality(String)":
		return kString, Type{}, nil
	case "String":
		return kString, Type{}, nil
	case "Float64":
		return kFloat64, Type{}, nil
	case "JSON":
		return kJSON, Type{}, nil
	case "Enum8":
		return kEnum, Type{enumBits: 8}, nil
	case "Enum16":
		return kEnum, Type{enumBits: 16}, nil
	case "Enum":
		return kEnum, Type{}, nil // the narrower that holds the labels
	}
	if strings.HasPrefix(ddl, "DateTime64(") {
		p, ok := dateTimeShape(ddl)
		if !ok || p > maxDateTimePrecision || !(strings.HasSuffix(ddl, fmt.Sprintf("(%d)", p)) || strings.HasSuffix(ddl, ", 'UTC')")) {
			return 0, Type{}, fmt.Errorf("%s: want DateTime64(P) or DateTime64(P, 'UTC') with 0 <= P <= %d (PostgreSQL keeps microseconds; values are UTC)", ddl, maxDateTimePrecision)
		}
		return kDateTime, Type{precision: p}, nil
	}
	if p, s, ok := decimalShape(ddl); ok {
		if p < 1 || p > maxDecimalPrecision || s < 0 || s > p {
			return 0, Type{}, fmt.Errorf("%s: want Decimal(P, S) with 1 <= P <= %d and 0 <= S <= P", ddl, maxDecimalPrecision)
		}
		return kDecimal, Type{precision: p, scale: s}, nil
	}
	return 0, Type{}, fmt.Errorf("type %q is not an override walhouse knows; want LowCardinality(String), Decimal(P, S), String, Float64, JSON, DateTime64(P), Enum8, Enum16 or Enum", ddl)
}

// override returns the type of column c, which Map mapped to base, under
// the override o, or why o does not fit c.
func override(c record.Column, base Type, o ColumnLayout, nullable bool) (Type, error) {
	k, shape, err := overrideShape(o.Type)
	if err != nil {
		return Type{}, err
	}
	if base.array {
		return Type{}, fmt.Errorf("%s is an array; overrides take single values", c.Name)
	}
	if k == kEnum {
		return enumOverride(c, shape.enumBits, nullable)
	}
	lowCard := strings.HasPrefix(o.Type, "LowCardinality(")
	switch {
	case lowCard && !c.Enum && !slices.Contains(lowCardinalityTypes, c.Type):
		return Type{}, fmt.Errorf("%s is %s; LowCardinality(String) is for text and enum columns", c.Name, c.Type)
	case k == kJSON && c.Type != "json" && c.Type != "jsonb":
		return Type{}, fmt.Errorf("%s is %s; JSON is for json and jsonb columns", c.Name, c.Type)
	case k == kDateTime && base.kind != kDateTime:
		return Type{}, fmt.Errorf("%s is %s; %s is for timestamp and timestamptz columns", c.Name, c.Type, o.Type)
	case !lowCard && k != kJSON && k != kDateTime && base.kind != kDecimal:
		return Type{}, fmt.Errorf("%s is %s; %s is for numeric columns", c.Name, c.Type, o.Type)
	}
	t := Type{kind: k, precision: shape.precision, scale: shape.scale, clamp: k == kDecimal && o.OnOverflow == "clamp"}
	inner := o.Type
	switch k {
	case kDecimal:
		inner = fmt.Sprintf("Decimal(%d, %d)", shape.precision, shape.scale)
	case kDateTime:
		inner = fmt.Sprintf("DateTime64(%d, 'UTC')", shape.precision)
	}
	switch {
	case lowCard && nullable:
		t.DDL = "LowCardinality(Nullable(String))"
	case lowCard:
		t.DDL = "LowCardinality(String)"
	case nullable:
		t.DDL = "Nullable(" + inner + ")"
	default:
		t.DDL = inner
	}
	return t, nil
}

// overrideMisfit is the error of a layout whose column overrides do not
// fit t's source columns (err says which and why): an
// *IncompatibleError, so the sink stops loading the table until the
// layout is fixed, as for a schema change it cannot take.
func (t *Table) overrideMisfit(err error) *IncompatibleError {
	return &IncompatibleError{
		Table: t.QualifiedName(),
		Err:   fmt.Errorf("layout: columns: %w", err),
		Fix: "fix the table's layout (the configuration file's layout key, or --layout of the sink and capture): " +
			"override only columns the table has, outside its key and tenant, with a type their PostgreSQL type takes " +
			"(LowCardinality(String) for text and enums; Decimal(P, S), String or Float64 for numeric; DateTime64(P) for timestamps; JSON for json and jsonb; Enum8, Enum16 or Enum for enums; docs/shaping-tables.md), " +
			"or remove the override; then restart the sink",
	}
}

// IsEnumOverride reports whether the override type typ stores a PostgreSQL
// enum as a ClickHouse Enum8 or Enum16, built from its labels: capture
// then carries the column's labels in its records (record.Column.Labels).
func IsEnumOverride(typ string) bool {
	k, _, err := overrideShape(typ)
	return err == nil && k == kEnum
}
