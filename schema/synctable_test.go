package schema

import (
	"strings"
	"testing"
)

// TestSyncTableStatements checks the statements that create (or bring up
// to date) the sync table on one server and on a cluster against
// testdata/sync_table*.sql.golden.
func TestSyncTableStatements(t *testing.T) {
	for name, p := range map[string]Placement{
		"sync_table":         {Database: "walhouse"},
		"sync_table_cluster": {Database: "walhouse", Cluster: "main"},
	} {
		golden(t, name+".sql", strings.Join(SyncTableStatements(p), ";\n")+";\n")
	}
	if got, want := SyncTableDDL("walhouse"), SyncTableStatements(Placement{Database: "walhouse"})[0]; got != want {
		t.Errorf("SyncTableDDL = %s\nwant the first statement of SyncTableStatements, %s", got, want)
	}
}
