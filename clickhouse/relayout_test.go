package clickhouse

import (
	"testing"

	"github.com/walhouse/walhouse/schema"
)

// TestCopyPlan checks the statements a relayout copies rows with: without
// a type change they are as before column types were relayouted (every
// column as it is); with one, the column goes through its conversion, and
// a copy into the new table after the swap leaves out the rows it has.
func TestCopyPlan(t *testing.T) {
	p := schema.Placement{Database: "wh"}
	retype := []schema.Retype{{Column: "price", From: "Nullable(Decimal(12, 2))", To: "Nullable(String)", Expr: "CAST(`price` AS Nullable(String))"}}
	for _, tc := range []struct {
		name string
		got  string
		want string
	}{
		{"final, same types",
			copyPlan{from: "orders", to: "_walhouse_relayout_orders", key: []string{"tenant_id", "id"}}.final(p),
			"INSERT INTO `wh`.`_walhouse_relayout_orders` SELECT * FROM `wh`.`orders` FINAL UNION ALL SELECT * FROM `wh`.`orders` WHERE `_is_deleted` = 1 SETTINGS transform_null_in = 1"},
		{"final, a column converted, rows present left out",
			copyPlan{from: "_walhouse_relayout_orders", to: "orders", key: []string{"tenant_id", "id"}, retype: retype, skipPresent: true}.final(p),
			"INSERT INTO `wh`.`orders` SELECT * REPLACE (CAST(`price` AS Nullable(String)) AS `price`) FROM `wh`.`_walhouse_relayout_orders` FINAL WHERE 1 AND (`tenant_id`, `id`, `_version`, `_is_deleted`) NOT IN (SELECT (`tenant_id`, `id`, `_version`, `_is_deleted`) FROM `wh`.`orders`) " +
				"UNION ALL SELECT * REPLACE (CAST(`price` AS Nullable(String)) AS `price`) FROM `wh`.`_walhouse_relayout_orders` WHERE `_is_deleted` = 1 AND (`tenant_id`, `id`, `_version`, `_is_deleted`) NOT IN (SELECT (`tenant_id`, `id`, `_version`, `_is_deleted`) FROM `wh`.`orders`) SETTINGS transform_null_in = 1"},
		{"parts, same types",
			copyPlan{from: "orders", to: "_walhouse_relayout_orders", key: []string{"tenant_id", "id"}}.parts(p, []string{"'all_1_1_0'", "'all_2_2_0'"}),
			"INSERT INTO `wh`.`_walhouse_relayout_orders` SELECT * FROM `wh`.`orders` WHERE _part IN ('all_1_1_0', 'all_2_2_0') SETTINGS transform_null_in = 1"},
		{"parts after the swap, a column converted",
			copyPlan{from: "_walhouse_relayout_orders", to: "orders", key: []string{"tenant_id", "id"}, retype: retype, skipPresent: true}.parts(p, []string{"'all_3_3_0'"}),
			"INSERT INTO `wh`.`orders` SELECT * REPLACE (CAST(`price` AS Nullable(String)) AS `price`) FROM `wh`.`_walhouse_relayout_orders` WHERE _part IN ('all_3_3_0') AND (`tenant_id`, `id`, `_version`, `_is_deleted`) NOT IN (SELECT (`tenant_id`, `id`, `_version`, `_is_deleted`) FROM `wh`.`orders` WHERE `_version` >= (SELECT min(`_version`) FROM `wh`.`_walhouse_relayout_orders` WHERE _part IN ('all_3_3_0'))) SETTINGS transform_null_in = 1"},
	} {
		if tc.got != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.name, tc.got, tc.want)
		}
	}
}

// TestNarrowedCopy checks the statements of a relayout that narrows a
// Decimal: one query counts the values each narrowed column refuses and
// clamps, with example keys; the view forwards the rows it takes and
// leaves out those it refuses; a copy after the swap can leave them out.
func TestNarrowedCopy(t *testing.T) {
	p := schema.Placement{Database: "wh"}
	retype := []schema.Retype{
		{Column: "status", From: "Nullable(String)", To: "LowCardinality(Nullable(String))", Expr: "CAST(`status` AS LowCardinality(Nullable(String)))"},
		{Column: "amount", From: "Nullable(Decimal(20, 4))", To: "Nullable(Decimal(12, 2))", Expr: "GUARDED(`amount`)", Forward: "CLAMPED(`amount`)", Refused: "R(`amount`)", Clamped: "C(`amount`)"},
		{Column: "fee", From: "Nullable(Decimal(38, 4))", To: "Nullable(Decimal(36, 4))", Expr: "CLAMPED(`fee`)", Clamped: "C(`fee`)"},
	}
	c := copyPlan{from: "orders", to: "_walhouse_relayout_orders", key: []string{"tenant_id", "id"}, retype: retype}
	for _, tc := range []struct {
		name string
		got  string
		want string
	}{
		{"check of the rows the copy copies",
			c.checkNarrowed(c.finalRows(p, "*")),
			"SELECT n.1, n.2, n.3, n.4 FROM (SELECT [tuple('amount', countIf(R(`amount`)), countIf(C(`amount`)), groupArrayIf(5)(toString((`tenant_id`, `id`)), R(`amount`))), " +
				"tuple('fee', countIf(0), countIf(C(`fee`)), groupArrayIf(5)(toString((`tenant_id`, `id`)), 0))] AS a FROM (" +
				"SELECT * FROM `wh`.`orders` FINAL UNION ALL SELECT * FROM `wh`.`orders` WHERE `_is_deleted` = 1)) " +
				"ARRAY JOIN a AS n SETTINGS transform_null_in = 1"},
		{"check of new parts",
			c.checkNarrowed(c.partRows(p, []string{"'all_3_3_0'"})),
			"SELECT n.1, n.2, n.3, n.4 FROM (SELECT [tuple('amount', countIf(R(`amount`)), countIf(C(`amount`)), groupArrayIf(5)(toString((`tenant_id`, `id`)), R(`amount`))), " +
				"tuple('fee', countIf(0), countIf(C(`fee`)), groupArrayIf(5)(toString((`tenant_id`, `id`)), 0))] AS a FROM (SELECT * FROM `wh`.`orders` WHERE _part IN ('all_3_3_0'))) " +
				"ARRAY JOIN a AS n SETTINGS transform_null_in = 1"},
		{"no narrowed column: no check",
			copyPlan{from: "orders", retype: retype[:1]}.checkNarrowed("SELECT 1"), ""},
		{"the copies fail on a refused value",
			c.parts(p, []string{"'all_3_3_0'"}),
			"INSERT INTO `wh`.`_walhouse_relayout_orders` SELECT * REPLACE (CAST(`status` AS LowCardinality(Nullable(String))) AS `status`, GUARDED(`amount`) AS `amount`, CLAMPED(`fee`) AS `fee`) FROM `wh`.`orders` WHERE _part IN ('all_3_3_0') SETTINGS transform_null_in = 1"},
		{"the view forwards what fits and leaves the rest out, testing the values before their conversion",
			"SELECT " + viewList(retype) + " FROM " + fitting("`wh`.`orders`", retype, ""),
			"SELECT * REPLACE (CAST(`status` AS LowCardinality(Nullable(String))) AS `status`, CLAMPED(`amount`) AS `amount`, CLAMPED(`fee`) AS `fee`) FROM (SELECT * FROM `wh`.`orders` WHERE NOT (R(`amount`)))"},
		{"after the swap, refused rows left out",
			copyPlan{from: "_walhouse_relayout_orders", to: "orders", key: []string{"tenant_id", "id"}, retype: retype, skipPresent: true, skipRefused: true}.parts(p, []string{"'all_3_3_0'"}),
			"INSERT INTO `wh`.`orders` SELECT * REPLACE (CAST(`status` AS LowCardinality(Nullable(String))) AS `status`, CLAMPED(`amount`) AS `amount`, CLAMPED(`fee`) AS `fee`) " +
				"FROM (SELECT * FROM `wh`.`_walhouse_relayout_orders` WHERE _part IN ('all_3_3_0') AND NOT (R(`amount`))) WHERE 1 AND (`tenant_id`, `id`, `_version`, `_is_deleted`) NOT IN (SELECT (`tenant_id`, `id`, `_version`, `_is_deleted`) FROM `wh`.`orders` WHERE `_version` >= (SELECT min(`_version`) FROM `wh`.`_walhouse_relayout_orders` WHERE _part IN ('all_3_3_0'))) SETTINGS transform_null_in = 1"},
		{"a resumed copy, refused rows left out after FINAL",
			copyPlan{from: "_walhouse_relayout_orders", to: "orders", key: []string{"tenant_id", "id"}, retype: retype, skipRefused: true}.final(p),
			"INSERT INTO `wh`.`orders` SELECT * REPLACE (CAST(`status` AS LowCardinality(Nullable(String))) AS `status`, CLAMPED(`amount`) AS `amount`, CLAMPED(`fee`) AS `fee`) FROM (SELECT * FROM `wh`.`_walhouse_relayout_orders` FINAL WHERE NOT (R(`amount`))) " +
				"UNION ALL SELECT * REPLACE (CAST(`status` AS LowCardinality(Nullable(String))) AS `status`, CLAMPED(`amount`) AS `amount`, CLAMPED(`fee`) AS `fee`) FROM (SELECT * FROM `wh`.`_walhouse_relayout_orders` WHERE `_is_deleted` = 1 AND NOT (R(`amount`))) " +
				"WHERE `_is_deleted` = 1 SETTINGS transform_null_in = 1"},
	} {
		if tc.got != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.name, tc.got, tc.want)
		}
	}
}
