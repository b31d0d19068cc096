package query

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/walhouse/walhouse/schema"
)

// This file holds what dashboards ask of BuildSelect beyond plain
// filters: time buckets, relative time ranges, or/and/not groups, HAVING
// on aggregates and the aggregates' result types. Every name is checked
// against the table's columns or the request's own outputs, every value is
// bound, as in build.go.

// Bounds of filter groups: nesting and size are checked before any SQL is
// built, so a hostile body cannot make a statement ClickHouse chokes on.
const (
	// MaxFilterDepth is how deep or/and/not groups nest (a plain
	// comparison in filters is depth 1).
	MaxFilterDepth = 8
	// MaxFilterNodes is how many comparisons and groups filters and
	// having hold in all.
	MaxFilterNodes = 256
	// MaxBuckets is how many time buckets one request may define.
	MaxBuckets = 8
	// maxBucketEvery bounds Bucket.Every.
	maxBucketEvery = 1000
	// maxLastSeconds bounds TimeRange.Last (10 years of 365 days).
	maxLastSeconds = 10 * 365 * 24 * 3600
)

// resolver finds what a filter's column names: a table column for WHERE,
// an aggregate's output for HAVING.
type resolver func(field, name string) (Column, error)

// filterTree builds one filter, a comparison or a group, depth levels deep.
func (b *builder) filterTree(field string, f Filter, depth int, resolve resolver) (string, error) {
	b.nodes++
	if b.nodes > MaxFilterNodes {
		return "", reqErr(field, "the request has more than %d comparisons and groups in filters and having, the limit", MaxFilterNodes)
	}
	if depth > MaxFilterDepth {
		return "", reqErr(field, "groups nest deeper than %d levels, the limit", MaxFilterDepth)
	}
	set := 0
	for _, isSet := range []bool{f.Column != "" || f.Op != "" || f.Value != nil, f.Or != nil, f.And != nil, f.Not != nil} {
		if isSet {
			set++
		}
	}
	if set != 1 {
		return "", reqErr(field, "set exactly one of a comparison (column, op, value), or, and, not")
	}
	switch {
	case f.Not != nil:
		cond, err := b.filterTree(field+".not", *f.Not, depth+1, resolve)
		if err != nil {
			return "", err
		}
		return "NOT (" + cond + ")", nil
	case f.Or != nil, f.And != nil:
		list, kw, name := f.Or, " OR ", "or"
		if f.And != nil {
			list, kw, name = f.And, " AND ", "and"
		}
		if len(list) == 0 {
			return "", reqErr(field+"."+name, "is empty; list at least one filter")
		}
		conds := make([]string, len(list))
		for i, sub := range list {
			var err error
			if conds[i], err = b.filterTree(fmt.Sprintf("%s.%s[%d]", field, name, i), sub, depth+1, resolve); err != nil {
				return "", err
			}
		}
		return "(" + strings.Join(conds, kw) + ")", nil
	default:
		return b.filter(field, f, resolve)
	}
}

// bucketUnits maps each unit to its ClickHouse interval keyword and
// whether it applies to Date columns.
var bucketUnits = map[BucketUnit]struct {
	sql    string
	onDate bool
}{
	Minute: {"MINUTE", false},
	Hour:   {"HOUR", false},
	Day:    {"DAY", true},
	Week:   {"WEEK", true},
	Month:  {"MONTH", true},
}

// addBuckets validates the request's buckets and records their SQL.
func (b *builder) addBuckets(list []Bucket) error {
	b.buckets = map[string]string{}
	b.aggTypes = map[string]colType{}
	if len(list) > MaxBuckets {
		return reqErr("buckets", "has %d buckets, more than the %d allowed", len(list), MaxBuckets)
	}
	for i, bk := range list {
		field := fmt.Sprintf("buckets[%d]", i)
		c, err := b.column(field+".column", bk.Column)
		if err != nil {
			return err
		}
		kind := c.typ.Kind
		if kind != kindDate && kind != kindDateTime {
			return reqErr(field+".column", "column %q is %s; a bucket needs a Date or DateTime column", c.Name, c.Type)
		}
		unit, ok := bucketUnits[bk.Unit]
		if !ok {
			return reqErr(field+".unit", "%q is not one of minute hour day week month", bk.Unit)
		}
		if kind == kindDate && !unit.onDate {
			return reqErr(field+".unit", "%s buckets need a timestamp column; %q is %s", bk.Unit, c.Name, c.Type)
		}
		every := bk.Every
		if every == 0 {
			every = 1
		}
		if every < 1 || every > maxBucketEvery {
			return reqErr(field+".every", "%d is not from 1 to %d", bk.Every, maxBucketEvery)
		}
		if !aliasRe.MatchString(bk.As) {
			return reqErr(field+".as", "%q must be 1-64 letters, digits or _, not starting with a digit", bk.As)
		}
		if _, clash := b.t.Column(bk.As); clash {
			return reqErr(field+".as", "%q is also a column of the table; choose another name", bk.As)
		}
		if _, dup := b.buckets[bk.As]; dup {
			return reqErr(field+".as", "bucket name %q is used twice", bk.As)
		}
		interval := fmt.Sprintf("INTERVAL %d %s", every, unit.sql)
		col := schema.QuoteIdent(c.Name)
		if kind == kindDate {
			if bk.TimeZone != "" {
				return reqErr(field+".timeZone", "applies to timestamp columns; %q is %s, whose days have no zone", c.Name, c.Type)
			}
			b.buckets[bk.As] = "toStartOfInterval(" + col + ", " + interval + ")"
			continue
		}
		zone := bk.TimeZone
		if zone == "" {
			zone = "UTC"
		}
		if zone != "UTC" && !b.zones[zone] {
			return reqErr(field+".timeZone", "%q is not a time zone the server knows; use an IANA name such as Europe/Paris", clip(zone, 100))
		}
		ph := b.bindText(zone)
		// toStartOfInterval gives a Date for weeks and months: as a
		// timestamp in the zone, every unit answers the instant its
		// bucket starts.
		b.buckets[bk.As] = "toDateTime(toStartOfInterval(" + col + ", " + interval + ", " + ph + "), " + ph + ")"
	}
	return nil
}

// bindText binds a text parameter and returns its placeholder.
func (b *builder) bindText(v string) string {
	name := "p" + strconv.Itoa(b.n)
	b.n++
	b.params[name] = schema.EscapeParam(v)
	return "{" + name + ":String}"
}

// isBucket reports whether name is one of the request's buckets.
func (b *builder) isBucket(name string) bool {
	_, ok := b.buckets[name]
	return ok
}

// output returns the SELECT item of an output column: a bucket with its
// name, or a table column.
func (b *builder) output(field, name string) (string, error) {
	if expr, ok := b.buckets[name]; ok {
		return expr + " AS " + schema.QuoteIdent(name), nil
	}
	c, err := b.column(field, name)
	if err != nil {
		return "", err
	}
	if c.expr != "" {
		return c.sql() + " AS " + schema.QuoteIdent(name), nil
	}
	return schema.QuoteIdent(name), nil
}

// aggregateOutput resolves a HAVING filter's column: an aggregate's name,
// typed as its result.
func (b *builder) aggregateOutput(field, name string) (Column, error) {
	typ, ok := b.aggTypes[name]
	if !ok {
		return Column{}, reqErr(field, "%q is not the name of an aggregate of this request; having compares aggregates (filter other columns in filters)", name)
	}
	return Column{Name: name, Type: typ.Full, Filterable: true, typ: typ}, nil
}

// aggregateType is the type of fn's result over a column of type c, as
// ClickHouse gives it, for binding the values HAVING compares it with.
func aggregateType(fn string, c colType) colType {
	switch fn {
	case "uniq", "uniqExact", "count":
		return parseColType("UInt64")
	case "avg":
		return parseColType("Float64")
	case "sum":
		switch c.Kind {
		case kindInt:
			bits := max(64, c.intBits)
			if c.unsigned {
				return parseColType("UInt" + strconv.Itoa(bits))
			}
			return parseColType("Int" + strconv.Itoa(bits))
		case kindDecimal:
			if c.precision > 38 {
				return parseColType(fmt.Sprintf("Decimal(76, %d)", c.scale))
			}
			return parseColType(fmt.Sprintf("Decimal(38, %d)", c.scale))
		}
		return parseColType("Float64")
	case "quantile":
		if c.Kind == kindInt || c.Kind == kindFloat {
			return parseColType("Float64")
		}
	}
	return c // min, max; quantile of decimals and timestamps
}

var lastRe = regexp.MustCompile(`^([1-9][0-9]{0,6})(m|h|d|w)$`)

// lastSeconds parses TimeRange.Last ("7d") into seconds.
func lastSeconds(last string) (int64, error) {
	m := lastRe.FindStringSubmatch(last)
	if m == nil {
		return 0, reqErr("timeRange.last", "%q is not a count and a unit m, h, d or w, as 7d or 24h", clip(last, 100))
	}
	n, _ := strconv.ParseInt(m[1], 10, 64) // at most 7 digits
	unit := map[string]int64{"m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}[m[2]]
	if n*unit > maxLastSeconds {
		return 0, reqErr("timeRange.last", "%q is longer than 10 years, the limit; use from and to", last)
	}
	return n * unit, nil
}

// lastCondition is the condition of TimeRange.Last on column c: values at
// or after ClickHouse's now minus the span (for a Date column, from the
// UTC day that instant falls in).
func (b *builder) lastCondition(c Column, last string) (string, error) {
	secs, err := lastSeconds(last)
	if err != nil {
		return "", err
	}
	name := "p" + strconv.Itoa(b.n)
	b.n++
	b.params[name] = strconv.FormatInt(secs, 10)
	since := "now64(6, 'UTC') - toIntervalSecond({" + name + ":UInt32})"
	if c.typ.Kind == kindDate {
		since = "toDate32(" + since + ")"
	}
	return schema.QuoteIdent(c.Name) + " >= " + since, nil
}
