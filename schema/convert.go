package schema

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// conversion turns PostgreSQL's text output into the Go values
// clickhouse-go appends for one kind: one value for a scalar column, the
// parsed elements of an array for an Array(Nullable(T)) column (as a []*T,
// nil for NULL), and a whole scalar column of an insert (Values).
type conversion struct {
	one    func(t Type, s string) (any, error)
	many   func(t Type, elems []*string) (any, error)
	values func(t Type, n int) Values
}

// conv builds the conversion of a kind from a parser of one value.
func conv[T any](parse func(string) (T, error)) conversion {
	return convType(func(_ Type, s string) (T, bool, error) {
		v, err := parse(s)
		return v, true, err
	})
}

// convType builds the conversion of a kind from a parser that needs the
// column's type (a decimal's scale) and may turn a value into SQL NULL
// (ok false).
func convType[T any](parse func(t Type, s string) (v T, ok bool, err error)) conversion {
	return conversion{
		one: func(t Type, s string) (any, error) {
			v, ok, err := parse(t, s)
			if err != nil || !ok {
				return nil, err // not ok: SQL NULL
			}
			return v, nil
		},
		many: func(t Type, elems []*string) (any, error) {
			out := make([]*T, len(elems))
			for i, e := range elems {
				if e == nil {
					continue
				}
				v, ok, err := parse(t, *e)
				if err != nil {
					return nil, fmt.Errorf("array element %d: %w", i+1, err)
				}
				if ok {
					out[i] = &v
				}
			}
			return out, nil
		},
		values: func(t Type, n int) Values { return newValues(t, parse, n) },
	}
}

func parseText(s string) (string, error) { return s, nil }

// decimalValue returns numeric text s for the column's Decimal(p, s), and
// ok false for numeric's special values, which no decimal can hold: those
// become NULL. A value with more digits than the decimal holds (possible
// for an unconstrained numeric, mapped to Decimal(76, 38)) is an error: the
// client would silently drop the extra fractional digits.
//
// Under a layout's on_overflow clamp (t.clamp), a value with more digits
// before the point than the decimal holds, and an infinity, become the
// decimal's bound of their sign instead (Clamped tells which); a value
// within range with more decimals than the scale is still an error: a
// clamp never rounds.
func decimalValue(t Type, s string) (string, bool, error) {
	switch s {
	case "NaN":
		return "", false, nil
	case "Infinity", "-Infinity":
		if t.clamp {
			return decimalBound(t, s[0] == '-'), true, nil
		}
		return "", false, nil
	}
	if err := decimalFits(s, t.precision, t.scale); err != nil {
		if t.clamp {
			if beyond, neg := decimalBeyond(t, s); beyond {
				return decimalBound(t, neg), true, nil
			}
			return "", false, fmt.Errorf("%w; on_overflow clamp bounds values beyond the range only, it never rounds decimals", err)
		}
		return "", false, err
	}
	return s, true, nil // the client parses decimal text exactly
}

// decimalBeyond reports whether numeric text s has more digits before the
// point than t's Decimal holds, and whether it is negative.
func decimalBeyond(t Type, s string) (beyond, neg bool) {
	neg = strings.HasPrefix(s, "-")
	whole, _, _ := strings.Cut(strings.TrimLeft(s, "+-"), ".")
	whole = strings.TrimLeft(whole, "0")
	return allDigits(whole) && len(whole) > t.precision-t.scale, neg
}

// decimalBound is the largest value of t's Decimal(P, S), P-S nines then S
// nines after the point, or its negative.
func decimalBound(t Type, neg bool) string {
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	if t.precision == t.scale {
		b.WriteByte('0')
	}
	b.WriteString(strings.Repeat("9", t.precision-t.scale))
	if t.scale > 0 {
		b.WriteByte('.')
		b.WriteString(strings.Repeat("9", t.scale))
	}
	return b.String()
}

// Clamps reports whether t bounds values beyond its range (a Decimal
// override with on_overflow clamp), so that a caller asks Clamped about
// its values only then.
func (t Type) Clamps() bool { return t.clamp && !t.array }

// Clamped reports whether Convert turns PostgreSQL's text of a value into
// its type's bound because the value is beyond the range (a Decimal
// override with on_overflow clamp): the sink counts such values. Cheap
// for every other type.
func (t Type) Clamped(text string) bool {
	if !t.Clamps() {
		return false
	}
	if text == "Infinity" || text == "-Infinity" {
		return true
	}
	beyond, _ := decimalBeyond(t, text)
	return beyond
}

// decimalFits checks that numeric text (PostgreSQL's output: an optional
// sign, digits, optionally a point and digits) fits Decimal(p, scale)
// exactly: at most p-scale digits before the point and, trailing zeros
// aside, at most scale after it.
func decimalFits(s string, p, scale int) error {
	digits := strings.TrimLeft(s, "+-")
	whole, frac, _ := strings.Cut(digits, ".")
	if whole == "" && frac == "" || !allDigits(whole) || !allDigits(frac) {
		return fmt.Errorf("numeric %q is not a decimal number", truncate(s))
	}
	whole = strings.TrimLeft(whole, "0")
	frac = strings.TrimRight(frac, "0")
	if len(whole) > p-scale || len(frac) > scale {
		return fmt.Errorf("numeric %s has %d digits before the point and %d after it; Decimal(%d, %d) holds at most %d and %d",
			truncate(s), len(whole), len(frac), p, scale, p-scale, scale)
	}
	return nil
}

// allDigits reports whether s holds nothing but ASCII digits.
func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// decimalShape reads "Decimal(p, s)".
func decimalShape(d string) (p, s int, ok bool) {
	body, found := unwrap(d, "Decimal(")
	if !found {
		return 0, 0, false
	}
	ps, ss, found := strings.Cut(body, ",")
	if !found {
		return 0, 0, false
	}
	p, err1 := strconv.Atoi(strings.TrimSpace(ps))
	s, err2 := strconv.Atoi(strings.TrimSpace(ss))
	return p, s, err1 == nil && err2 == nil
}

func parseBool(s string) (bool, error) {
	switch s {
	case "t", "true":
		return true, nil
	case "f", "false":
		return false, nil
	}
	return false, fmt.Errorf("bool %q: want t or f", s)
}

func parseInt16(s string) (int16, error) {
	v, err := strconv.ParseInt(s, 10, 16)
	return int16(v), err
}

func parseInt32(s string) (int32, error) {
	v, err := strconv.ParseInt(s, 10, 32)
	return int32(v), err
}

func parseInt64(s string) (int64, error) { return strconv.ParseInt(s, 10, 64) }

func parseUint32(s string) (uint32, error) {
	v, err := strconv.ParseUint(s, 10, 32)
	return uint32(v), err
}

func parseFloat32(s string) (float32, error) {
	v, err := strconv.ParseFloat(s, 32)
	if math.IsNaN(v) {
		return nanFloat32, err
	}
	return float32(v), err
}

func parseFloat64(s string) (float64, error) {
	v, err := strconv.ParseFloat(s, 64)
	if math.IsNaN(v) {
		return nanFloat64, err
	}
	return v, err
}

// nanFloat64 and nanFloat32 are NaN with the bits ClickHouse parses "nan"
// into (the quiet NaN without payload), not Go's math.NaN (payload 1): a
// key's IN compares a float's bits, so a row stored with Go's NaN was not
// found by the read-back of its unchanged TOAST values, whose keys the
// server parses from text (docs/limits.md).
var (
	nanFloat64 = math.Float64frombits(0x7ff8000000000000)
	nanFloat32 = math.Float32frombits(0x7fc00000)
)

// parseBytea decodes bytea's hex output into the bytes, as a string.
func parseBytea(s string) (string, error) {
	if !strings.HasPrefix(s, `\x`) {
		return "", fmt.Errorf("bytea value is not in hex format (set bytea_output = hex)")
	}
	b, err := hex.DecodeString(s[2:])
	return string(b), err
}

// ClickHouse's Date32 range, and the DateTime64 range the client can
// write: it converts times through int64 nanoseconds since 1970, which end
// at 2262-04-11 23:47:16.854775807 UTC (later times would wrap around to
// 1677), short of ClickHouse's own bound 2299-12-31. Values outside
// (including PostgreSQL's infinity) are clamped to the nearest bound rather
// than losing the row.
var (
	minDate = time.Date(1900, 1, 1, 0, 0, 0, 0, time.UTC)
	maxDate = time.Date(2299, 12, 31, 0, 0, 0, 0, time.UTC)
	maxTime = time.Unix(0, math.MaxInt64).UTC().Truncate(time.Microsecond)
)

// special maps PostgreSQL's infinities and BC dates to ClickHouse's bounds
// (hi is the upper bound of the column's type).
func special(s string, hi time.Time) (time.Time, bool) {
	switch {
	case s == "infinity":
		return hi, true
	case s == "-infinity", strings.HasSuffix(s, " BC"):
		return minDate, true
	}
	return time.Time{}, false
}

func parseDate(s string) (time.Time, error) {
	if t, ok := special(s, maxDate); ok {
		return t, nil
	}
	t, err := time.Parse("2006-01-02", s)
	if err != nil {
		if beyondYear9999(s, "2006-01-02") {
			return maxDate, nil
		}
		return time.Time{}, fmt.Errorf("date %q: %w", s, err)
	}
	return clamp(t, minDate, maxDate), nil
}

// beyondYear9999 reports whether s is a date or timestamp of layout whose
// year has more than four digits (PostgreSQL writes years up to 294276 for
// timestamps, 5874897 for dates), which time.Parse cannot read: the rest
// must still parse, so that text that only starts with digits fails.
func beyondYear9999(s, layout string) bool {
	n := 0
	for n < len(s) && s[n] >= '0' && s[n] <= '9' {
		n++
	}
	if n <= 4 || n == len(s) || s[n] != '-' {
		return false
	}
	// 9996 is a leap year, as every year whose February 29 PostgreSQL
	// writes is.
	_, err := time.Parse(layout, "9996"+s[n:])
	return err == nil
}

// parseTimestamp reads PostgreSQL's ISO output for timestamp and timestamptz
// ("2024-01-15 10:00:00.123456", "2024-01-15 10:00:00+00",
// "2024-01-15 10:00:00+05:30").
// maxDateTimePrecision is the fractional digits of walhouse's DateTime64:
// PostgreSQL's timestamps hold microseconds.
const maxDateTimePrecision = 6

// timestampValue is parseTimestamp for a DateTime64 of t's precision: a
// layout's override to fewer digits truncates the fraction (towards the
// earlier time), here, so that what is stored does not depend on how the
// client would round.
func timestampValue(t Type, s string) (time.Time, bool, error) {
	v, err := parseTimestamp(s)
	if err != nil || t.precision >= maxDateTimePrecision {
		return v, true, err
	}
	unit := time.Duration(1)
	for range 9 - t.precision {
		unit *= 10
	}
	return v.Truncate(unit), true, nil
}

// dateTimeShape reads the precision of "DateTime64(P…)".
func dateTimeShape(d string) (p int, ok bool) {
	body, found := strings.CutPrefix(d, "DateTime64(")
	if !found {
		return 0, false
	}
	digits, _, _ := strings.Cut(strings.TrimSuffix(body, ")"), ",")
	p, err := strconv.Atoi(strings.TrimSpace(digits))
	return p, err == nil && p >= 0 && p <= 9
}

func parseTimestamp(s string) (time.Time, error) {
	if t, ok := special(s, maxTime); ok {
		return t, nil
	}
	if len(s) == len("2006-01-02") { // a date, in a column widened to a timestamp
		d, err := parseDate(s)
		return clamp(d, minDate, maxTime), err
	}
	if t, ok := parseISOTimestamp(s); ok {
		return clamp(t, minDate, maxTime), nil
	}
	return parseTimestampLayout(s)
}

// parseTimestampLayout is parseTimestamp by time.Parse, for what
// parseISOTimestamp does not read.
func parseTimestampLayout(s string) (time.Time, error) {
	t, beyond, err := timestampLayout(s)
	switch {
	case beyond:
		return maxTime, nil
	case err != nil:
		return time.Time{}, err
	}
	return clamp(t, minDate, maxTime), nil
}

// timestampLayout reads s as parseTimestampLayout does, without clamping:
// beyond reports a year past 9999, which time.Parse cannot read.
func timestampLayout(s string) (t time.Time, beyond bool, err error) {
	layout := "2006-01-02 15:04:05.999999"
	if i := strings.LastIndexAny(s, "+-"); i > 10 {
		switch len(s) - i {
		case 3:
			layout += "-07"
		case 6:
			layout += "-07:00"
		case 9:
			layout += "-07:00:00"
		}
	}
	t, err = time.Parse(layout, s)
	if err != nil {
		// A date (of a column widened to a timestamp) is longer than ten
		// characters when its year is.
		if beyondYear9999(s, layout) || beyondYear9999(s, "2006-01-02") {
			return time.Time{}, true, nil
		}
		return time.Time{}, false, fmt.Errorf("timestamp %q: %w", s, err)
	}
	return t.UTC(), false, nil
}

// parseISOTimestamp reads the form PostgreSQL writes for nearly every
// timestamp, "2024-01-15 10:00:00[.123456][+05[:30[:00]]]" with a four-digit
// year, in UTC, without time.Parse, the sink's largest single cost of
// converting values. ok is false for anything else (infinity, BC, other
// years, out-of-range fields), which parseTimestamp reads the slow way.
func parseISOTimestamp(s string) (t time.Time, ok bool) {
	if len(s) < 19 || s[4] != '-' || s[7] != '-' || s[10] != ' ' || s[13] != ':' || s[16] != ':' {
		return time.Time{}, false
	}
	year, ok1 := digits(s[0:4])
	month, ok2 := digits(s[5:7])
	day, ok3 := digits(s[8:10])
	hour, ok4 := digits(s[11:13])
	minute, ok5 := digits(s[14:16])
	sec, ok6 := digits(s[17:19])
	if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 || !ok6 || month < 1 || month > 12 || day < 1 || hour > 23 || minute > 59 || sec > 59 {
		return time.Time{}, false
	}
	rest, nsec := s[19:], 0
	if len(rest) > 0 && rest[0] == '.' {
		n := 1
		for n < len(rest) && n <= 6 && rest[n] >= '0' && rest[n] <= '9' {
			n++
		}
		frac, fok := digits(rest[1:n])
		if !fok {
			return time.Time{}, false
		}
		for range 10 - n { // nanoseconds from 1 to 6 digits
			frac *= 10
		}
		rest, nsec = rest[n:], frac
	}
	offset := 0
	if len(rest) > 0 {
		sign := 1
		switch rest[0] {
		case '+':
		case '-':
			sign = -1
		default:
			return time.Time{}, false
		}
		var parts [3]int
		rest = rest[1:]
		for i := 0; i < 3 && len(rest) > 0; i++ {
			if i > 0 {
				if rest[0] != ':' {
					return time.Time{}, false
				}
				rest = rest[1:]
			}
			if len(rest) < 2 {
				return time.Time{}, false
			}
			v, vok := digits(rest[:2])
			if !vok || (i > 0 && v > 59) {
				return time.Time{}, false
			}
			parts[i], rest = v, rest[2:]
		}
		if len(rest) > 0 || parts[0] > 23 {
			return time.Time{}, false
		}
		offset = sign * (parts[0]*3600 + parts[1]*60 + parts[2])
	}
	t = time.Date(year, time.Month(month), day, hour, minute, sec, nsec, time.UTC)
	if t.Day() != day { // February 30th and the like: time.Parse's error
		return time.Time{}, false
	}
	return t.Add(-time.Duration(offset) * time.Second), true
}

// digits returns the value of s, which must be all ASCII digits.
func digits(s string) (int, bool) {
	if s == "" {
		return 0, false
	}
	n := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}

// OutOfRange reports whether Convert stores PostgreSQL's text of a value
// of t, a date or timestamp, as the bound of the range ClickHouse holds
// rather than as itself (see minDate): a value before 1900-01-01 or after
// the type's upper bound, an infinity, a BC date; for an array of them
// (nested ones included), whether any element is. Every such value beyond
// one bound is stored as the same value, so in a key it would share its
// row with another ({1800-01-01} and {1700-01-01} would be one key).
// Exact at the bounds; cheap for the years no time zone offset takes out
// of the range (a look at the year), and false for every other type and
// for text Convert refuses.
func (t Type) OutOfRange(text string) bool {
	if !t.Ranged() {
		return false
	}
	if !t.array {
		return t.scalarOutOfRange(text)
	}
	elems, err := parseArray(text)
	if err != nil {
		return false // Convert refuses it too
	}
	for _, e := range elems {
		if e != nil && t.scalarOutOfRange(*e) {
			return true
		}
	}
	return false
}

// scalarOutOfRange is OutOfRange for one value of t's kind.
func (t Type) scalarOutOfRange(text string) bool {
	if withinDateRange(text) {
		return false
	}
	hi := maxDate
	if t.kind == kDateTime {
		hi = maxTime
	}
	if _, ok := special(text, hi); ok {
		return true
	}
	var (
		v      time.Time
		beyond bool
		err    error
	)
	switch {
	case t.kind == kDate || len(text) == len("2006-01-02"): // a date, or one in a column widened to a timestamp
		v, err = time.Parse("2006-01-02", text)
		beyond = err != nil && beyondYear9999(text, "2006-01-02")
	default:
		var ok bool
		if v, ok = parseISOTimestamp(text); !ok {
			v, beyond, err = timestampLayout(text)
		}
	}
	if beyond {
		return true
	}
	return err == nil && (v.Before(minDate) || v.After(hi))
}

// Ranged reports whether t is a date or timestamp, or an array of them,
// whose values OutOfRange may report, so that a caller asks about each
// value only then.
func (t Type) Ranged() bool { return scalars[t.kind].temporal }

func clamp(t, lo, hi time.Time) time.Time {
	if t.Before(lo) {
		return lo
	}
	if t.After(hi) {
		return hi
	}
	return t
}

// parseArray parses a one-dimensional PostgreSQL array literal such as
// {1,"a b",NULL}. Nested arrays are flattened in row-major order (ClickHouse
// columns have a fixed nesting depth; PostgreSQL arrays do not).
func parseArray(s string) ([]*string, error) {
	if strings.HasPrefix(s, "[") { // explicit bounds: [0:2]={1,2,3}
		i := strings.Index(s, "=")
		if i < 0 {
			return nil, errors.New("array with bounds but no '='")
		}
		s = s[i+1:]
	}
	if len(s) < 2 || s[0] != '{' || s[len(s)-1] != '}' {
		return nil, fmt.Errorf("array literal %q must be enclosed in braces", truncate(s))
	}
	var out []*string
	var cur strings.Builder
	quoted, inQuotes, have := false, false, false
	flush := func() {
		if !have {
			return
		}
		v := cur.String()
		if !quoted && v == "NULL" {
			out = append(out, nil)
		} else {
			out = append(out, &v)
		}
		cur.Reset()
		quoted, have = false, false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case inQuotes && c == '\\' && i+1 < len(s):
			i++
			cur.WriteByte(s[i])
		case inQuotes && c == '"':
			inQuotes = false
		case inQuotes:
			cur.WriteByte(c)
		case c == '"':
			inQuotes, quoted, have = true, true, true
		case c == '{':
		case c == '}' || c == ',':
			flush()
		case c == ' ' && !have:
		default:
			cur.WriteByte(c)
			have = true
		}
	}
	if inQuotes {
		return nil, fmt.Errorf("array literal %q has an unterminated quote", truncate(s))
	}
	return out, nil
}

func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// parseJSONObject checks that json or jsonb text s is a value ClickHouse's
// JSON type takes as it is, and returns s. The server parses the text
// itself (the client sends a JSON column as text); what it would refuse is
// refused here, because one refused value fails the server's whole insert
// and the sink could load none of the batch, while an error here fails
// only the value's record, which goes to the dead letters:
//   - a value that is not an object (a scalar, an array or null at the top
//     level of a jsonb value): the JSON type holds objects only;
//   - an integer outside Int64 and UInt64, or a number a double cannot
//     hold (1e400, and 1e-400, which the server would read as 0);
//   - the same path twice: a key given twice ({"a":1,"a":2}, possible in
//     json) or a dotted key that names a nested key ({"a.b":1,"a":{"b":2}}),
//     which the JSON type reads as the same path a.b;
//   - objects and arrays nested more than maxJSONDepth deep (PostgreSQL
//     takes them as deep as its stack allows);
//   - a \u escape of half a UTF-16 surrogate pair without its other half,
//     which json (not jsonb) keeps as it is written.
func parseJSONObject(s string) (string, error) {
	if err := checkJSONNesting(s); err != nil {
		return "", fmt.Errorf("json %s: %w", truncate(s), err)
	}
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return "", fmt.Errorf("json %q: %w", truncate(s), err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return "", fmt.Errorf("json %s is %s, not an object; ClickHouse's JSON type holds objects only (docs/shaping-tables.md, Native JSON)", truncate(s), jsonKindOf(tok))
	}
	if err := checkJSONObject(dec, "", map[string]bool{}); err != nil {
		return "", fmt.Errorf("json %s: %w", truncate(s), err)
	}
	return s, nil
}

// maxJSONDepth is how deeply objects and arrays may nest in a value of
// the JSON type, the top-level object counting as 1. The server's parsers
// (simdjson, and rapidjson without it) refused 1,024 and took 1,023 in
// ClickHouse 26.7; walhouse stays below that.
const maxJSONDepth = 1000

// checkJSONNesting refuses, in JSON text s, nesting deeper than
// maxJSONDepth and a \u escape of an unpaired surrogate: the server
// refuses both, and Go's decoder (which reads the rest) takes the second
// as U+FFFD. Outside strings a backslash is no valid JSON; the decoder
// refuses it.
func checkJSONNesting(s string) error {
	depth, inString := 0, false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case inString && c == '\\':
			if i+1 < len(s) && s[i+1] == 'u' {
				n, err := checkJSONEscape(s, i)
				if err != nil {
					return err
				}
				i += n - 1
				continue
			}
			i++ // the escaped character
		case c == '"':
			inString = !inString
		case !inString && (c == '{' || c == '['):
			if depth++; depth > maxJSONDepth {
				return fmt.Errorf("objects and arrays nest more than %d deep, deeper than ClickHouse's JSON type reads (docs/shaping-tables.md, Native JSON)", maxJSONDepth)
			}
		case !inString && (c == '}' || c == ']'):
			depth--
		}
	}
	return nil
}

// checkJSONEscape checks the \u escape at s[i:] and returns its length: a
// high surrogate must be followed by a \u escape of a low one, and a low
// one must follow a high one.
func checkJSONEscape(s string, i int) (int, error) {
	r, ok := hexRune(s, i)
	if !ok {
		return 2, nil // malformed: the decoder says so
	}
	switch {
	case r >= 0xDC00 && r <= 0xDFFF:
		return 0, fmt.Errorf("escape %s is half a surrogate pair without its first half, which ClickHouse's JSON type does not read", s[i:i+6])
	case r >= 0xD800 && r <= 0xDBFF:
		if lo, ok := hexRune(s, i+6); !ok || lo < 0xDC00 || lo > 0xDFFF {
			return 0, fmt.Errorf("escape %s is half a surrogate pair without its second half, which ClickHouse's JSON type does not read", s[i:i+6])
		}
		return 12, nil
	}
	return 6, nil
}

// hexRune reads the \uXXXX escape at s[i:].
func hexRune(s string, i int) (rune, bool) {
	if i+6 > len(s) || s[i] != '\\' || s[i+1] != 'u' {
		return 0, false
	}
	v, err := strconv.ParseUint(s[i+2:i+6], 16, 16)
	return rune(v), err == nil
}

// jsonKindOf names the JSON value a first token starts.
func jsonKindOf(tok json.Token) string {
	switch v := tok.(type) {
	case json.Delim:
		if v == '[' {
			return "an array"
		}
	case nil:
		return "null"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case json.Number:
		return "a number"
	}
	return "not an object"
}

// checkJSONObject reads the rest of an object whose { dec has read, its
// paths under prefix, noting its leaf paths in leaves.
func checkJSONObject(dec *json.Decoder, prefix string, leaves map[string]bool) error {
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		path := prefix + tok.(string) // an object's keys are strings
		if err := checkJSONValue(dec, path, leaves); err != nil {
			return err
		}
	}
	_, err := dec.Token() // }
	return err
}

// checkJSONValue reads one value at path.
func checkJSONValue(dec *json.Decoder, path string, leaves map[string]bool) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	switch v := tok.(type) {
	case json.Delim:
		if v == '{' {
			return checkJSONObject(dec, path+".", leaves)
		}
		// An array is one leaf; each object in it is a JSON value of its
		// own, with its own paths.
		if err := leaf(path, leaves); err != nil {
			return err
		}
		return checkJSONArray(dec)
	case nil:
		return nil // the JSON type stores no null: no path
	case json.Number:
		if err := checkJSONNumber(v); err != nil {
			return fmt.Errorf("at %s: %w", path, err)
		}
	}
	return leaf(path, leaves)
}

// checkJSONArray reads the rest of an array whose [ dec has read: each
// object in it has paths of its own.
func checkJSONArray(dec *json.Decoder) error {
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		switch v := tok.(type) {
		case json.Delim:
			if v == '{' {
				err = checkJSONObject(dec, "", map[string]bool{})
			} else {
				err = checkJSONArray(dec)
			}
		case json.Number:
			err = checkJSONNumber(v)
		}
		if err != nil {
			return err
		}
	}
	_, err := dec.Token() // ]
	return err
}

func leaf(path string, leaves map[string]bool) error {
	if leaves[path] {
		return fmt.Errorf("path %s is given twice (a repeated key, or a dotted key that names a nested one); ClickHouse's JSON type holds one value per path", path)
	}
	leaves[path] = true
	return nil
}

// checkJSONNumber refuses a number the JSON type would refuse or change:
// the server reads an integer as Int64 or UInt64 and any other number as
// Float64.
func checkJSONNumber(n json.Number) error {
	s := string(n)
	if !strings.ContainsAny(s, ".eE") {
		if _, err := strconv.ParseInt(s, 10, 64); err == nil {
			return nil
		}
		if _, err := strconv.ParseUint(s, 10, 64); err == nil {
			return nil
		}
		return fmt.Errorf("integer %s is beyond Int64 and UInt64, which ClickHouse's JSON type holds integers in", truncate(s))
	}
	if _, err := strconv.ParseFloat(s, 64); err != nil {
		return fmt.Errorf("number %s is beyond the range of Float64, which ClickHouse's JSON type holds fractions in", truncate(s))
	}
	return nil
}
