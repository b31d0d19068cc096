package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"testing"
)

// maxTrackedBytes bounds a committed file: anything larger is an output or
// a binary that slipped in (a 40 MB benchmark binary once did).
const maxTrackedBytes = 1 << 20

// TestRawOutputsAreNotCommitted keeps the repository free of what builds
// and benchmarks write: the benchmark's default output folder is ignored by
// git, and no tracked file is a compiled binary, a profile, a raw benchmark
// table or report, or larger than 1 MiB. docs/benchmarks.md is the
// committed summary; the charts it embeds are its only assets.
func TestRawOutputsAreNotCommitted(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git: the repository's files cannot be listed")
	}
	out, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Skipf("not in a git work tree: %v", err)
	}
	root := strings.TrimSpace(string(out))
	if err := exec.Command("git", "-C", root, "check-ignore", "-q", path.Join(defaultOut, "e2e.json")).Run(); err != nil {
		t.Errorf("bench-e2e's default -out %s is not ignored by git (%v): add it to .gitignore", defaultOut, err)
	}
	list, err := exec.Command("git", "-C", root, "ls-files", "-z").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	for _, f := range strings.Split(strings.TrimRight(string(list), "\x00"), "\x00") {
		if why := rawOutput(f); why != "" {
			t.Errorf("%s is committed: %s", f, why)
			continue
		}
		info, err := os.Stat(filepath.Join(root, f))
		if errors.Is(err, os.ErrNotExist) {
			continue // deleted in the work tree, not yet committed
		}
		if err != nil {
			t.Fatal(err)
		}
		if info.Size() > maxTrackedBytes {
			t.Errorf("%s is committed and has %d bytes, over %d: an output or a binary?", f, info.Size(), maxTrackedBytes)
			continue
		}
		if info.Mode().IsRegular() && isExecutable(t, filepath.Join(root, f)) {
			t.Errorf("%s is committed and is a compiled binary", f)
		}
	}
}

// rawOutput says why the path f is a raw output, or "".
func rawOutput(f string) string {
	switch ext := path.Ext(f); {
	case ext == ".pprof" || ext == ".test" || ext == ".out":
		return "a profile, test binary or coverage output (" + ext + ")"
	case strings.HasPrefix(f, "docs/benchmarks/") && (ext == ".csv" || ext == ".json"):
		return "a raw benchmark output: bench-e2e writes those under " + defaultOut + "; docs/benchmarks.md is the summary"
	}
	return ""
}

// isExecutable reports whether the file starts like an ELF, Mach-O or PE
// executable.
func isExecutable(t *testing.T, name string) bool {
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	head := make([]byte, 4)
	n, _ := f.Read(head)
	head = head[:n]
	for _, magic := range [][]byte{{0x7f, 'E', 'L', 'F'}, {0xfe, 0xed, 0xfa, 0xce}, {0xfe, 0xed, 0xfa, 0xcf}, {0xce, 0xfa, 0xed, 0xfe}, {0xcf, 0xfa, 0xed, 0xfe}, {'M', 'Z', 0x90, 0x00}} {
		if bytes.Equal(head, magic) {
			return true
		}
	}
	return false
}
