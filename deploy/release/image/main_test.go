package main

import (
	"archive/tar"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// TestImage writes the image of two platforms twice from the same inputs:
// the digests are the same, and each platform's image runs walhouse as
// the non-root user with the certificates, every file at the given time.
func TestImage(t *testing.T) {
	created := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	in := t.TempDir()
	certs := filepath.Join(in, "ca.crt")
	write := func(p, s string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(certs, "CERTS")
	var bins platformBins
	for _, arch := range []string{"amd64", "arm64"} {
		dir := filepath.Join(in, arch)
		write(filepath.Join(dir, "walhouse"), "walhouse "+arch)
		write(filepath.Join(dir, "probe"), "probe "+arch)
		if err := bins.Set("linux/" + arch + "=" + dir); err != nil {
			t.Fatal(err)
		}
	}
	digests := make([]string, 2)
	for i := range digests {
		out := t.TempDir()
		o := options{version: "1.2.3", repo: "walhouse/walhouse", certs: certs, out: out, created: created, bins: bins}
		if err := run(o); err != nil {
			t.Fatal(err)
		}
		idx, err := layout.ImageIndexFromPath(filepath.Join(out, "walhouse_1.2.3_oci"))
		if err != nil {
			t.Fatal(err)
		}
		top, err := idx.IndexManifest()
		if err != nil {
			t.Fatal(err)
		}
		if len(top.Manifests) != 1 || top.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != "1.2.3" {
			t.Fatalf("layout index %+v: want one entry named 1.2.3", top.Manifests)
		}
		inner, err := idx.ImageIndex(top.Manifests[0].Digest)
		if err != nil {
			t.Fatal(err)
		}
		d, err := inner.Digest()
		if err != nil {
			t.Fatal(err)
		}
		digests[i] = d.String()
		im, err := inner.IndexManifest()
		if err != nil {
			t.Fatal(err)
		}
		if len(im.Manifests) != 2 {
			t.Fatalf("the image index has %d manifests, want 2", len(im.Manifests))
		}
		for j, arch := range []string{"amd64", "arm64"} {
			if p := im.Manifests[j].Platform; p == nil || p.OS != "linux" || p.Architecture != arch {
				t.Errorf("manifest %d's platform %+v, want linux/%s", j, p, arch)
			}
			tag, err := name.NewTag("walhouse/walhouse:1.2.3")
			if err != nil {
				t.Fatal(err)
			}
			img, err := tarball.ImageFromPath(filepath.Join(out, "walhouse_1.2.3_linux_"+arch+".image.tar"), &tag)
			if err != nil {
				t.Fatal(err)
			}
			cf, err := img.ConfigFile()
			if err != nil {
				t.Fatal(err)
			}
			if cf.Architecture != arch || cf.Config.User != "65532:65532" || cf.Config.Entrypoint[0] != "/usr/local/bin/walhouse" ||
				cf.Config.Labels["org.opencontainers.image.version"] != "1.2.3" || !cf.Created.Time.Equal(created) {
				t.Errorf("%s: configuration %+v", arch, cf)
			}
			files := layerFiles(t, img, created)
			for p, want := range map[string]string{
				"usr/local/bin/walhouse":            "walhouse " + arch,
				"usr/local/bin/probe":               "probe " + arch,
				"etc/ssl/certs/ca-certificates.crt": "CERTS",
			} {
				if files[p] != want {
					t.Errorf("%s: %s holds %q, want %q", arch, p, files[p], want)
				}
			}
		}
	}
	if digests[0] != digests[1] {
		t.Errorf("two runs gave %s and %s: the image is not reproducible", digests[0], digests[1])
	}
}

// layerFiles reads the regular files of the image's one layer; every
// entry must carry the commit's time.
func layerFiles(t *testing.T, img v1.Image, created time.Time) map[string]string {
	t.Helper()
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers %d, %v: want one", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	files := map[string]string{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		if !h.ModTime.Equal(created) {
			t.Errorf("%s dated %s, want %s", h.Name, h.ModTime, created)
		}
		if h.Typeflag == tar.TypeReg {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			files[h.Name] = string(b)
		}
	}
}
