package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/walhouse/walhouse/clickhouse"
	"github.com/walhouse/walhouse/internal/testenv"
	"github.com/walhouse/walhouse/schema"
)

// TestIntegrationExportFilesArePrivate runs `walhouse export` to a file
// that exists with mode 0644: the export and its manifest end up 0600
// (they hold one person's data), and the CSV neutralises a formula.
func TestIntegrationExportFilesArePrivate(t *testing.T) {
	env := testenv.Require(t, "clickhouse")
	ctx := context.Background()
	conn, err := clickhouse.Open(ctx, env.ClickHouse)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	db := testenv.Name("export")
	for _, sql := range []string{
		"CREATE DATABASE " + schema.QuoteIdent(db),
		fmt.Sprintf("CREATE TABLE %s.orders (tenant_id String, id Int64, customer_id String, note String, _version UInt64, _is_deleted UInt8) ENGINE = ReplacingMergeTree(_version, _is_deleted) ORDER BY (tenant_id, id)", schema.QuoteIdent(db)),
		fmt.Sprintf("INSERT INTO %s.orders VALUES ('acme', 1, 'cus_1', '=cmd()', 1, 0)", schema.QuoteIdent(db)),
	} {
		if err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	t.Cleanup(func() { _ = conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+schema.QuoteIdent(db)) })

	out := filepath.Join(t.TempDir(), "subject.csv")
	if err := os.WriteFile(out, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("WALHOUSE_AUDIT_KEY", "audit-key-0123456789")
	if err := runExport(ctx, &invocation{name: "export", stdout: io.Discard, stderr: io.Discard, args: []string{"--clickhouse", env.ClickHouse, "--database", db, "--tenant", "acme",
		"--subject-column", "customer_id", "--subject", "cus_1", "--out", out}}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{out, out + ".manifest.json"} {
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", filepath.Base(p), st.Mode().Perm())
		}
	}
	data, _ := os.ReadFile(out)
	if !strings.Contains(string(data), ",'=cmd()") {
		t.Errorf("the CSV holds %q, want the formula neutralised as '=cmd()", data)
	}
}
