package schema

import "testing"

// TestVerifyTableDDL checks the statement that creates the verify log
// against testdata/verify_table.sql.golden (which clickhouse's
// TestIntegrationGeneratedStatementsParse also has ClickHouse parse).
func TestVerifyTableDDL(t *testing.T) {
	golden(t, "verify_table.sql", VerifyTableDDL("walhouse")+";\n")
}

func TestVerifyOutcomeNames(t *testing.T) {
	for _, o := range []VerifyOutcome{Verified, VerifyFailed} {
		got, err := ParseVerifyOutcome(o.String())
		if err != nil || got != o {
			t.Errorf("ParseVerifyOutcome(%q) = %v, %v; want %v", o.String(), got, err, o)
		}
	}
	if _, err := ParseVerifyOutcome("VerifyOutcome(0)"); err == nil {
		t.Error("ParseVerifyOutcome takes an unknown outcome")
	}
}
