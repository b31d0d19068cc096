package pipeline

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/walhouse/walhouse/query"
)

func TestExportFormat(t *testing.T) {
	for _, tc := range []struct {
		out  string
		want query.Format
	}{
		{"subject.csv", query.CSV},
		{"subject.CSV", query.CSV},
		{"subject.parquet", query.Parquet},
		{"subject.jsonl", query.JSONL},
		{"subject", query.JSONL},
	} {
		if got := ExportFormat(tc.out); got != tc.want {
			t.Errorf("ExportFormat(%q) = %q, want %q", tc.out, got, tc.want)
		}
	}
}

// CreatePrivate narrows a file that existed with a wider mode to 0600.
func TestCreatePrivateNarrowsAnExistingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "subject.csv")
	if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := CreatePrivate(path)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 || st.Size() != 0 {
		t.Errorf("mode %v, size %d; want 0600 and truncated", st.Mode().Perm(), st.Size())
	}
}
