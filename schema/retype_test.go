package schema

import (
	"errors"
	"strings"
	"testing"

	"github.com/walhouse/walhouse/record"
)

// TestPlanRetype is the table of the column type changes a relayout makes
// (every value kept exactly) and refuses, for a column created under one
// layout and relayouted under another.
func TestPlanRetype(t *testing.T) {
	cols := []record.Column{
		{Name: "tenant_id", Type: "text", TypMod: -1, Key: true, Attnum: 1},
		{Name: "id", Type: "int8", TypMod: -1, Key: true, Attnum: 2},
		{Name: "status", Type: "varchar", TypMod: -1, Attnum: 3},
		{Name: "mood", Type: "mood", Enum: true, TypMod: -1, Labels: []string{"new", "paid"}, Attnum: 4},
		{Name: "amount", Type: "numeric", TypMod: -1, Attnum: 5},
		{Name: "price", Type: "numeric", TypMod: numericMod(12, 2), Attnum: 6},
		{Name: "at", Type: "timestamptz", TypMod: -1, Attnum: 7},
		{Name: "payload", Type: "jsonb", TypMod: -1, Attnum: 8},
		{Name: "qty", Type: "int4", TypMod: -1, Attnum: 9},
	}
	src := record.Source{ID: "x", Schema: "sales", Table: "orders"}
	for _, tc := range []struct {
		name   string
		column string // the column concerned
		have   string // its ClickHouse type now
		layout string // its override; "" none
		want   string // the expression that converts it; "" no change
		err    string // part of the refusal
		// clamp is the layout's on_overflow clamp; refused and clamped
		// are the conditions of a narrower Decimal (Retype.Refused,
		// Clamped), and narrowed says to compare them.
		clamp            bool
		narrowed         bool
		refused, clamped string
		// orderBy and partitionBy are the layout's; none by default.
		orderBy     []string
		partitionBy string
	}{
		{name: "DateTime64 override removed into the sorting key: the relayout widens it", column: "at", have: "Nullable(DateTime64(3, 'UTC'))", orderBy: []string{"tenant_id", "at", "id"}, want: "CAST(`at` AS Nullable(DateTime64(6, 'UTC')))"},
		{name: "DateTime64 override removed into the sorting and partition keys", column: "at", have: "Nullable(DateTime64(3, 'UTC'))", orderBy: []string{"tenant_id", "at", "id"}, partitionBy: "toYYYYMM(at)", want: "CAST(`at` AS Nullable(DateTime64(6, 'UTC')))"},
		{name: "String override removed into the sorting key: the sink keeps it", column: "price", have: "Nullable(String)", orderBy: []string{"tenant_id", "price", "id"}},
		{name: "enum override removed into the sorting key: the relayout makes it text", column: "mood", have: "Nullable(Enum8('new' = 1))", orderBy: []string{"tenant_id", "mood", "id"}, want: "CAST(`mood` AS Nullable(String))"},
		{name: "same type", column: "status", have: "LowCardinality(Nullable(String))", layout: "LowCardinality(String)"},
		{name: "text to LowCardinality", column: "status", have: "Nullable(String)", layout: "LowCardinality(String)", want: "CAST(`status` AS LowCardinality(Nullable(String)))"},
		{name: "override removed: LowCardinality to String", column: "status", have: "LowCardinality(Nullable(String))", want: "CAST(`status` AS Nullable(String))"},
		{name: "enum to LowCardinality", column: "mood", have: "Nullable(Enum8('new' = 1, 'paid' = 2))", layout: "LowCardinality(String)", want: "CAST(`mood` AS LowCardinality(Nullable(String)))"},
		{name: "enum override removed: the sink widens it", column: "mood", have: "Nullable(Enum8('new' = 1, 'paid' = 2))"},
		{name: "enum labels: the sink's", column: "mood", have: "Nullable(Enum8('new' = 1))", layout: "Enum8"},
		{name: "text to enum", column: "mood", have: "Nullable(String)", layout: "Enum8", err: "no label of the Enum"},
		{name: "decimal widened", column: "amount", have: "Nullable(Decimal(12, 2))", layout: "Decimal(38, 4)", want: "CAST(`amount` AS Nullable(Decimal(38, 4)))"},
		{name: "decimal narrowed, dead_letter: beyond the range or more decimals refused", column: "amount", have: "Nullable(Decimal(76, 38))", layout: "Decimal(38, 4)", narrowed: true,
			refused: "ifNull(abs(`amount`) >= toDecimal256('1" + strings.Repeat("0", 34) + "', 0) OR toDecimal256(`amount`, 4) != `amount`, 0)"},
		{name: "decimal narrowed, clamp: beyond the range clamped, more decimals refused", column: "amount", have: "Nullable(Decimal(20, 4))", layout: "Decimal(12, 2)", clamp: true, narrowed: true,
			refused: "ifNull(toDecimal256(`amount`, 2) != `amount` AND NOT (abs(`amount`) >= toDecimal256('10000000000', 0)), 0)",
			clamped: "ifNull(abs(`amount`) >= toDecimal256('10000000000', 0), 0)",
			want: "CAST(if(throwIf(ifNull(toDecimal256(`amount`, 2) != `amount` AND NOT (abs(`amount`) >= toDecimal256('10000000000', 0)), 0), " +
				"'column amount holds a value that Decimal(12, 2) cannot hold exactly (on_overflow clamp): walhouse relayout stops rather than store another value; see its log for the rows and the fix') = 0, " +
				"if(ifNull(abs(`amount`) >= toDecimal256('10000000000', 0), 0), if(`amount` > 0, CAST('9999999999.99' AS Decimal(12, 2)), CAST('-9999999999.99' AS Decimal(12, 2))), accurateCastOrNull(`amount`, 'Decimal(12, 2)')), NULL) " +
				"AS Nullable(Decimal(12, 2)))"},
		{name: "decimal fewer integer digits, dead_letter", column: "amount", have: "Nullable(Decimal(38, 4))", layout: "Decimal(36, 4)", narrowed: true,
			refused: "ifNull(abs(`amount`) >= toDecimal256('1" + strings.Repeat("0", 32) + "', 0), 0)"},
		{name: "decimal fewer integer digits, clamp: nothing refused, nothing checked at run time", column: "amount", have: "Nullable(Decimal(38, 4))", layout: "Decimal(36, 4)", clamp: true, narrowed: true,
			clamped: "ifNull(abs(`amount`) >= toDecimal256('1" + strings.Repeat("0", 32) + "', 0), 0)",
			want:    "CAST(if(ifNull(abs(`amount`) >= toDecimal256('1" + strings.Repeat("0", 32) + "', 0), 0), if(`amount` > 0, CAST('" + strings.Repeat("9", 32) + ".9999' AS Decimal(36, 4)), CAST('-" + strings.Repeat("9", 32) + ".9999' AS Decimal(36, 4))), accurateCastOrNull(`amount`, 'Decimal(36, 4)')) AS Nullable(Decimal(36, 4)))"},
		{name: "decimal smaller scale, more integer digits: clamp bounds nothing", column: "amount", have: "Nullable(Decimal(20, 4))", layout: "Decimal(20, 2)", clamp: true, narrowed: true,
			refused: "ifNull(toDecimal256(`amount`, 2) != `amount`, 0)"},
		{name: "decimal all decimals, clamp: the bound below one", column: "amount", have: "Nullable(Decimal(20, 4))", layout: "Decimal(3, 3)", clamp: true, narrowed: true,
			refused: "ifNull(toDecimal256(`amount`, 3) != `amount` AND NOT (abs(`amount`) >= toDecimal256('1', 0)), 0)",
			clamped: "ifNull(abs(`amount`) >= toDecimal256('1', 0), 0)"},
		{name: "not Nullable decimal narrowed", column: "amount", have: "Decimal(20, 4)", layout: "Decimal(12, 2)", narrowed: true,
			refused: "ifNull(abs(`amount`) >= toDecimal256('10000000000', 0) OR toDecimal256(`amount`, 2) != `amount`, 0)"},
		{name: "numeric(12, 2) to String", column: "price", have: "Nullable(Decimal(12, 2))", layout: "String", want: "CAST(toDecimalString(accurateCastOrNull(`price`, 'Decimal(12, 2)'), 2) AS Nullable(String))"},
		{name: "numeric(12, 2) in Decimal(38, 4) to String", column: "price", have: "Nullable(Decimal(38, 4))", layout: "String", want: "CAST(toDecimalString(accurateCastOrNull(`price`, 'Decimal(38, 4)'), 2) AS Nullable(String))"},
		{name: "unconstrained numeric to String", column: "amount", have: "Nullable(Decimal(76, 38))", layout: "String", err: "unconstrained numeric"},
		{name: "decimal to Float64", column: "amount", have: "Nullable(Decimal(76, 38))", layout: "Float64", err: "nearest double"},
		{name: "Float64 to String", column: "amount", have: "Nullable(Float64)", layout: "String", err: "nearest double"},
		{name: "Float64 back to Decimal", column: "amount", have: "Nullable(Float64)", layout: "Decimal(38, 4)", err: "no conversion keeps every value"},
		{name: "String back to Decimal", column: "price", have: "Nullable(String)", layout: "Decimal(12, 2)", err: "no conversion keeps every value"},
		{name: "String override removed: the sink keeps it", column: "price", have: "Nullable(String)"},
		{name: "Float64 override removed: the sink's to refuse", column: "amount", have: "Nullable(Float64)"},
		{name: "more fractional digits", column: "at", have: "Nullable(DateTime64(3, 'UTC'))", layout: "DateTime64(6)", want: "CAST(`at` AS Nullable(DateTime64(6, 'UTC')))"},
		{name: "fewer fractional digits", column: "at", have: "Nullable(DateTime64(6, 'UTC'))", layout: "DateTime64(3)", err: "keeps 6 fractional digits; the new type 3"},
		{name: "DateTime64 override removed: the sink widens it", column: "at", have: "Nullable(DateTime64(3, 'UTC'))"},
		{name: "text to JSON", column: "payload", have: "Nullable(String)", layout: "JSON", err: "JSON type changes some values"},
		{name: "JSON override removed: the sink's", column: "payload", have: "Nullable(JSON)"},
		{name: "not Nullable to Nullable", column: "status", have: "String", layout: "LowCardinality(String)", want: "CAST(`status` AS LowCardinality(Nullable(String)))"},
		{name: "wider int, the sink's own", column: "qty", have: "Nullable(Int64)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := Layout{OrderBy: tc.orderBy, PartitionBy: tc.partitionBy}
			if tc.layout != "" {
				o := ColumnLayout{Type: tc.layout}
				if tc.clamp {
					o.OnOverflow = "clamp"
				}
				l.Columns = map[string]ColumnLayout{tc.column: o}
			}
			tbl, err := NewTable(src, "tenant_id", cols, Options{Database: "walhouse", Layouts: map[string]Layout{"sales.orders": l}})
			if err != nil {
				if tc.err != "" && strings.Contains(err.Error(), tc.err) {
					return // the layout itself is refused
				}
				t.Fatal(err)
			}
			var have []ExistingColumn
			for _, c := range tbl.Columns {
				typ := c.Type.DDL
				if c.Name == tc.column {
					typ = tc.have
				}
				have = append(have, ExistingColumn{Name: c.Name, Type: typ, Comment: strings.TrimSuffix(strings.TrimPrefix(columnComment(c.Source.Attnum, 0x16B3748), " COMMENT '"), "'")})
			}
			got, err := PlanRetype(tbl, have)
			if tc.err != "" {
				var ie *IncompatibleError
				if !errors.As(err, &ie) || ie.Column != tc.column || !strings.Contains(err.Error(), tc.err) ||
					!strings.Contains(err.Error(), tc.have) || !strings.Contains(ie.Fix, "--resnapshot sales.orders") {
					t.Fatalf("err = %v, want an *IncompatibleError on %s naming %s, %q and the fix", err, tc.column, tc.have, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case tc.narrowed && (len(got) != 1 || got[0].Column != tc.column || got[0].Refused != tc.refused || got[0].Clamped != tc.clamped || !got[0].Narrows() ||
				tc.want != "" && got[0].Expr != tc.want || tc.refused == "" && got[0].ForwardExpr() != got[0].Expr):
				t.Errorf("retypes %+v, want %s narrowed, refused if %s, clamped if %s, by %s", got, tc.column, tc.refused, tc.clamped, tc.want)
			case tc.narrowed:
			case tc.want == "" && len(got) != 0:
				t.Errorf("retypes %+v, want none", got)
			case tc.want != "" && (len(got) != 1 || got[0].Column != tc.column || got[0].From != tc.have || got[0].Expr != tc.want):
				t.Errorf("retypes %+v, want %s from %s by %s", got, tc.column, tc.have, tc.want)
			}
		})
	}
}

// TestWidenKeyColumnFailed checks that a sorting column the sink fails to
// widen (ClickHouse changes no key column's type) names the relayout, which
// builds the table with the new type, as the fix.
func TestWidenKeyColumnFailed(t *testing.T) {
	cols := []record.Column{
		{Name: "tenant_id", Type: "text", TypMod: -1, Key: true, Attnum: 1},
		{Name: "id", Type: "int8", TypMod: -1, Key: true, Attnum: 2},
		{Name: "at", Type: "timestamptz", TypMod: -1, Attnum: 3},
	}
	src := record.Source{ID: "x", Schema: "sales", Table: "orders"}
	for _, tc := range []struct {
		orderBy []string
		fix     string
	}{
		{[]string{"tenant_id", "at", "id"}, "run `walhouse relayout sales.orders`"},
		{nil, "change the ClickHouse column by hand"},
	} {
		tbl, err := NewTable(src, "tenant_id", cols, Options{Database: "walhouse", Layouts: map[string]Layout{"sales.orders": {OrderBy: tc.orderBy}}})
		if err != nil {
			t.Fatal(err)
		}
		cause := errors.New("ALTER of key column at is forbidden")
		err = (&Plan{Table: tbl}).Failed(Change{Op: WidenColumn, Column: "at", From: "Nullable(DateTime64(3, 'UTC'))", To: "Nullable(DateTime64(6, 'UTC'))"}, cause)
		var ie *IncompatibleError
		if !errors.As(err, &ie) || !errors.Is(err, cause) || !strings.Contains(ie.Fix, tc.fix) || !strings.Contains(ie.Fix, "--resnapshot sales.orders") {
			t.Errorf("order by %v: %v; want an *IncompatibleError whose fix says %q", tc.orderBy, err, tc.fix)
		}
	}
}
