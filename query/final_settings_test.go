package query

import "testing"

// TestFinalAcrossPartitions checks when FINAL reads and exports merge
// within partitions only: for the tables walhouse creates (every partition
// column in the sorting key), not for a table partitioned on another
// column, where it would return a row's old and new versions both.
func TestFinalAcrossPartitions(t *testing.T) {
	for _, tc := range []struct {
		name                string
		partitionOutsideKey bool
		consistency         Consistency
		want                any // nil: not set
	}{
		{name: "walhouse's table, FINAL", consistency: Final, want: 1},
		{name: "walhouse's table, approximate", consistency: Approximate, want: nil},
		{name: "partition column outside the sorting key, FINAL", partitionOutsideKey: true, consistency: Final, want: 0},
		{name: "partition column outside the sorting key, approximate", partitionOutsideKey: true, consistency: Approximate, want: nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tbl := ordersTable()
			tbl.partitionOutsideKey = tc.partitionOutsideKey
			st, err := BuildSelect(SelectInput{Table: tbl, Tenant: "acme", Req: Request{Columns: []string{"id"}, Consistency: tc.consistency}})
			if err != nil {
				t.Fatal(err)
			}
			if got := st.Settings["do_not_merge_across_partitions_select_final"]; got != tc.want {
				t.Errorf("select: do_not_merge_across_partitions_select_final = %v, want %v", got, tc.want)
			}
			if tc.consistency != Final {
				return
			}
			ex, err := BuildExport(ExportInput{Table: tbl, Tenant: "acme", Subject: Subject{Column: "customer_id", Value: "cus_42"}})
			if err != nil {
				t.Fatal(err)
			}
			if got := ex.Settings["do_not_merge_across_partitions_select_final"]; got != tc.want {
				t.Errorf("export: do_not_merge_across_partitions_select_final = %v, want %v", got, tc.want)
			}
		})
	}
}
