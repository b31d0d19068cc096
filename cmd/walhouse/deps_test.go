package main

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestBinaryLinksNoTestPackages keeps the test harness out of the shipped
// binary: package testing registers its flags and brings its runtime
// along, and harness/testenv (which imports it) is for tests, the
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
			strings.HasPrefix(pkg, "github.com/walhouse/walhouse/harness/testenv"),
			strings.HasPrefix(pkg, "github.com/walhouse/walhouse/harness/e2e"),
			strings.HasPrefix(pkg, "github.com/testcontainers/"):
			t.Errorf("the walhouse binary links %s; find who imports it with go list -deps -f '{{.ImportPath}}: {{.Imports}}' ./cmd/walhouse | grep %s, and move what it needs out of the test harness", pkg, pkg)
		}
	}
}

// module is the import path of the walhouse module; the tables below name
// its packages relative to it.
const module = "github.com/walhouse/walhouse/"

// importRules is the one-way import rule of docs/architecture.md ("Import
// rules"), which states this table: for each package of the module, the
// packages of the module its non-test files may import. A package not in
// the table, or an import not in its row, fails TestImportRules; change
// the table and docs/architecture.md together, and only for an arrow that
// goes the way the data does. Tests may import any package (TestImportRules
// reads no test file). Every package may import the leaf tools
// (leafTools), which import nothing of walhouse. "*" allows every package
// but the test harness (harness/testenv, harness/e2e).
var importRules = map[string][]string{
	"record":       nil,
	"schema":       {"record"},
	"sink":         {"record"},
	"capture":      {"record", "schema", "capture/pgoutput"},
	"kafka":        {"record", "sink"},
	"registry":     {"kafka", "record"},
	"dedup":        nil,
	"clickhouse":   {"record", "schema", "sink"},
	"erasure":      {"record", "schema"},
	"verify":       {"record", "schema"},
	"monitor":      {"record"},
	"idempotency":  nil,
	"query":        {"record", "schema", "monitor", "erasure", "idempotency"},
	"config":       {"record"},
	"cmd/walhouse": {"*"},
	// The command line: flag sets bound to the configuration schema's
	// keys, their precedence over the environment and the file, secrets,
	// help and completion, for cmd/walhouse only; no stage imports it. It
	// builds the Kafka and dedup settings of the security flags.
	"cli": {"config", "record", "schema", "kafka", "dedup"},
	// The composition root as a library: it builds the stages from
	// settings for cmd/walhouse, the demo and bench/; no stage imports it.
	// The demo, outside the binary's main package: the stages through
	// pipeline, and the harness's orders API the binary links anyway.
	"demo":     {"pipeline", "record", "schema", "capture", "kafka", "sink", "dedup", "clickhouse", "verify", "monitor", "idempotency", "query", "harness/writeapi"},
	"pipeline": {"record", "schema", "capture", "kafka", "registry", "sink", "dedup", "clickhouse", "erasure", "verify", "monitor", "idempotency", "query"},

	"capture/pgoutput": nil,
	// Encoders of pgoutput messages, for tests only.
	"capture/pgoutput/pgoutputtest": nil,

	// The harness walhouse is tested and shown with: the embedded
	// engine's server (walhouse chdb) and the demo's orders API, which the
	// binary links; the test harness, imported by tests and bench/ only
	// (no other row names it).
	"harness/chdb":                   nil,
	"harness/writeapi":               {"idempotency"},
	"harness/testenv":                {"record", "kafka", "registry", "idempotency"},
	"harness/testenv/withcontainers": {"harness/testenv"},
	"harness/e2e":                    nil,

	"bench/capture": {"*", "harness/testenv"},
	"bench/e2e":     {"*", "harness/testenv"},
	"bench/query":   {"*", "harness/testenv"},
	"bench/sink":    {"*", "harness/testenv"},
	"bench/verify":  {"*", "harness/testenv"},

	"docs":                nil,
	"deploy/docker/probe": nil,
}

// leafTools are the packages under internal/, and nothing else is there:
// any package may import them, and they import nothing of walhouse but
// one another (their rows in importRules are implied: empty).
var leafTools = []string{"internal/backoff", "internal/failpoint", "internal/pgslot", "internal/redact", "internal/textcut"}

// readSide are the packages that read what the pipeline wrote, and
// writeSide what none of them may depend on, even through another package:
// capture, the sink, their Kafka adapters and the registry, ClickHouse's
// loader, and the replication protocol. (monitor keeps the Kafka admin
// client it probes consumer lag with.)
var (
	readSide  = []string{"query", "monitor", "verify"}
	writeSide = []string{"capture", "sink", "kafka", "registry", "clickhouse", "github.com/jackc/pglogrepl"}
)

// goList runs go list in the module's root with args and returns its
// output's lines.
func goList(t *testing.T, args ...string) []string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("find the go command: %v", err)
	}
	cmd := exec.Command(goBin, append([]string{"list"}, args...)...)
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %s: %v", strings.Join(args, " "), err)
	}
	return strings.Split(strings.TrimSpace(string(out)), "\n")
}

// TestImportRules checks every import of a walhouse package by a
// walhouse package's non-test files against importRules.
func TestImportRules(t *testing.T) {
	for _, line := range goList(t, "-f", "{{.ImportPath}} {{join .Imports \" \"}}", "./...") {
		fields := strings.Fields(line)
		pkg, ok := strings.CutPrefix(fields[0], module)
		if !ok {
			t.Fatalf("go list printed %q, outside module %s", fields[0], module)
		}
		allowed, known := importRules[pkg]
		if slices.Contains(leafTools, pkg) {
			allowed, known = nil, true
		}
		if !known {
			t.Errorf("package %s is not in the import rules: add its row to importRules (cmd/walhouse/deps_test.go) and docs/architecture.md", pkg)
			continue
		}
		for _, imp := range fields[1:] {
			dep, ours := strings.CutPrefix(imp, module)
			if !ours || slices.Contains(allowed, dep) || slices.Contains(leafTools, dep) {
				continue
			}
			if slices.Contains(allowed, "*") && dep != "harness/testenv" && !strings.HasPrefix(dep, "harness/testenv/") && dep != "harness/e2e" {
				continue
			}
			t.Errorf("package %s imports %s, against the import rules of docs/architecture.md: %s may import %s; turn the arrow around (an interface %s declares, a type in a package both import) rather than add it", pkg, dep, pkg, describe(allowed), pkg)
		}
	}
}

// TestInternalHoldsLeafToolsOnly: internal/ means one thing, the leaf
// tools (docs/architecture.md); the harness has a folder of its own.
func TestInternalHoldsLeafToolsOnly(t *testing.T) {
	for _, path := range goList(t, "./internal/...") {
		if pkg := strings.TrimPrefix(path, module); !slices.Contains(leafTools, pkg) {
			t.Errorf("package %s is under internal/, which holds the leaf tools only (leafTools): a tool that imports a stage, or part of the harness, goes elsewhere (harness/ for what tests and the demo run)", pkg)
		}
	}
}

// describe lists what a row of importRules allows, for a message.
func describe(allowed []string) string {
	if len(allowed) == 0 {
		return "only the leaf tools " + strings.Join(leafTools, ", ")
	}
	return strings.Join(allowed, ", ") + " and the leaf tools"
}

// TestReadSideDependencies checks that the read side does not depend on
// the write side even through another package: go list -deps of each of
// readSide holds none of writeSide.
func TestReadSideDependencies(t *testing.T) {
	for _, pkg := range readSide {
		for _, dep := range goList(t, "-deps", "./"+pkg) {
			rest := strings.TrimPrefix(dep, module)
			for _, w := range writeSide {
				if rest == w || strings.HasPrefix(rest, w+"/") {
					t.Errorf("package %s depends on %s; the read side builds on record, schema and monitor, not on the write side (docs/architecture.md, Import rules); find the path with go list -deps -f '{{.ImportPath}}: {{.Imports}}' ./%s | grep %s", pkg, dep, pkg, w)
				}
			}
		}
	}
}
