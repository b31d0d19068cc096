package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestBinaryLinksNoTestPackages keeps the test harness out of the shipped
// binary: package testing registers its flags and brings its runtime
// along, and internal/testenv (which imports it) is for tests, the
// benchmarks and nothing else. Helpers the binary shares with them (such
// as internal/pgslot) must not import testing.
func TestBinaryLinksNoTestPackages(t *testing.T) {
	goBin, err := exec.LookPath("go") // go test puts its own go first on PATH
	if err != nil {
		t.Fatalf("find the go command to list the binary's packages: %v", err)
	}
	out, err := exec.Command(goBin, "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps ./cmd/walhouse: %v", err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		switch {
		case pkg == "testing", strings.HasPrefix(pkg, "testing/"),
			strings.HasPrefix(pkg, "github.com/walhouse/walhouse/internal/testenv"),
			strings.HasPrefix(pkg, "github.com/walhouse/walhouse/internal/e2e"),
			strings.HasPrefix(pkg, "github.com/testcontainers/"):
			t.Errorf("the walhouse binary links %s; find who imports it with go list -deps -f '{{.ImportPath}}: {{.Imports}}' ./cmd/walhouse | grep %s, and move what it needs out of the test harness", pkg, pkg)
		}
	}
}

// TestVerifyImports keeps package verify on the import rules of docs/architecture.md: a
// stage that builds on record and schema only, never on capture, the sink,
// ClickHouse's loader or the query API.
func TestVerifyImports(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("find the go command: %v", err)
	}
	out, err := exec.Command(goBin, "list", "-deps", "../../verify").Output()
	if err != nil {
		t.Fatalf("go list -deps ./verify: %v", err)
	}
	allowed := []string{"record", "schema", "verify"}
	for _, pkg := range strings.Fields(string(out)) {
		rest, ours := strings.CutPrefix(pkg, "github.com/walhouse/walhouse/")
		if !ours || strings.HasPrefix(rest, "internal/") && rest != "internal/testenv" && rest != "internal/e2e" {
			continue
		}
		ok := false
		for _, a := range allowed {
			ok = ok || rest == a
		}
		if !ok {
			t.Errorf("package verify depends on %s; docs/architecture.md allows it record and schema", pkg)
		}
	}
}
