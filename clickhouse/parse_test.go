package clickhouse

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/walhouse/walhouse/harness/testenv"
	"github.com/walhouse/walhouse/schema"
)

// testConn connects to the local ClickHouse for the length of the test;
// without one the test is skipped (or fails under WALHOUSE_INTEGRATION=1).
func testConn(t *testing.T) driver.Conn {
	t.Helper()
	env := testenv.Require(t, "clickhouse")
	conn, err := Open(context.Background(), env.ClickHouse)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// goldenStatements returns the SQL statements of the golden files of
// schema and clickhouse (the statements walhouse generates, on one server
// and on a cluster), by file: each file's statements are separated by
// ";\n", "--" lines are notes. Files of incompatible plans hold an error,
// not SQL, and are left out.
func goldenStatements(t *testing.T) map[string][]string {
	t.Helper()
	var files []string
	for _, dir := range []string{"testdata", filepath.Join("..", "schema", "testdata")} {
		m, err := filepath.Glob(filepath.Join(dir, "*.golden"))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	out := map[string][]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(string(b), "-- incompatible") {
			continue
		}
		var lines []string
		for _, l := range strings.Split(string(b), "\n") {
			if !strings.HasPrefix(l, "-- ") {
				lines = append(lines, l)
			}
		}
		for _, s := range strings.Split(strings.Join(lines, "\n"), ";\n") {
			if s = strings.TrimSpace(s); s != "" {
				out[f] = append(out[f], s)
			}
		}
	}
	return out
}

// Every statement of the golden files parses in ClickHouse: the engine's
// own parser (formatQuery) reads it, so a syntax error in generated DDL
// fails here although the embedded engine has no Keeper and no cluster to
// run the cluster's statements. TestIntegrationCluster runs them for real.
func TestIntegrationGeneratedStatementsParse(t *testing.T) {
	ctx := context.Background()
	conn := testConn(t)
	stmts := goldenStatements(t)
	n, cluster := 0, 0
	for file, list := range stmts {
		for _, s := range list {
			n++
			if strings.Contains(s, " ON CLUSTER ") {
				cluster++
			}
			if _, err := formatQuery(ctx, conn, s); err != nil {
				t.Errorf("%s: ClickHouse does not parse\n%s\n: %v", file, s, err)
			}
		}
	}
	// The files are there and hold both kinds: a glob that matched nothing
	// must not pass.
	if n < 40 || cluster < 20 {
		t.Fatalf("parsed %d statements, %d of them ON CLUSTER, from %d golden files; want the statements of schema/testdata and clickhouse/testdata", n, cluster, len(stmts))
	}
	t.Logf("%d generated statements parse, %d of them ON CLUSTER, from %d golden files", n, cluster, len(stmts))
}

// A statement with a syntax error fails the parse check: the check can
// fail.
func TestIntegrationParseCheckRejectsBadSQL(t *testing.T) {
	ctx := context.Background()
	conn := testConn(t)
	p := schema.Placement{Database: "walhouse", Cluster: "main"}
	bad := strings.Replace(p.Alter("t", "ADD COLUMN x Int32")[0], "ON CLUSTER", "ON CLUSTERS", 1)
	if formatted, err := formatQuery(ctx, conn, bad); err == nil {
		t.Fatalf("formatQuery accepted %s as %s", bad, formatted)
	}
}

// formatQuery has ClickHouse parse and format stmt.
func formatQuery(ctx context.Context, conn driver.Conn, stmt string) (string, error) {
	var out string
	qctx := ch.Context(ctx, ch.WithParameters(ch.Parameters{"q": schema.EscapeParam(stmt)}))
	err := conn.QueryRow(qctx, "SELECT formatQuery({q:String})").Scan(&out)
	return out, err
}

// A host that does not know the cluster, or lacks the macros the Keeper
// paths need, is refused at connection with what to configure (the
// embedded engine has neither).
func TestIntegrationOpenClusterChecksTheHost(t *testing.T) {
	env := testenv.Require(t, "clickhouse")
	conn, err := OpenCluster(context.Background(), env.ClickHouse, "main")
	if err == nil {
		conn.Close()
		t.Fatal("OpenCluster accepted a host without cluster main")
	}
	for _, want := range []string{`no cluster "main" in its remote_servers`, `no macro "shard"`, `no macro "replica"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}
