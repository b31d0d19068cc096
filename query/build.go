package query

import (
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/walhouse/walhouse/schema"
)

// Limits bound what one caller may ask of ClickHouse and of the server.
// Zero fields take the defaults named on each field.
type Limits struct {
	// DefaultRows is the page size when a request has no limit (default 100).
	DefaultRows int
	// MaxRows is the largest page a request may ask for (default 10,000).
	MaxRows int
	// MaxExecutionTime bounds each read on the server (ClickHouse's
	// max_execution_time; default 30 s).
	MaxExecutionTime time.Duration
	// MaxResultRows is ClickHouse's max_result_rows for reads, a safety net
	// behind LIMIT (default MaxRows+1).
	MaxResultRows int
	// MaxResultBytes is ClickHouse's max_result_bytes for reads: a page of
	// wide rows is refused rather than buffered (default 64 MiB). Exports
	// stream and are bounded by MaxExportBytes instead.
	MaxResultBytes int64
	// MaxPageBytes bounds the JSON of one page of a read: a page that
	// would be larger is refused with over_limit (default 128 MiB). Pages
	// are streamed, so this bounds the response, not serve's memory.
	MaxPageBytes int64
	// MaxMemoryUsage is ClickHouse's max_memory_usage for every read and
	// export (default 1 GiB).
	MaxMemoryUsage int64
	// MaxBytesBeforeExternalGroupBy and MaxBytesBeforeExternalSort make a
	// GROUP BY or ORDER BY spill to disk beyond this many bytes instead of
	// failing on MaxMemoryUsage (default MaxMemoryUsage/2 each).
	MaxBytesBeforeExternalGroupBy int64
	MaxBytesBeforeExternalSort    int64
	// MaxThreads is ClickHouse's max_threads per query, so one caller
	// cannot take every core (default 4).
	MaxThreads int
	// MaxConcurrent is how many queries and exports one tenant may run at
	// once; more are refused with 429 (default 4).
	MaxConcurrent int
	// MaxExportTime bounds a whole export, and each of its table queries
	// (default 10 min).
	MaxExportTime time.Duration
	// MaxExportRows and MaxExportBytes cap one export: beyond either the
	// export stops with an error in its manifest, trailer and audit entry,
	// never silently truncated (defaults 10,000,000 rows and 10 GiB).
	MaxExportRows  int64
	MaxExportBytes int64
}

// withDefaults fills zero fields with their documented defaults.
func (l Limits) withDefaults() Limits {
	if l.DefaultRows <= 0 {
		l.DefaultRows = 100
	}
	if l.MaxRows <= 0 {
		l.MaxRows = 10_000
	}
	if l.DefaultRows > l.MaxRows {
		l.DefaultRows = l.MaxRows
	}
	if l.MaxExecutionTime <= 0 {
		l.MaxExecutionTime = 30 * time.Second
	}
	if l.MaxResultRows <= 0 {
		l.MaxResultRows = l.MaxRows + 1
	}
	if l.MaxResultBytes <= 0 {
		l.MaxResultBytes = 64 << 20
	}
	if l.MaxPageBytes <= 0 {
		l.MaxPageBytes = 128 << 20
	}
	if l.MaxMemoryUsage <= 0 {
		l.MaxMemoryUsage = 1 << 30
	}
	if l.MaxBytesBeforeExternalGroupBy <= 0 {
		l.MaxBytesBeforeExternalGroupBy = l.MaxMemoryUsage / 2
	}
	if l.MaxBytesBeforeExternalSort <= 0 {
		l.MaxBytesBeforeExternalSort = l.MaxMemoryUsage / 2
	}
	if l.MaxThreads <= 0 {
		l.MaxThreads = 4
	}
	if l.MaxConcurrent <= 0 {
		l.MaxConcurrent = 4
	}
	if l.MaxExportTime <= 0 {
		l.MaxExportTime = 10 * time.Minute
	}
	if l.MaxExportRows <= 0 {
		l.MaxExportRows = 10_000_000
	}
	if l.MaxExportBytes <= 0 {
		l.MaxExportBytes = 10 << 30
	}
	return l
}

// orDefaults fills the zero fields of l (a tenant's own limits) from d
// (the server's), before withDefaults fills what both left out.
func (l Limits) orDefaults(d Limits) Limits {
	// Field by field, so that a new limit can never be forgotten here.
	lv, dv := reflect.ValueOf(&l).Elem(), reflect.ValueOf(d)
	for i := range lv.NumField() {
		if f := lv.Field(i); f.IsZero() {
			f.Set(dv.Field(i))
		}
	}
	return l.withDefaults()
}

// resourceSettings are the ClickHouse settings that bound one query's
// memory and cores, for reads and exports alike.
func (l Limits) resourceSettings() map[string]any {
	return map[string]any{
		"max_memory_usage":                   l.MaxMemoryUsage,
		"max_bytes_before_external_group_by": l.MaxBytesBeforeExternalGroupBy,
		"max_bytes_before_external_sort":     l.MaxBytesBeforeExternalSort,
		"max_threads":                        l.MaxThreads,
	}
}

// seconds is d in whole seconds for max_execution_time, at least 1 (0
// would mean no limit).
func seconds(d time.Duration) int {
	return max(1, int(d.Round(time.Second)/time.Second))
}

// Statement is one SQL statement with its server-side parameters and
// settings, ready to run.
type Statement struct {
	SQL string
	// Params are bound server-side ({name:Type} placeholders), values in
	// ClickHouse's escaped text form.
	Params map[string]string
	// Settings are ClickHouse settings for this statement.
	Settings map[string]any
	// Columns are the names of the output columns, in order.
	Columns []string
	// PageSize is the number of rows the caller gets; the SQL asks for one
	// more, to know whether there is a next page.
	PageSize int
}

// RequestError is a problem in a request that the caller can fix. Field
// names the part of the request (e.g. "filters[2].value").
type RequestError struct {
	Field  string
	Reason string
}

// Error names the field and what is wrong with it.
func (e *RequestError) Error() string { return e.Field + ": " + e.Reason }

func reqErr(field, format string, args ...any) error {
	return &RequestError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// ErrTenantType is returned when the caller's tenant is not a valid value
// of the table's tenant column (e.g. a text tenant and an integer column):
// such a tenant can have no rows in the table.
var ErrTenantType = errors.New("the caller's tenant is not a valid value of this table's tenant column")

// SelectInput is what BuildSelect turns into SQL.
type SelectInput struct {
	Table  *Table
	Tenant string
	Req    Request
	// Offset is where the page starts (from a verified cursor).
	Offset int
	Limits Limits
	// TimeZones are the zones the ClickHouse server knows
	// (system.time_zones), which bucket time zones are checked against;
	// nil knows UTC alone.
	TimeZones map[string]bool
}

var aliasRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,63}$`)

const maxInValues = 1000

// BuildSelect validates a read request against the table's columns and
// builds its SQL. It is pure: the same input gives the same statement.
//
// Whatever the request says, the statement filters on the caller's tenant
// (tenant column = {tenant:Type}), hides deleted rows (_is_deleted = 0),
// and reads FINAL unless the request asks for approximate consistency.
// Every identifier is a validated column name quoted by schema.QuoteIdent,
// every value a bound parameter.
func BuildSelect(in SelectInput) (Statement, error) {
	t, r, lim := in.Table, in.Req, in.Limits.withDefaults()
	b := &builder{t: t, params: map[string]string{}, zones: in.TimeZones}
	if err := b.addBuckets(r.Buckets); err != nil {
		return Statement{}, err
	}

	consistency := r.Consistency
	switch consistency {
	case "":
		consistency = Final
	case Final, Approximate:
	default:
		return Statement{}, reqErr("consistency", "%q is not one of final, approximate", r.Consistency)
	}
	pageSize := r.Limit
	switch {
	case pageSize == 0:
		pageSize = lim.DefaultRows
	case pageSize < 0:
		return Statement{}, reqErr("limit", "%d is negative", r.Limit)
	case pageSize > lim.MaxRows:
		return Statement{}, reqErr("limit", "%d is over the maximum of %d rows per page; page with nextCursor instead", r.Limit, lim.MaxRows)
	}

	// SELECT list.
	var (
		selects []string
		outCols []string
		aliases = map[string]bool{}
	)
	aggregated := len(r.GroupBy) > 0 || len(r.Aggregates) > 0
	if aggregated {
		if len(r.Columns) > 0 {
			return Statement{}, reqErr("columns", "must be empty with groupBy or aggregates: the result has the groupBy columns, then the aggregates")
		}
		for i, name := range r.GroupBy {
			sel, err := b.output(fmt.Sprintf("groupBy[%d]", i), name)
			if err != nil {
				return Statement{}, err
			}
			if slices.Contains(r.GroupBy[:i], name) {
				return Statement{}, reqErr(fmt.Sprintf("groupBy[%d]", i), "column %q is listed twice", name)
			}
			selects = append(selects, sel)
			outCols = append(outCols, name)
		}
		for i, a := range r.Aggregates {
			expr, alias, typ, err := b.aggregate(fmt.Sprintf("aggregates[%d]", i), a)
			if err != nil {
				return Statement{}, err
			}
			if aliases[alias] || slices.Contains(r.GroupBy, alias) || b.isBucket(alias) {
				return Statement{}, reqErr(fmt.Sprintf("aggregates[%d].as", i), "output name %q is used twice; set a distinct \"as\"", alias)
			}
			aliases[alias] = true
			b.aggTypes[alias] = typ
			selects = append(selects, expr+" AS "+schema.QuoteIdent(alias))
			outCols = append(outCols, alias)
		}
	} else {
		if len(r.Having) > 0 {
			return Statement{}, reqErr("having", "applies to aggregates; set groupBy or aggregates")
		}
		cols := r.Columns
		if len(cols) == 0 {
			for _, c := range t.Columns {
				if c.Name != schema.DeletedColumn {
					cols = append(cols, c.Name)
				}
			}
			for _, bk := range r.Buckets {
				cols = append(cols, bk.As)
			}
		}
		for i, name := range cols {
			sel, err := b.output(fmt.Sprintf("columns[%d]", i), name)
			if err != nil {
				return Statement{}, err
			}
			if slices.Contains(cols[:i], name) {
				return Statement{}, reqErr(fmt.Sprintf("columns[%d]", i), "column %q is listed twice", name)
			}
			selects = append(selects, sel)
			outCols = append(outCols, name)
		}
	}
	for i, bk := range r.Buckets {
		if !slices.Contains(outCols, bk.As) {
			return Statement{}, reqErr(fmt.Sprintf("buckets[%d].as", i), "bucket %q is not used; list it in columns or groupBy", bk.As)
		}
	}

	// WHERE: tenant first, always.
	tc, _ := t.Column(t.TenantColumn)
	tenantVal, err := tc.typ.bindValue(tenantValue(tc.typ, in.Tenant))
	if err != nil {
		return Statement{}, ErrTenantType
	}
	b.params["tenant"] = tenantVal
	where := []string{
		fmt.Sprintf("%s = {tenant:%s}", schema.QuoteIdent(t.TenantColumn), tc.typ.Param),
		schema.QuoteIdent(schema.DeletedColumn) + " = 0",
	}
	for i, f := range r.Filters {
		cond, err := b.filterTree(fmt.Sprintf("filters[%d]", i), f, 1, b.column)
		if err != nil {
			return Statement{}, err
		}
		where = append(where, cond)
	}
	var having []string
	for i, f := range r.Having {
		cond, err := b.filterTree(fmt.Sprintf("having[%d]", i), f, 1, b.aggregateOutput)
		if err != nil {
			return Statement{}, err
		}
		having = append(having, cond)
	}
	if tr := r.TimeRange; tr != nil {
		conds, err := b.timeRange(*tr)
		if err != nil {
			return Statement{}, err
		}
		where = append(where, conds...)
	}

	// ORDER BY, with tie-breakers so that offsets page stably.
	var order []string
	var ordered []string
	for i, o := range r.OrderBy {
		field := fmt.Sprintf("orderBy[%d]", i)
		if aggregated {
			if !slices.Contains(r.GroupBy, o.Column) && !aliases[o.Column] {
				return Statement{}, reqErr(field+".column", "%q is neither a groupBy column nor an aggregate name", o.Column)
			}
		} else if _, err := b.output(field+".column", o.Column); err != nil {
			return Statement{}, err
		}
		sortExpr := schema.QuoteIdent(o.Column)
		if c, err := b.column(field+".column", o.Column); !aggregated && err == nil && c.expr != "" {
			sortExpr = c.sql() // a JSON path not among the columns has no alias to sort by
		}
		if slices.Contains(ordered, o.Column) {
			return Statement{}, reqErr(field+".column", "column %q is listed twice", o.Column)
		}
		dir := "ASC"
		if o.Desc {
			dir = "DESC"
		}
		order = append(order, sortExpr+" "+dir)
		ordered = append(ordered, o.Column)
	}
	tieBreak := t.SortingKey[1:] // the tenant column is constant
	if aggregated {
		tieBreak = r.GroupBy
	}
	for _, c := range tieBreak {
		if !slices.Contains(ordered, c) {
			order = append(order, schema.QuoteIdent(c)+" ASC")
			ordered = append(ordered, c)
		}
	}

	var sql strings.Builder
	fmt.Fprintf(&sql, "SELECT %s\nFROM %s", strings.Join(selects, ", "), t.qualified())
	if consistency == Final {
		// On a ClickHouse cluster t is a Distributed table and each shard
		// applies FINAL to its own rows alone. That is FINAL over the whole
		// table: the Distributed table shards rows by their tenant, the
		// first column of every key, so all versions of a row (same
		// tenant, same key) are on one shard (schema.Placement).
		sql.WriteString(" FINAL")
	}
	fmt.Fprintf(&sql, "\nWHERE %s", strings.Join(where, "\n  AND "))
	if len(r.GroupBy) > 0 {
		quoted := make([]string, len(r.GroupBy))
		for i, c := range r.GroupBy {
			quoted[i] = schema.QuoteIdent(c)
		}
		fmt.Fprintf(&sql, "\nGROUP BY %s", strings.Join(quoted, ", "))
	}
	if len(having) > 0 {
		fmt.Fprintf(&sql, "\nHAVING %s", strings.Join(having, "\n  AND "))
	}
	if len(order) > 0 {
		fmt.Fprintf(&sql, "\nORDER BY %s", strings.Join(order, ", "))
	}
	fmt.Fprintf(&sql, "\nLIMIT %d", pageSize+1)
	if in.Offset > 0 {
		fmt.Fprintf(&sql, " OFFSET %d", in.Offset)
	}
	return Statement{
		SQL:      sql.String(),
		Params:   b.params,
		Settings: readSettings(t, lim, consistency),
		Columns:  outCols,
		PageSize: pageSize,
	}, nil
}

// readSettings are the settings of every read of t: bounded time,
// memory, cores and result size, and setFinal's for a FINAL read.
func readSettings(t *Table, lim Limits, c Consistency) map[string]any {
	s := lim.resourceSettings()
	s["max_execution_time"] = seconds(lim.MaxExecutionTime)
	s["max_result_rows"] = lim.MaxResultRows
	s["max_result_bytes"] = lim.MaxResultBytes
	s["result_overflow_mode"] = "throw"
	if c == Final {
		setFinal(s, t)
	}
	return s
}

// setFinal adds the settings of every FINAL read and export of t. FINAL
// merges only within partitions when every column of t's partition key is
// in its sorting key: then two versions of one row, which share the
// sorting key, share the partition too, and a partition that is one
// merged part is read without merging (docs/shaping-tables.md). That holds
// for every table walhouse creates: schema.Layout refuses a partition_by
// column outside order_by, --partition-by takes a primary-key column and
// tenant partitions the tenant column; a row whose key columns change is
// moved by a tombstone at its old key, in its old partition. ClickHouse
// 24.1+ derives the same by itself; the setting says it to older servers.
// A table partitioned on another column (made by hand) gets 0: FINAL
// merges across partitions, whatever a settings profile says, or it would
// return a row's old and new versions both. Every other FINAL setting
// keeps ClickHouse's default: none measured better for tenant-filtered
// reads on every server (docs/benchmarks.md, FINAL reads), and
// optimize_move_to_prewhere_if_final would filter before FINAL picks a
// row's newest version.
func setFinal(s map[string]any, t *Table) {
	if t.partitionOutsideKey {
		s["do_not_merge_across_partitions_select_final"] = 0
		return
	}
	s["do_not_merge_across_partitions_select_final"] = 1
}

// tenantValue presents the tenant (always text, from the API key) as the
// JSON value bindValue expects for the tenant column's type.
func tenantValue(t colType, tenant string) any {
	if t.Kind == kindBool {
		b, err := strconv.ParseBool(tenant)
		if err != nil {
			return tenant
		}
		return b
	}
	return tenant
}

type builder struct {
	t      *Table
	params map[string]string
	n      int // parameters p0…p(n-1) are bound
	zones  map[string]bool
	// buckets are the SQL of each bucket, by name.
	buckets map[string]string
	// aggTypes are the result types of the aggregates, by name, that
	// HAVING compares values with.
	aggTypes map[string]colType
	// nodes counts the comparisons and groups of filters and having.
	nodes int
}

// column returns a readable column, or a RequestError naming field.
func (b *builder) column(field, name string) (Column, error) {
	c, ok := b.t.Column(name)
	if ok && name != schema.DeletedColumn {
		return c, nil
	}
	if c, ok, err := jsonPathColumn(b.t, field, name); ok || err != nil {
		return c, err
	}
	return Column{}, reqErr(field, "table %q has no column %q; GET /v1/tables lists its columns (and a JSON column's paths: column.key.key)", b.t.Name, name)
}

// bind adds a parameter for v compared with c and returns its placeholder.
func (b *builder) bind(field string, c Column, v any) (string, error) {
	text, err := c.typ.bindValue(v)
	if err != nil {
		return "", reqErr(field, "column %q (%s): %v", c.Name, c.Type, err)
	}
	name := "p" + strconv.Itoa(b.n)
	b.n++
	b.params[name] = text
	return "{" + name + ":" + c.typ.Param + "}", nil
}

// filter builds one comparison; resolve finds what its column names (a
// table column for WHERE, an aggregate for HAVING).
func (b *builder) filter(field string, f Filter, resolve resolver) (string, error) {
	c, err := resolve(field+".column", f.Column)
	if err != nil {
		return "", err
	}
	c = c.forValue(f.Value)
	col := c.sql()
	if c.typ.Kind == kindOther {
		return "", reqErr(field+".column", "column %q is %s, which filters cannot compare", c.Name, c.Type)
	}
	switch f.Op {
	case OpIsNull, OpNotNull:
		if f.Value != nil {
			return "", reqErr(field+".value", "must be absent for %s", f.Op)
		}
		if f.Op == OpIsNull {
			return "isNull(" + col + ")", nil
		}
		return "isNotNull(" + col + ")", nil
	case OpEq, OpNe, OpLt, OpLe, OpGt, OpGe:
		if c.typ.Kind == kindBool && f.Op != OpEq && f.Op != OpNe {
			return "", reqErr(field+".op", "boolean column %q allows only = and !=", c.Name)
		}
		if f.Value == nil {
			return "", reqErr(field+".value", "is required for %s (use is_null to match NULL)", f.Op)
		}
		ph, err := b.bind(field+".value", c, f.Value)
		if err != nil {
			return "", err
		}
		return col + " " + string(f.Op) + " " + ph, nil
	case OpIn, OpNotIn:
		vals, ok := f.Value.([]any)
		if !ok || len(vals) == 0 {
			return "", reqErr(field+".value", "must be a non-empty array for %s", f.Op)
		}
		if len(vals) > maxInValues {
			return "", reqErr(field+".value", "has %d values, more than the %d allowed", len(vals), maxInValues)
		}
		phs := make([]string, len(vals))
		for i, v := range vals {
			if phs[i], err = b.bind(fmt.Sprintf("%s.value[%d]", field, i), c, v); err != nil {
				return "", err
			}
		}
		kw := " IN ("
		if f.Op == OpNotIn {
			kw = " NOT IN ("
		}
		return col + kw + strings.Join(phs, ", ") + ")", nil
	case OpLike, OpPrefix:
		if c.typ.Kind != kindString {
			return "", reqErr(field+".op", "%s applies to string columns; %q is %s", f.Op, c.Name, c.Type)
		}
		ph, err := b.bind(field+".value", c, f.Value)
		if err != nil {
			return "", err
		}
		if f.Op == OpLike {
			return col + " LIKE " + ph, nil
		}
		return "startsWith(" + col + ", " + ph + ")", nil
	default:
		return "", reqErr(field+".op", "%q is not one of = != < <= > >= in not_in is_null not_null like prefix", f.Op)
	}
}

func (b *builder) timeRange(tr TimeRange) ([]string, error) {
	c, err := b.column("timeRange.column", tr.Column)
	if err != nil {
		return nil, err
	}
	if c.typ.Kind != kindDate && c.typ.Kind != kindDateTime {
		return nil, reqErr("timeRange.column", "column %q is %s; a time range needs a Date or DateTime column", c.Name, c.Type)
	}
	if tr.Last != "" {
		if tr.From != "" || tr.To != "" {
			return nil, reqErr("timeRange.last", "excludes from and to: set last, or from and to")
		}
		cond, err := b.lastCondition(c, tr.Last)
		if err != nil {
			return nil, err
		}
		return []string{cond}, nil
	}
	if tr.From == "" && tr.To == "" {
		return nil, reqErr("timeRange", "set from, to, both, or last")
	}
	var conds []string
	if tr.From != "" {
		ph, err := b.bind("timeRange.from", c, tr.From)
		if err != nil {
			return nil, err
		}
		conds = append(conds, c.sql()+" >= "+ph)
	}
	if tr.To != "" {
		ph, err := b.bind("timeRange.to", c, tr.To)
		if err != nil {
			return nil, err
		}
		conds = append(conds, c.sql()+" < "+ph)
	}
	return conds, nil
}

// aggregate builds one aggregate, its output name and the type of its
// result (for HAVING).
func (b *builder) aggregate(field string, a Aggregate) (expr, alias string, typ colType, err error) {
	var col Column
	if a.Column != "" {
		if col, err = b.column(field+".column", a.Column); err != nil {
			return "", "", typ, err
		}
	}
	if a.Q != nil && a.Fn != "quantile" {
		return "", "", typ, reqErr(field+".q", "applies to quantile only")
	}
	switch a.Fn {
	case "count":
		expr = "count()"
		if a.Column != "" {
			expr = "count(" + col.sql() + ")"
		}
		typ = parseColType("UInt64")
	case "sum", "avg", "min", "max", "uniq", "uniqExact", "quantile":
		if a.Column == "" {
			return "", "", typ, reqErr(field+".column", "%s needs a column", a.Fn)
		}
		if (a.Fn == "sum" || a.Fn == "avg") && !col.typ.Kind.numeric() {
			return "", "", typ, reqErr(field+".column", "%s needs a numeric column; %q is %s", a.Fn, col.Name, col.Type)
		}
		if (a.Fn == "min" || a.Fn == "max") && col.typ.Kind == kindOther {
			return "", "", typ, reqErr(field+".column", "%s cannot order %q (%s)", a.Fn, col.Name, col.Type)
		}
		expr = a.Fn + "(" + col.sql() + ")"
		if a.Fn == "quantile" {
			// ClickHouse's quantile takes neither Date32 nor text: numbers
			// and timestamps only.
			if !col.typ.Kind.numeric() && col.typ.Kind != kindDateTime {
				return "", "", typ, reqErr(field+".column", "quantile needs a numeric or timestamp column; %q is %s", col.Name, col.Type)
			}
			if a.Q == nil || !(*a.Q >= 0 && *a.Q <= 1) {
				return "", "", typ, reqErr(field+".q", "quantile needs q from 0 to 1 (0.5 is the median)")
			}
			// The level is a validated number, written as one: ClickHouse's
			// parametric functions take constants.
			expr = "quantile(" + strconv.FormatFloat(*a.Q, 'g', -1, 64) + ")(" + col.sql() + ")"
		}
		typ = aggregateType(a.Fn, col.typ)
	default:
		return "", "", typ, reqErr(field+".fn", "%q is not one of count sum avg min max uniq uniqExact quantile", a.Fn)
	}
	alias = a.As
	if alias == "" {
		alias = a.Fn
		if a.Column != "" {
			alias += "_" + a.Column
		}
		if !aliasRe.MatchString(alias) {
			return "", "", typ, reqErr(field+".as", "the default name %q is not a plain name; set \"as\" to letters, digits and _", alias)
		}
	}
	if !aliasRe.MatchString(alias) {
		return "", "", typ, reqErr(field+".as", "%q must be 1-64 letters, digits or _, not starting with a digit", alias)
	}
	if _, clash := b.t.Column(alias); clash {
		return "", "", typ, reqErr(field+".as", "%q is also a column of the table; choose another name", alias)
	}
	return expr, alias, typ, nil
}
