package clickhouse

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

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
		golden(t, name+".sql", strings.Join(syncTableStatements(p), ";\n")+";\n")
	}
	if got, want := SyncTableDDL("walhouse"), syncTableStatements(schema.Placement{Database: "walhouse"})[0]; got != want {
		t.Errorf("SyncTableDDL = %s\nwant the first statement of syncTableStatements, %s", got, want)
	}
}

// golden compares got with testdata/<name>.golden (rewritten with -update).
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./clickhouse -run %s -update to create it)", err, t.Name())
	}
	if got != string(want) {
		t.Errorf("%s differs from %s:\n%s", name, path, got)
	}
}
