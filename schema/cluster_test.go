package schema

import (
	"strings"
	"testing"

	"github.com/walhouse/walhouse/record"
)

// TestClusterTable checks the statements of a table on a cluster against
// testdata/*_cluster.sql.golden: the replicated local tables ON CLUSTER
// (Keeper path per shard, with the database and the escaped table name),
// then the Distributed table over them, sharded by tenant.
func TestClusterTable(t *testing.T) {
	cols := []record.Column{
		{Name: "org", Type: "int4", TypMod: -1, Key: true, Attnum: 1},
		{Name: "id", Type: "int8", TypMod: -1, Key: true, Attnum: 2},
		{Name: "created_on", Type: "date", TypMod: -1, Key: true, Attnum: 3},
		{Name: "note", Type: "text", TypMod: -1, Attnum: 4},
	}
	for name, src := range map[string]record.Source{
		"orders_cluster": {Schema: "sales", Table: "orders"},
		// A name that would add a Keeper path level and hold a macro, were
		// it not escaped.
		"odd_name_cluster": {Schema: "public", Table: "a/b {shard}"},
	} {
		tbl, err := NewTable(src, "org", cols, Options{Database: "walhouse", Cluster: "main", PartitionBy: "created_on"})
		if err != nil {
			t.Fatal(err)
		}
		golden(t, name+".sql", tbl.CreateDDL(0x16B3748)+";\n"+tbl.DistributedDDL()+";\n")
	}

	one, err := NewTable(record.Source{Schema: "sales", Table: "orders"}, "org", cols, Options{Database: "walhouse"})
	if err != nil {
		t.Fatal(err)
	}
	if d := one.DistributedDDL(); d != "" {
		t.Errorf("DistributedDDL on one server = %q, want none", d)
	}
}

// TestPlacementStatements checks the databases, ALTER and DROP statements
// of one server and of a cluster against testdata/placement.sql.golden.
func TestPlacementStatements(t *testing.T) {
	var b strings.Builder
	for _, p := range []Placement{{Database: "walhouse"}, {Database: "wal`house", Cluster: "main"}} {
		b.WriteString("-- " + p.Database + " on cluster " + QuoteString(p.Cluster) + "\n")
		stmts := p.CreateDatabases()
		stmts = append(stmts, p.Alter("orders", "MODIFY COMMENT "+QuoteString(SourceComment(record.Source{Schema: "public", Table: "orders"})))...)
		stmts = append(stmts, p.Drop("orders")...)
		for _, s := range stmts {
			b.WriteString(s + ";\n")
		}
	}
	golden(t, "placement.sql", b.String())
}

func TestReplicaPath(t *testing.T) {
	tests := []struct {
		p     Placement
		table string
		want  string
	}{
		{Placement{Database: "walhouse", Cluster: "c"}, "orders", "/clickhouse/tables/{shard}/walhouse_local/orders"},
		{Placement{Database: "walhouse", Cluster: "c"}, "sales__orders", "/clickhouse/tables/{shard}/walhouse_local/sales__orders"},
		{Placement{Database: "a/b", Cluster: "c"}, "x/y", "/clickhouse/tables/{shard}/a%2Fb_local/x%2Fy"},
		{Placement{Database: "w", Cluster: "c"}, "{replica} é", "/clickhouse/tables/{shard}/w_local/%7Breplica%7D%20%C3%A9"},
	}
	for _, tc := range tests {
		if got := tc.p.ReplicaPath(tc.table); got != tc.want {
			t.Errorf("ReplicaPath(%q) in %q = %q, want %q", tc.table, tc.p.Database, got, tc.want)
		}
	}
	// Distinct tables never share a path: escaping is injective.
	seen := map[string]string{}
	for _, name := range []string{"a_b", "a/b", "a%2Fb", "a b", "a%20b", "A_B"} {
		path := Placement{Database: "w", Cluster: "c"}.ReplicaPath(name)
		if other, ok := seen[path]; ok {
			t.Errorf("tables %q and %q share the path %s", other, name, path)
		}
		seen[path] = name
	}
}

func TestShardingKey(t *testing.T) {
	if got, want := ShardingKey("tenant`id"), "cityHash64(toString(`tenant\\`id`))"; got != want {
		t.Errorf("ShardingKey = %s, want %s", got, want)
	}
}
