package clickhouse

import (
	"strings"
	"testing"

	"gotest.tools/v3/golden"

	"github.com/walhouse/walhouse/schema"
)

// TestSyncTableStatements checks the statements that create (or bring up
// to date) the sync table on one server and on a cluster against
// testdata/sync_table*.sql.golden.
func TestSyncTableStatements(t *testing.T) {
	for name, p := range map[string]schema.Placement{
		"sync_table":         {Database: "walhouse"},
		"sync_table_cluster": {Database: "walhouse", Cluster: "main"},
	} {
		golden.Assert(t, strings.Join(syncTableStatements(p), ";\n")+";\n", name+".sql.golden")
	}
	if got, want := SyncTableDDL("walhouse"), syncTableStatements(schema.Placement{Database: "walhouse"})[0]; got != want {
		t.Errorf("SyncTableDDL = %s\nwant the first statement of syncTableStatements, %s", got, want)
	}
}
