package query

import (
	"encoding/json"
	"regexp"
	"strings"

	"github.com/walhouse/walhouse/schema"
)

// A column of ClickHouse's JSON type (a layout's JSON override) is read
// by path: "payload.customer.id" names the value at customer.id in the
// column payload, in columns, groupBy, orderBy, filters and aggregates
// that take text (count, uniq, min, max). A path's values differ in type
// from row to row (ClickHouse's Dynamic, which it neither groups nor
// compares with a typed value), so a path reads as its value's text,
// Nullable(String), NULL where the row has no value at the path; a filter
// whose value is a JSON number compares the text read as a Float64
// instead, so 42 matches 42 and "42" and > orders numbers as numbers.

// jsonKeyRe is one key of a path: plain names only, so a path is never
// more than the column and keys the request names, whatever its text.
var jsonKeyRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,63}$`)

// maxJSONPathKeys bounds a path's depth.
const maxJSONPathKeys = 16

// isJSONType reports whether a system.columns type is ClickHouse's JSON
// type (with or without type hints, Nullable or not).
func isJSONType(full string) bool {
	if inner, ok := strings.CutPrefix(full, "Nullable("); ok {
		full = strings.TrimSuffix(inner, ")")
	}
	return full == "JSON" || strings.HasPrefix(full, "JSON(")
}

// jsonPathColumn resolves name, which is no column of t, as a path into
// one of t's JSON columns: the longest column name before a dot that is
// a JSON column, then keys. ok is false when name is no such path; a path
// whose keys are not plain names is an error for field.
func jsonPathColumn(t *Table, field, name string) (c Column, ok bool, err error) {
	for i := len(name) - 1; i > 0; i-- {
		if name[i] != '.' {
			continue
		}
		base, found := t.Column(name[:i])
		if !found || !isJSONType(base.Type) {
			continue
		}
		path := name[i+1:]
		keys := strings.Split(path, ".")
		if len(keys) > maxJSONPathKeys {
			return Column{}, false, reqErr(field, "path %q has %d keys, more than the %d allowed", path, len(keys), maxJSONPathKeys)
		}
		for _, k := range keys {
			if !jsonKeyRe.MatchString(k) {
				return Column{}, false, reqErr(field, "key %q of path %q into JSON column %q is not a plain name (1-64 letters, digits or _, not starting with a digit)", k, path, base.Name)
			}
		}
		typ := parseColType("Nullable(String)")
		return Column{
			Name:       name,
			Type:       "Nullable(String)",
			Filterable: true,
			typ:        typ,
			// The path is a checked constant: getSubcolumn takes no
			// parameter, and the keys are plain names.
			expr: "CAST(getSubcolumn(" + schema.QuoteIdent(base.Name) + ", " + schema.QuoteString(path) + ") AS Nullable(String))",
		}, true, nil
	}
	return Column{}, false, nil
}

// sql returns the SQL that reads c: its quoted name, or a JSON path's
// expression.
func (c Column) sql() string {
	if c.expr != "" {
		return c.expr
	}
	return schema.QuoteIdent(c.Name)
}

// forValue returns the column a filter compares v with: a JSON path
// compared with a number reads as a Float64; an Enum8 or Enum16 column
// reads as its label's text, because ClickHouse refuses to compare an
// Enum with a string that is none of its labels (in IN, !=) or to call
// startsWith on it, where a filter must simply match nothing.
func (c Column) forValue(v any) Column {
	if c.expr == "" {
		if isEnumType(c.Type) {
			c.expr = "toString(" + schema.QuoteIdent(c.Name) + ")"
		}
		return c // a column, not a path
	}
	if vs, ok := v.([]any); ok && len(vs) > 0 {
		v = vs[0]
	}
	switch v.(type) {
	case json.Number, float64:
		c.typ = parseColType("Nullable(Float64)")
		c.expr = "toFloat64OrNull(" + c.expr + ")"
	}
	return c
}

// isEnumType reports whether typ (as system.columns reports it) is an
// Enum8 or Enum16, Nullable or not.
func isEnumType(typ string) bool {
	typ = strings.TrimPrefix(typ, "Nullable(")
	return strings.HasPrefix(typ, "Enum8(") || strings.HasPrefix(typ, "Enum16(")
}
