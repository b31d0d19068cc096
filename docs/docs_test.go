// Package docs holds walhouse's user documentation; it has no code. Its
// tests keep the pages from drifting away from each other and from the
// code: every relative link (and #anchor) resolves, every alert links a
// runbook section that exists, and docs/metrics.md lists every metric the
// code registers and every alert. `make test` and `make unit` run them.
package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"go.yaml.in/yaml/v3"
)

// runbookBase is what every alert's runbook_url starts with: the docs on
// GitHub's main branch (docs/metrics.md, Alerts, says how to point
// elsewhere).
const runbookBase = "https://github.com/walhouse/walhouse/blob/main/"

// root is the repository, seen from this package's directory.
const root = ".."

// markdownFiles are the pages whose links are checked: the README, every
// docs/*.md and deploy's READMEs.
func markdownFiles(t *testing.T) []string {
	t.Helper()
	files := []string{"README.md", "CHANGELOG.md", "deploy/README.md", "deploy/local/README.md"}
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range docs {
		files = append(files, filepath.ToSlash(strings.TrimPrefix(d, root+string(filepath.Separator))))
	}
	var out []string
	for _, f := range files {
		if _, err := os.Stat(filepath.Join(root, f)); err == nil {
			out = append(out, f)
		}
	}
	return out
}

var (
	fence      = regexp.MustCompile("^\\s*(```|~~~)")
	inlineCode = regexp.MustCompile("`[^`]*`")
	mdLink     = regexp.MustCompile(`!?\[((?:[^\[\]]|\[[^\]]*\])*)\]\(([^()\s]+)(?:\s+"[^"]*")?\)`)
	heading    = regexp.MustCompile(`^(#{1,6})\s+(.*?)\s*#*\s*$`)
	htmlAnchor = regexp.MustCompile(`<a\s+(?:id|name)="([^"]+)"`)
)

// prose returns a page's lines outside fenced code blocks, with inline
// code removed unless keepCode (headings keep theirs: GitHub slugs it).
func prose(text string, keepCode bool) []string {
	var out []string
	in := false
	for _, l := range strings.Split(text, "\n") {
		if fence.MatchString(l) {
			in = !in
			continue
		}
		if in {
			continue
		}
		if !keepCode {
			l = inlineCode.ReplaceAllString(l, "")
		}
		out = append(out, l)
	}
	return out
}

// slug is GitHub's anchor for a heading: the rendered text lower-cased,
// every character but letters, digits, spaces, '-' and '_' dropped, and
// spaces turned into '-'.
func slug(h string) string {
	h = mdLink.ReplaceAllString(h, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case unicode.IsLetter(r), unicode.IsDigit(r), r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

// anchors returns the anchors a page defines: its headings' slugs (a
// repeated one gets -1, -2, … as on GitHub) and explicit <a id>s.
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, l := range prose(text, true) {
		if m := heading.FindStringSubmatch(l); m != nil {
			s := slug(m[2])
			if n := seen[s]; n > 0 {
				out[s+"-"+strconv.Itoa(n)] = true
			} else {
				out[s] = true
			}
			seen[s]++
		}
		for _, m := range htmlAnchor.FindAllStringSubmatch(l, -1) {
			out[m[1]] = true
		}
	}
	return out
}

// pageAnchors caches each page's anchors by its path from the root.
type pageAnchors map[string]map[string]bool

func (p pageAnchors) get(t *testing.T, page string) map[string]bool {
	t.Helper()
	if a, ok := p[page]; ok {
		return a
	}
	text, err := os.ReadFile(filepath.Join(root, page))
	if err != nil {
		t.Fatalf("read %s: %v", page, err)
	}
	p[page] = anchors(string(text))
	return p[page]
}

// checkTarget reports what is wrong with a link to page#anchor (page from
// the root, empty for the linking page itself), or "" if it resolves.
func checkTarget(t *testing.T, cache pageAnchors, page, anchor string) string {
	t.Helper()
	if _, err := os.Stat(filepath.Join(root, page)); err != nil {
		return page + " does not exist"
	}
	if anchor == "" || !strings.HasSuffix(page, ".md") {
		return ""
	}
	if !cache.get(t, page)[anchor] {
		return page + " has no section #" + anchor
	}
	return ""
}

// TestRelativeLinksResolve: every relative link of the README and the docs
// names a file that exists and, with #anchor, a section of it.
func TestRelativeLinksResolve(t *testing.T) {
	cache := pageAnchors{}
	checked := 0
	for _, file := range markdownFiles(t) {
		text, err := os.ReadFile(filepath.Join(root, file))
		if err != nil {
			t.Fatal(err)
		}
		for i, l := range prose(string(text), false) {
			for _, m := range mdLink.FindAllStringSubmatch(l, -1) {
				target := m[2]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				path, anchor, _ := strings.Cut(target, "#")
				page := file
				if path != "" {
					page = filepath.ToSlash(filepath.Clean(filepath.Join(filepath.Dir(file), path)))
				}
				checked++
				if msg := checkTarget(t, cache, page, anchor); msg != "" {
					t.Errorf("%s (prose line %d): link %q: %s", file, i+1, target, msg)
				}
			}
		}
	}
	if checked < 50 {
		t.Errorf("only %d relative links found: is the link pattern broken?", checked)
	}
}

// rule is one alerting rule of deploy/prometheus/alerts.yml.
type rule struct {
	Alert       string            `yaml:"alert"`
	Annotations map[string]string `yaml:"annotations"`
}

func alertRules(t *testing.T) []rule {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(root, "deploy", "prometheus", "alerts.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Groups []struct {
			Rules []rule `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(raw, &f); err != nil {
		t.Fatalf("parse alerts.yml: %v", err)
	}
	var out []rule
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				out = append(out, r)
			}
		}
	}
	if len(out) == 0 {
		t.Fatal("alerts.yml has no alerts")
	}
	return out
}

// TestAlertsHaveRunbooks: every alert has a runbook_url at runbookBase
// whose page and section exist, its description names the same section
// ("Runbook: docs/…#…"), and docs/metrics.md lists it.
func TestAlertsHaveRunbooks(t *testing.T) {
	cache := pageAnchors{}
	metrics, err := os.ReadFile(filepath.Join(root, "docs", "metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range alertRules(t) {
		u := r.Annotations["runbook_url"]
		rel, ok := strings.CutPrefix(u, runbookBase)
		if !ok {
			t.Errorf("%s: runbook_url %q does not start with %s", r.Alert, u, runbookBase)
			continue
		}
		page, anchor, _ := strings.Cut(rel, "#")
		if anchor == "" {
			t.Errorf("%s: runbook_url %q names no section", r.Alert, u)
		} else if msg := checkTarget(t, cache, page, anchor); msg != "" {
			t.Errorf("%s: runbook_url %q: %s", r.Alert, u, msg)
		}
		if !strings.HasSuffix(r.Annotations["description"], "Runbook: "+rel) {
			t.Errorf("%s: the description should end with %q, as runbook_url says", r.Alert, "Runbook: "+rel)
		}
		if !strings.Contains(string(metrics), "`"+r.Alert+"`") {
			t.Errorf("%s is not listed in docs/metrics.md", r.Alert)
		}
	}
}

var (
	metricDef = regexp.MustCompile(`(?:Name:\s*|NewDesc\(\s*)"(walhouse_[a-z0-9_]+)"`)
	metricDoc = regexp.MustCompile("^\\| `(walhouse_[a-z0-9_]+)` \\|")
)

// TestMetricsDocumented: docs/metrics.md lists exactly the metrics the
// code registers (walhouse's packages, not its tests, benchmarks or
// internal harness).
func TestMetricsDocumented(t *testing.T) {
	defined := map[string]string{}
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if strings.HasPrefix(d.Name(), ".") && rel != "." || rel == "internal" || rel == "bench" || rel == "deploy" || rel == "bin" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range metricDef.FindAllStringSubmatch(string(src), -1) {
			defined[m[1]] = rel
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(defined) < 40 {
		t.Fatalf("only %d metrics found in the code: is the pattern broken?", len(defined))
	}
	raw, err := os.ReadFile(filepath.Join(root, "docs", "metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, l := range strings.Split(string(raw), "\n") {
		if m := metricDoc.FindStringSubmatch(l); m != nil {
			documented[m[1]] = true
		}
	}
	for name, file := range defined {
		if !documented[name] {
			t.Errorf("%s (registered in %s) is missing from docs/metrics.md", name, file)
		}
	}
	for name := range documented {
		if _, ok := defined[name]; !ok {
			t.Errorf("docs/metrics.md lists %s, which no code registers", name)
		}
	}
}

// stageRows returns the (stage, package) pairs of the markdown tables of
// file's section heading: each row's cells after the first header, in
// pairs, empty cells skipped.
func stageRows(t *testing.T, file, heading string) map[string]string {
	t.Helper()
	text, err := os.ReadFile(filepath.Join(root, file))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(text), "\n"+heading+"\n")
	if !ok {
		t.Fatalf("%s has no section %q", file, heading)
	}
	if end := strings.Index(section, "\n## "); end >= 0 {
		section = section[:end]
	}
	rows := map[string]string{}
	for _, l := range strings.Split(section, "\n") {
		if !strings.HasPrefix(l, "| ") || strings.HasPrefix(l, "| stage") {
			continue
		}
		var cells []string
		for _, c := range strings.Split(strings.Trim(l, "|"), "|") {
			if c = strings.TrimSpace(c); c != "" {
				cells = append(cells, c)
			}
		}
		for i := 0; i+1 < len(cells); i += 2 {
			if pkg := strings.Trim(cells[i+1], "`"); strings.Contains(cells[i+1], "`") {
				rows[cells[i]] = strings.TrimSuffix(pkg, "/")
			} else {
				i-- // a description cell (architecture.md's third column): the next pair starts after it
			}
		}
	}
	return rows
}

// TestStagesTables: the README's table of stages and packages is
// architecture.md's, every package it names is a folder, and every
// top-level folder with Go code is in it.
func TestStagesTables(t *testing.T) {
	readme := stageRows(t, "README.md", "## The code")
	arch := stageRows(t, "docs/architecture.md", "## Stages")
	if len(arch) < 20 {
		t.Fatalf("only %d stages found in docs/architecture.md: is the table's format changed?", len(arch))
	}
	for stage, pkg := range arch {
		if readme[stage] != pkg {
			t.Errorf("stage %s: architecture.md says package %s, the README %q", stage, pkg, readme[stage])
		}
		if fi, err := os.Stat(filepath.Join(root, pkg)); err != nil || !fi.IsDir() {
			t.Errorf("stage %s: package %s is not a folder", stage, pkg)
		}
	}
	for stage, pkg := range readme {
		if _, ok := arch[stage]; !ok {
			t.Errorf("the README names stage %s (%s), which architecture.md's Stages table lacks", stage, pkg)
		}
	}
	listed := map[string]bool{}
	for _, pkg := range arch {
		listed[strings.Split(pkg, "/")[0]] = true
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !e.IsDir() || strings.HasPrefix(e.Name(), ".") || listed[e.Name()] {
			continue
		}
		hasGo := false
		_ = filepath.WalkDir(filepath.Join(root, e.Name()), func(_ string, d os.DirEntry, _ error) error {
			if d != nil && !d.IsDir() && strings.HasSuffix(d.Name(), ".go") {
				hasGo = true
				return filepath.SkipAll
			}
			return nil
		})
		if hasGo {
			t.Errorf("folder %s holds Go code but is no stage of docs/architecture.md's table (nor the README's)", e.Name())
		}
	}
}
