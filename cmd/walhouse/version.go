package main

import (
	"context"
	"flag"
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/walhouse/walhouse/cli"
)

// The version, commit and commit date that make release (and the
// Dockerfile) stamp with -ldflags "-X main.version=... -X main.commit=...
// -X main.commitDate=...": docs/release.md. These are the only package
// variables of the command, because -X can set nothing else; empty in a
// plain go build or go install, where the build information Go embeds
// stands in (buildStamp).
var (
	version    string
	commit     string
	commitDate string
)

// buildStamp is what walhouse version reports about its own build.
type buildStamp struct {
	Version  string // semantic version without "v", or "(devel)" / "(unknown)"
	Commit   string // full commit hash, empty when unknown
	Date     string // the commit's date (RFC 3339), never the build time
	Modified bool   // built from a work tree with uncommitted changes
	Go       string // the Go release that built it
}

// resolveStamp combines the -X values with the embedded build
// information: a stamped value wins; otherwise the module version (set by
// go install module@vX.Y.Z) and the VCS settings (set by go build in a git
// work tree, unless -buildvcs=false) fill in. bi may be nil.
func resolveStamp(stampVersion, stampCommit, stampDate string, bi *debug.BuildInfo) buildStamp {
	s := buildStamp{Version: "(unknown)", Go: runtime.Version()}
	if bi != nil {
		if v := bi.Main.Version; v != "" {
			s.Version = v
		}
		if bi.GoVersion != "" {
			s.Go = bi.GoVersion
		}
		for _, kv := range bi.Settings {
			switch kv.Key {
			case "vcs.revision":
				s.Commit = kv.Value
			case "vcs.time":
				s.Date = kv.Value
			case "vcs.modified":
				s.Modified = kv.Value == "true"
			}
		}
	}
	if stampVersion != "" {
		s.Version = stampVersion
		// A stamped version describes the tree it came from: git describe
		// --dirty says "-dirty" itself.
		s.Modified = strings.HasSuffix(stampVersion, "-dirty")
	}
	if stampCommit != "" {
		s.Commit = stampCommit
	}
	if stampDate != "" {
		s.Date = stampDate
	}
	s.Version = strings.TrimPrefix(s.Version, "v")
	return s
}

// String is the text of walhouse version: the version, the commit and its
// date, the Go release and platform.
func (s buildStamp) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "walhouse %s\n", s.Version)
	switch {
	case s.Commit == "":
		b.WriteString("commit unknown (built without stamping: make build or make release record it, docs/release.md)\n")
	case s.Modified && s.Date != "":
		fmt.Fprintf(&b, "commit %s (%s, with uncommitted changes)\n", s.Commit, s.Date)
	case s.Modified:
		fmt.Fprintf(&b, "commit %s (with uncommitted changes)\n", s.Commit)
	case s.Date != "":
		fmt.Fprintf(&b, "commit %s (%s)\n", s.Commit, s.Date)
	default:
		fmt.Fprintf(&b, "commit %s\n", s.Commit)
	}
	fmt.Fprintf(&b, "%s %s/%s\n", s.Go, runtime.GOOS, runtime.GOARCH)
	return b.String()
}

// runVersion prints the version, the commit it was built from with that
// commit's date, and the Go version.
func runVersion(_ context.Context, inv *cli.Invocation) error {
	if inv.PlainHelp() {
		return flag.ErrHelp
	}
	if len(inv.Args) > 0 {
		return cli.Usagef("takes no arguments")
	}
	bi, _ := debug.ReadBuildInfo()
	fmt.Fprint(inv.Stdout, resolveStamp(version, commit, commitDate, bi).String())
	return nil
}
