package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walhouse/walhouse/harness/testenv"
	"github.com/walhouse/walhouse/record"
	"github.com/walhouse/walhouse/schema"
	"github.com/walhouse/walhouse/verify"
)

// compareAs says how a column is turned into the same text on both sides.
type compareAs uint8

const (
	// asText: PostgreSQL's ::text against ClickHouse's toString (integers,
	// bool as true/false, uuid, date).
	asText compareAs = iota
	// asBytes: the UTF-8 bytes of the PostgreSQL output (format('%s'), so
	// char(n) keeps its padding), in hex, against the ClickHouse String's.
	// Exact for any character, and a diff stays on one line.
	asBytes
	// asFormat: the PostgreSQL output as is, against the ClickHouse String
	// (types stored as their text whose output has no control characters).
	asFormat
	asFloat4 // the IEEE bits (big-endian hex), NaN as "nan"
	asFloat8
	asNumeric     // trim_scale against toString(Decimal)
	asBytea       // encode(hex) against hex
	asTimestamp   // to_char against toString(DateTime64(6))
	asTimestampTZ // the same, in UTC
	asArray       // array_to_json against toJSONString
)

// typeColumn is one column of the type matrix and the values it takes, as
// SQL expressions.
type typeColumn struct {
	name, typ string
	as        compareAs
	vals      []string
}

func (c typeColumn) pgExpr() string {
	q := pgx.Identifier{c.name}.Sanitize()
	var e string
	switch c.as {
	case asText:
		e = q + "::text"
	case asBytes:
		e = fmt.Sprintf("encode(convert_to(format('%%s', %s), 'UTF8'), 'hex')", q)
	case asFormat:
		e = fmt.Sprintf("format('%%s', %s)", q)
	case asFloat4:
		e = fmt.Sprintf("CASE WHEN %s = 'NaN' THEN 'nan' ELSE encode(float4send(%s), 'hex') END", q, q)
	case asFloat8:
		e = fmt.Sprintf("CASE WHEN %s = 'NaN' THEN 'nan' ELSE encode(float8send(%s), 'hex') END", q, q)
	case asNumeric:
		e = fmt.Sprintf("trim_scale(%s)::text", q)
	case asBytea:
		e = fmt.Sprintf("encode(%s, 'hex')", q)
	case asTimestamp:
		e = fmt.Sprintf("to_char(%s, 'YYYY-MM-DD HH24:MI:SS.US')", q)
	case asTimestampTZ:
		e = fmt.Sprintf("to_char(%s AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US')", q)
	case asArray:
		// A NULL array is stored empty (a known limit).
		return fmt.Sprintf("coalesce(array_to_json(%s)::text, '[]')", q)
	}
	// format('%s', NULL) is '', hence the explicit test.
	return fmt.Sprintf("CASE WHEN %s IS NULL THEN '<null>' ELSE %s END", q, e)
}

func (c typeColumn) chExpr() string {
	q := schema.QuoteIdent(c.name)
	var e string
	switch c.as {
	case asText, asNumeric, asTimestamp, asTimestampTZ:
		e = "toString(" + q + ")"
	case asBytes, asBytea:
		e = "lower(hex(" + q + "))"
	case asFormat:
		e = q
	case asFloat4, asFloat8:
		e = fmt.Sprintf("if(isNaN(%s), 'nan', lower(hex(reverse(unhex(hex(%s))))))", q, q)
	case asArray:
		return "toJSONString(" + q + ")"
	}
	return fmt.Sprintf("ifNull(%s, '<null>')", e)
}

// TestIntegrationTypes replicates one column of every PostgreSQL type that
// schema maps, with edge values (NaN, infinities, -0, extreme integers,
// numerics with many digits and trailing zeros, unicode, control
// characters, quotes and backslashes, empty values, padding, microseconds,
// the bounds of ClickHouse's date range, empty ranges, NULL array
// elements) and NULL in every nullable column. Rows are copied by the
// snapshot (tenant snap) and streamed (tenant stream), then updated and
// deleted; ClickHouse FINAL must equal PostgreSQL column by column. Values
// outside the documented limits (docs/limits.md) are not used.
func TestIntegrationTypes(t *testing.T) {
	p := newPipeline(t)
	// The session capture uses, so the outputs compared are the ones it
	// reads.
	p.exec(`SET DateStyle = 'ISO, YMD'; SET TimeZone = 'UTC'; SET IntervalStyle = 'postgres'; SET extra_float_digits = 3; SET bytea_output = 'hex'`)

	enum, domInt, domText := testenv.Name("mood"), testenv.Name("dint"), testenv.Name("dtext")
	qenum, qdomInt, qdomText := pgx.Identifier{enum}.Sanitize(), pgx.Identifier{domInt}.Sanitize(), pgx.Identifier{domText}.Sanitize()
	p.exec(fmt.Sprintf(`CREATE TYPE %s AS ENUM ('happy', 'with space', E'qu''ote \\ ü', '😀')`, qenum))
	p.exec(fmt.Sprintf(`CREATE DOMAIN %s AS int4 CHECK (VALUE > -1000)`, qdomInt))
	p.exec(fmt.Sprintf(`CREATE DOMAIN %s AS text CHECK (VALUE <> 'forbidden')`, qdomText))
	// Registered before the table's drop, so it runs after it.
	t.Cleanup(func() {
		_, _ = p.pg.Exec(context.Background(), fmt.Sprintf("DROP TYPE IF EXISTS %s; DROP DOMAIN IF EXISTS %s; DROP DOMAIN IF EXISTS %s", qenum, qdomInt, qdomText))
	})

	texts := []string{
		`'plain'`, `''`, `E'unicode é ü 中文 😀 \u00a0'`, `E'line1\nline2\r\nline3'`, `E'tab\there'`,
		`E'back\\slash \\\\ two \\n not a newline'`, `E'quotes '' " \x60'`, `E'ctrl \x01 \x1f \x7f'`,
		`'NULL'`, `E'sep \u2028 \u2029'`, `'  padded  '`, `'{"a": 1} /slash'`,
	}
	cols := []typeColumn{
		{"c_bool", "bool", asText, []string{`true`, `false`}},
		{"c_int2", "int2", asText, []string{`-32768`, `32767`, `0`}},
		{"c_int4", "int4", asText, []string{`-2147483648`, `2147483647`, `0`, `42`}},
		{"c_int8", "int8", asText, []string{`-9223372036854775808`, `9223372036854775807`, `0`}},
		{"c_oid", "oid", asText, []string{`0`, `4294967295`, `12345`}},
		{"c_float4", "float4", asFloat4, []string{`'NaN'`, `'Infinity'`, `'-Infinity'`, `'-0'`, `'1e-45'`, `'1.17549435e-38'`, `'3.4028235e38'`, `'0.1'`, `'-1.5'`, `'16777217'`}},
		{"c_float8", "float8", asFloat8, []string{`'NaN'`, `'Infinity'`, `'-Infinity'`, `'-0'`, `'5e-324'`, `'2.2250738585072014e-308'`, `'1.7976931348623157e308'`, `'0.1'`, `'1e16'`, `'-123.456'`, `'0.30000000000000004'`}},
		{"c_num", "numeric(20,6)", asNumeric, []string{`'-12345678901234.123456'`, `'0.000001'`, `'1.500000'`, `'99999999999999.999999'`, `'0'`, `'-0.5'`, `'7'`}},
		{"c_numu", "numeric", asNumeric, []string{`'-1.5'`, `'123456789012345678901234567890.12345678901234567890'`, `'1.2300'`, `'0.00000000000000000000000000000000000001'`,
			`'99999999999999999999999999999999999999.99999999999999999999999999999999999999'`, `'-99999999999999999999999999999999999999.1'`, `'-0.000'`, `'1000000'`, `'1e20'`}},
		{"c_text", "text", asBytes, texts},
		{"c_varchar", "varchar(40)", asBytes, texts},
		{"c_char", "char(8)", asBytes, []string{`'ab'`, `''`, `'é😀'`, `'full8chr'`, `' x'`, `E'a\nb'`}},
		{"c_name", "name", asBytes, []string{`'unicode é 😀'`, `''`, `E'quo"te \\ ''s'`, `'x y'`}},
		{"c_json", "json", asBytes, []string{`'{"b": 1, "a": [1, 2.50, "x"], "a": 2}'`, `'"\u00e9\ud83d\ude00 \u0000 é"'`, `'{"nested": {"deep": [{"x": null}]}}'`,
			`'[]'`, `'null'`, `'"line\nbreak \\ \" \/"'`, `E'  {"ws" :\n true }  '`}},
		{"c_jsonb", "jsonb", asBytes, []string{`'{"b": 1, "a": [1, 2.50, "x"], "a": 2}'`, `'"\u00e9\ud83d\ude00 é"'`, `'{"nested": {"deep": [{"x": null}]}}'`,
			`'[]'`, `'null'`, `'"line\nbreak \\ \" \/"'`, `'1e400'`}},
		{"c_bytea", "bytea", asBytea, []string{`'\x00'`, `'\xff00fe80'`, `''`, `'\x00000000'`, `'\x68656c6c6f'`}},
		{"c_uuid", "uuid", asText, []string{`'00000000-0000-0000-0000-000000000000'`, `'ffffffff-ffff-ffff-ffff-ffffffffffff'`, `'A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11'`}},
		{"c_date", "date", asText, []string{`'1900-01-01'`, `'2299-12-31'`, `'2024-02-29'`, `'1970-01-01'`, `'1969-12-31'`}},
		{"c_ts", "timestamp", asTimestamp, []string{`'1900-01-01 00:00:00'`, `'2262-04-11 23:47:16.854775'`, `'2024-02-29 12:34:56.123456'`, `'1970-01-01 00:00:00.000001'`,
			`'1969-12-31 23:59:59.999999'`, `'2000-01-01 00:00:00.5'`}},
		{"c_tstz", "timestamptz", asTimestampTZ, []string{`'1900-01-01 00:00:00+00'`, `'2262-04-11 23:47:16.854775+00'`, `'2024-02-29 12:34:56.123456+05:30'`,
			`'1969-12-31 23:59:59.999999-08'`, `'2024-03-31 02:30:00 Europe/Berlin'`, `'1901-12-13 20:45:52+00'`, `'1950-06-01 12:00:00.000001 America/New_York'`}},
		{"c_time", "time", asFormat, []string{`'00:00:00'`, `'23:59:59.999999'`, `'24:00:00'`, `'12:34:56.789'`}},
		{"c_timetz", "timetz", asFormat, []string{`'00:00:00+00'`, `'23:59:59.999999-12'`, `'12:34:56.789+05:30'`, `'10:00:00+14:59'`}},
		{"c_interval", "interval", asFormat, []string{`'1 year 2 months 3 days 04:05:06.789'`, `'-1 day +02:00:00'`, `'0'`, `'-178000000 years'`, `'1 microsecond'`, `'@ 1 hour ago'`}},
		{"c_inet", "inet", asFormat, []string{`'192.168.0.1'`, `'10.0.0.1/8'`, `'::1'`, `'2001:db8::1/64'`, `'0.0.0.0/0'`, `'::ffff:1.2.3.4'`, `'192.168.0.1/32'`, `'2001:db8::/128'`}},
		{"c_cidr", "cidr", asFormat, []string{`'10.0.0.0/8'`, `'192.168.1.0/24'`, `'2001:db8::/32'`, `'1.2.3.4/32'`, `'::1/128'`}},
		{"c_macaddr", "macaddr", asFormat, []string{`'08:00:2b:01:02:03'`, `'FF-FF-FF-FF-FF-FF'`}},
		{"c_macaddr8", "macaddr8", asFormat, []string{`'08:00:2b:01:02:03:04:05'`, `'08002b0102030405'`, `'08:00:2b:01:02:03'`}},
		{"c_money", "money", asFormat, []string{`'1234.56'`, `'-0.01'`, `'0'`, `'92233720368547758.07'`, `'-92233720368547758.08'`}},
		{"c_bit", "bit(4)", asFormat, []string{`B'1010'`, `B'0000'`, `B'1111'`}},
		{"c_varbit", "varbit", asFormat, []string{`B''`, `B'1'`, `B'101010101010101010101'`}},
		{"c_tsvector", "tsvector", asBytes, []string{`'a fat cat sat on a mat'`, `$$'it''s' 'back\\slash' café:1A 😀:2,3B$$`, `''`}},
		{"c_point", "point", asFormat, []string{`'(1,2)'`, `'(-1.5,1e+300)'`, `'(0,-0)'`, `'(NaN,Infinity)'`}},
		{"c_int4range", "int4range", asFormat, []string{`'[1,5)'`, `'empty'`, `'(,)'`, `'[-10,)'`, `'(1,2]'`}},
		{"c_tstzrange", "tstzrange", asBytes, []string{`'[2024-01-01 00:00:00+00,2024-02-01 00:00:00.5+05:30)'`, `'empty'`, `'(,2024-01-01 00:00:00+00]'`, `'[1900-01-01 00:00:00+00,infinity)'`}},
		{"c_xml", "xml", asBytes, []string{`'<a b="1">x &amp; y</a>'`, `'text only'`, `'<é>😀</é>'`, `''`, `'<?xml version="1.0"?><root/>'`, `E'<a>\n\t</a>'`,
			`E'<?xml version=\'1.1\'  encoding="UTF-8" standalone = \'yes\' ?>\n<a/>'`, `E'<?xml version="1.0"?>\n<a/>'`, `E'<?xml version="1.0"?>\n\n<b/>'`, `'<?xml-stylesheet href="s.xsl"?><c/>'`}},
		{"c_enum", qenum, asBytes, []string{`'happy'`, `'with space'`, `E'qu''ote \\ ü'`, `'😀'`}},
		{"c_domint", qdomInt, asText, []string{`-5`, `2147483647`, `0`}},
		{"c_domtext", qdomText, asBytes, []string{`'x'`, `''`, `E'multi\nline \\ "q"'`}},
		{"c_int4arr", "int4[]", asArray, []string{`'{}'`, `'{1,NULL,3}'`, `'{-2147483648,2147483647}'`, `'{NULL}'`, `'[0:1]={7,8}'`}},
		{"c_textarr", "text[]", asArray, []string{`'{}'`, `ARRAY['a,b', 'q"uote', NULL, 'NULL', '', E'back\\slash', '{brace}', ' spaced ', E'nl\n\ttab', 'é😀', E'\\"both\\"']`,
			`ARRAY[NULL, NULL]::text[]`, `ARRAY['']`, `'{"x y",z}'`}},
	}

	var defs, names []string
	rows := 0
	for _, c := range cols {
		defs = append(defs, pgx.Identifier{c.name}.Sanitize()+" "+c.typ)
		names = append(names, pgx.Identifier{c.name}.Sanitize())
		rows = max(rows, len(c.vals))
	}
	table, qt := p.table("types", fmt.Sprintf(`(tenant_id text, id int, %s, PRIMARY KEY (tenant_id, id))`, strings.Join(defs, ", ")))

	// value returns column c's value for row k: its values in turn, so each
	// appears in some row.
	value := func(c typeColumn, k int) string { return c.vals[k%len(c.vals)] }
	// insert adds rows 0..rows-1 with every value, and row `rows` with NULL
	// in every nullable column.
	insert := func(tenant string) {
		for k := 0; k <= rows; k++ {
			vals := make([]string, len(cols))
			for i, c := range cols {
				vals[i] = "NULL"
				if k < rows {
					vals[i] = value(c, k)
				}
			}
			p.exec(fmt.Sprintf(`INSERT INTO %s (tenant_id, id, %s) VALUES ($1, $2, %s)`, qt, strings.Join(names, ", "), strings.Join(vals, ", ")), tenant, k)
		}
	}
	// change updates and deletes rows of tenant, so each kind of value also
	// arrives as an update: row 0 becomes all NULL, the NULL row gets row
	// 0's values, row 1 gets other values, row 2 is deleted.
	change := func(tenant string) {
		nulls, first, other := make([]string, len(cols)), make([]string, len(cols)), make([]string, len(cols))
		for i, c := range cols {
			nulls[i] = names[i] + " = NULL"
			first[i] = names[i] + " = " + value(c, 0)
			other[i] = names[i] + " = " + value(c, 1+len(c.vals)/2)
		}
		p.exec(fmt.Sprintf(`UPDATE %s SET %s WHERE tenant_id = $1 AND id = 0`, qt, strings.Join(nulls, ", ")), tenant)
		p.exec(fmt.Sprintf(`UPDATE %s SET %s WHERE tenant_id = $1 AND id = $2`, qt, strings.Join(first, ", ")), tenant, rows)
		p.exec(fmt.Sprintf(`UPDATE %s SET %s WHERE tenant_id = $1 AND id = 1`, qt, strings.Join(other, ", ")), tenant)
		p.exec(fmt.Sprintf(`DELETE FROM %s WHERE tenant_id = $1 AND id = 2`, qt), tenant)
	}

	pgCols, chCols := []string{"tenant_id", "id::text"}, []string{"tenant_id", "toString(id)"}
	for _, c := range cols {
		pgCols = append(pgCols, c.pgExpr())
		chCols = append(chCols, c.chExpr())
	}
	pgQuery := fmt.Sprintf(`SELECT %s FROM %s AS t ORDER BY t.tenant_id, t.id`, strings.Join(pgCols, ", "), qt)
	chQuery := fmt.Sprintf(`SELECT %s FROM %s.%s FINAL WHERE _is_deleted = 0 ORDER BY tenant_id, id SETTINGS output_format_json_escape_forward_slashes = 0`,
		strings.Join(chCols, ", "), schema.QuoteIdent(p.database), schema.QuoteIdent(table))

	header := append([]string{"tenant_id", "id"}, names...)
	insert("snap") // copied by the snapshot
	capture := p.startCapture(table)
	sink := p.startSink()
	insert("stream")
	convergeColumns(t, p, header, pgQuery, chQuery, capture, sink)

	change("snap")
	change("stream")
	convergeColumns(t, p, header, pgQuery, chQuery, capture, sink)

	// walhouse verify's canonical forms agree: every type, every edge
	// value, nothing reported.
	v, err := verify.New(p.env.PG, p.ch, verify.WithDatabase(p.database), verify.WithBucketRows(4))
	if err != nil {
		t.Fatal(err)
	}
	res, err := v.Verify(context.Background(), record.Source{Schema: "public", Table: table})
	if err != nil {
		t.Fatalf("verify: %v", err)
	}
	if len(res.Mismatches) != 0 || res.RowsChecked == 0 {
		t.Errorf("verify of the type matrix: %d rows checked, differences %+v", res.RowsChecked, res.Mismatches)
	}
}

// convergeColumns waits until ClickHouse's rows equal PostgreSQL's, like
// pipeline.converge, and names each differing column of each row.
func convergeColumns(t *testing.T, p *pipeline, header []string, pgQuery, chQuery string, procs ...*testenv.Proc) {
	t.Helper()
	describe := func(want, got [][]string) string { return columnDiff(header, want, got) }
	p.convergeBy(90*time.Second, describe, pgQuery, chQuery, procs...)
}

// columnDiff lists the cells in which got differs from want, by row key
// (the first two columns) and column name; "" when equal.
func columnDiff(header []string, want, got [][]string) string {
	var b strings.Builder
	if len(want) != len(got) {
		fmt.Fprintf(&b, "PostgreSQL has %d rows, ClickHouse %d\n", len(want), len(got))
	}
	for i := range max(len(want), len(got)) {
		switch {
		case i >= len(want):
			fmt.Fprintf(&b, "row %d only in ClickHouse: %q\n", i, got[i])
		case i >= len(got):
			fmt.Fprintf(&b, "row %d only in PostgreSQL: %q\n", i, want[i])
		case len(want[i]) != len(got[i]):
			fmt.Fprintf(&b, "row %d: %d columns in PostgreSQL, %d in ClickHouse\n", i, len(want[i]), len(got[i]))
		default:
			for j := range want[i] {
				if want[i][j] != got[i][j] {
					fmt.Fprintf(&b, "%s/%s %s:\n  pg: %q\n  ch: %q\n", want[i][0], want[i][1], header[j], want[i][j], got[i][j])
				}
			}
		}
	}
	return b.String()
}
