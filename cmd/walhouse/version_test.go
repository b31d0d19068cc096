package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strings"
	"testing"
)

// TestResolveStamp: the -X values win over the build information, which
// fills in for go build and go install, and the text says what is known.
func TestResolveStamp(t *testing.T) {
	vcs := &debug.BuildInfo{GoVersion: "go1.99", Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "abc123"},
		{Key: "vcs.time", Value: "2026-01-02T03:04:05Z"},
		{Key: "vcs.modified", Value: "true"},
	}}
	installed := &debug.BuildInfo{GoVersion: "go1.99", Main: debug.Module{Version: "v0.2.0"}}
	cases := map[string]struct {
		v, c, d string
		bi      *debug.BuildInfo
		want    buildStamp
		lines   []string
	}{
		"make release": {"0.1.0", "f00d", "2026-11-28T12:00:00Z", vcs,
			buildStamp{Version: "0.1.0", Commit: "f00d", Date: "2026-11-28T12:00:00Z", Go: "go1.99"},
			[]string{"walhouse 0.1.0", "commit f00d (2026-11-28T12:00:00Z)", "go1.99 "}},
		"make build, dirty": {"0.1.0-dev.gf00d-dirty", "f00d", "2026-11-28T12:00:00Z", nil,
			buildStamp{Version: "0.1.0-dev.gf00d-dirty", Commit: "f00d", Date: "2026-11-28T12:00:00Z", Modified: true},
			[]string{"walhouse 0.1.0-dev.gf00d-dirty", "commit f00d (2026-11-28T12:00:00Z, with uncommitted changes)"}},
		"go build in the repository": {"", "", "", vcs,
			buildStamp{Version: "(devel)", Commit: "abc123", Date: "2026-01-02T03:04:05Z", Modified: true, Go: "go1.99"},
			[]string{"walhouse (devel)", "commit abc123 (2026-01-02T03:04:05Z, with uncommitted changes)"}},
		"go install module@v0.2.0": {"", "", "", installed,
			buildStamp{Version: "0.2.0", Go: "go1.99"},
			[]string{"walhouse 0.2.0", "commit unknown (built without stamping"}},
		"nothing known": {"", "", "", nil,
			buildStamp{Version: "(unknown)"},
			[]string{"walhouse (unknown)", "commit unknown"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := resolveStamp(tc.v, tc.c, tc.d, tc.bi)
			want := tc.want
			if want.Go == "" {
				want.Go = got.Go // runtime.Version()
			}
			if got != want {
				t.Errorf("resolveStamp = %+v, want %+v", got, want)
			}
			text := got.String()
			for _, l := range tc.lines {
				if !strings.Contains(text, l) {
					t.Errorf("text %q lacks %q", text, l)
				}
			}
		})
	}
}

// TestVersionStamped builds walhouse with the -X flags of
// deploy/release/version.sh, as make build and make release do, and its
// version command must print them: a -X naming a variable that does not
// exist is silently ignored by the linker.
func TestVersionStamped(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	out, err := exec.CommandContext(ctx, filepath.Join(root, "deploy/release/version.sh"), "--ldflags").Output()
	if err != nil {
		t.Fatalf("version.sh --ldflags: %v", err)
	}
	ldflags := strings.TrimSpace(string(out))
	want := regexp.MustCompile(`^-X main\.version=(\S+) -X main\.commit=(\S*) -X main\.commitDate=(\S+)$`).FindStringSubmatch(ldflags)
	if want == nil {
		t.Fatalf("version.sh --ldflags printed %q", ldflags)
	}
	bin := filepath.Join(t.TempDir(), "walhouse")
	build := exec.CommandContext(ctx, "go", "build", "-ldflags", ldflags, "-o", bin, "./cmd/walhouse")
	build.Dir = root
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}
	b, err := exec.CommandContext(ctx, bin, "version").Output()
	if err != nil {
		t.Fatalf("walhouse version: %v", err)
	}
	text := string(b)
	if !strings.HasPrefix(text, "walhouse "+want[1]+"\n") {
		t.Errorf("walhouse version printed %q, want version %s", text, want[1])
	}
	if want[2] != "" && !strings.Contains(text, "commit "+want[2]+" ("+want[3]) {
		t.Errorf("walhouse version printed %q, want commit %s of %s", text, want[2], want[3])
	}
}

// TestReleaseVersionsAgree: the VERSION file, the chart's appVersion (the
// image tag it deploys by default), the CHANGELOG's latest release and
// the Dockerfile's -X flags say the same (docs/release.md).
func TestReleaseVersionsAgree(t *testing.T) {
	read := func(p string) string {
		t.Helper()
		b, err := os.ReadFile(filepath.Join("../..", p))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	v := strings.TrimSpace(read("VERSION"))
	if !regexp.MustCompile(`^\d+\.\d+\.\d+$`).MatchString(v) {
		t.Fatalf("VERSION holds %q, not X.Y.Z", v)
	}
	chart := read("deploy/helm/walhouse/Chart.yaml")
	if m := regexp.MustCompile(`(?m)^appVersion:\s*"?([^"\s]+)"?\s*$`).FindStringSubmatch(chart); m == nil || m[1] != v {
		t.Errorf("Chart.yaml's appVersion is %v, VERSION %s: bump both", m, v)
	}
	if m := regexp.MustCompile(`(?m)^  tag:\s*(.*)$`).FindStringSubmatch(read("deploy/helm/walhouse/values.yaml")); m == nil || strings.TrimSpace(m[1]) != `""` {
		t.Errorf(`values.yaml's image.tag is %v: leave it "" so that it is the appVersion`, m)
	}
	tpl := read("deploy/helm/walhouse/templates/_helpers.tpl")
	if !strings.Contains(tpl, `:{{ .Values.image.tag | default .Chart.AppVersion }}"`) {
		t.Error("the chart's image is not tagged .Values.image.tag | default .Chart.AppVersion")
	}
	if m := regexp.MustCompile(`(?m)^## \[(\d[^\]]*)\]`).FindStringSubmatch(read("CHANGELOG.md")); m == nil || m[1] != v {
		t.Errorf("CHANGELOG.md's latest release is %v, VERSION %s", m, v)
	}
	for _, x := range []string{"-X main.version=", "-X main.commit=", "-X main.commitDate="} {
		if !strings.Contains(read("deploy/docker/Dockerfile"), x) {
			t.Errorf("deploy/docker/Dockerfile does not stamp %s", x)
		}
	}
}
