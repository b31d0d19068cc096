// Command image writes the walhouse container image without a Docker
// engine: the static binaries of make release on an empty base, with the
// build machine's CA certificates and a non-root user, as the
// Dockerfile's image (deploy/docker/Dockerfile) has them from distroless.
// Every time in it is the commit's (-created), so the same binaries give
// the same digests.
//
// It writes, into -out:
//
//	walhouse_VERSION_oci/               an OCI image layout: an index of every -bin platform,
//	                                    tagged VERSION (skopeo copy --all oci:DIR docker://REPO:VERSION)
//	walhouse_VERSION_linux_ARCH.image.tar  per platform, a docker load archive tagged REPO:VERSION
//
// usage: go run . -version 0.1.0 -created 2026-11-28T12:00:00Z -repo walhouse/walhouse \
//
//	-bin linux/amd64=DIR -bin linux/arm64=DIR -out DIST
//
// where each DIR holds the platform's walhouse and probe binaries.
package main

import (
	"archive/tar"
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// nonroot is distroless's non-root user, as in the Dockerfile and the
// chart's securityContext (runAsUser 65532).
const nonroot = 65532

// platformBins is the repeated -bin flag: platform=directory.
type platformBins []platformBin

type platformBin struct {
	os, arch, dir string
}

func (p *platformBins) String() string { return fmt.Sprint(*p) }

func (p *platformBins) Set(s string) error {
	plat, dir, ok := strings.Cut(s, "=")
	osName, arch, ok2 := strings.Cut(plat, "/")
	if !ok || !ok2 || osName == "" || arch == "" || dir == "" {
		return fmt.Errorf("want OS/ARCH=DIR, got %q", s)
	}
	*p = append(*p, platformBin{osName, arch, dir})
	return nil
}

// options are the flags.
type options struct {
	version, repo, certs, out string
	created                   time.Time
	bins                      platformBins
}

func main() {
	var o options
	var created string
	flag.StringVar(&o.version, "version", "", "the image's version and tag (required)")
	flag.StringVar(&created, "created", "", "the time of every file and of the image, RFC 3339: the commit's date (required)")
	flag.StringVar(&o.repo, "repo", "walhouse/walhouse", "the repository the docker load archives are tagged with")
	flag.StringVar(&o.certs, "certs", "/etc/ssl/certs/ca-certificates.crt", "the CA certificates bundle put in the image")
	flag.StringVar(&o.out, "out", "dist", "the directory the image is written to")
	flag.Var(&o.bins, "bin", "OS/ARCH=DIR: a platform and the directory of its walhouse and probe binaries (repeat)")
	flag.Parse()
	var err error
	if o.created, err = time.Parse(time.RFC3339, created); err != nil {
		fmt.Fprintf(os.Stderr, "image: -created: %v\n", err)
		os.Exit(2)
	}
	if o.version == "" || len(o.bins) == 0 || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "image: -version, -created and at least one -bin are required, and no arguments")
		os.Exit(2)
	}
	if err := run(o); err != nil {
		fmt.Fprintf(os.Stderr, "image: %v\n", err)
		os.Exit(1)
	}
}

func run(o options) error {
	tag, err := name.NewTag(o.repo + ":" + o.version)
	if err != nil {
		return fmt.Errorf("the tag %s:%s: %w", o.repo, o.version, err)
	}
	certs, err := os.ReadFile(o.certs)
	if err != nil {
		return fmt.Errorf("read the CA certificates (install Debian's ca-certificates, or give -certs): %w", err)
	}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, b := range o.bins {
		img, err := build(o, b, certs)
		if err != nil {
			return fmt.Errorf("%s/%s: %w", b.os, b.arch, err)
		}
		archive := filepath.Join(o.out, fmt.Sprintf("walhouse_%s_%s_%s.image.tar", o.version, b.os, b.arch))
		if err := tarball.WriteToFile(archive, tag, img); err != nil {
			return fmt.Errorf("write %s: %w", archive, err)
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add: img,
			Descriptor: v1.Descriptor{
				Platform: &v1.Platform{OS: b.os, Architecture: b.arch},
			},
		})
	}
	dir := filepath.Join(o.out, fmt.Sprintf("walhouse_%s_oci", o.version))
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("write the OCI layout %s: %w", dir, err)
	}
	if err := p.AppendIndex(idx, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": o.version,
	})); err != nil {
		return fmt.Errorf("write the OCI layout %s: %w", dir, err)
	}
	return nil
}

// build is one platform's image: one layer, the configuration of the
// Dockerfile's image.
func build(o options, b platformBin, certs []byte) (v1.Image, error) {
	files := map[string][]byte{}
	for _, bin := range []string{"walhouse", "probe"} {
		data, err := os.ReadFile(filepath.Join(b.dir, bin))
		if err != nil {
			return nil, fmt.Errorf("read the binary (make release builds it): %w", err)
		}
		files[bin] = data
	}
	data, err := rootfs(o.created, certs, files["walhouse"], files["probe"])
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, fmt.Errorf("the layer: %w", err)
	}
	base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err := mutate.Append(base, mutate.Addendum{
		Layer: layer,
		History: v1.History{
			Created:   v1.Time{Time: o.created},
			CreatedBy: "make release (deploy/release/image)",
			Comment:   "walhouse and probe, CA certificates, user nonroot",
		},
	})
	if err != nil {
		return nil, fmt.Errorf("append the layer: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = b.os, b.arch
	cf.Created = v1.Time{Time: o.created}
	cf.Config = v1.Config{
		User:       fmt.Sprintf("%d:%d", nonroot, nonroot),
		Entrypoint: []string{"/usr/local/bin/walhouse"},
		Cmd:        []string{"--help"},
		Env: []string{
			"PATH=/usr/local/bin:/usr/bin:/bin",
			"SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt",
		},
		WorkingDir: "/home/nonroot",
		// capture's and the sink's --metrics-addr, serve's --listen.
		ExposedPorts: map[string]struct{}{"9464/tcp": {}, "9465/tcp": {}, "8080/tcp": {}},
		Labels: map[string]string{
			"org.opencontainers.image.title":       "walhouse",
			"org.opencontainers.image.description": "PostgreSQL changes into ClickHouse through Kafka, with exactly-once effects",
			"org.opencontainers.image.version":     o.version,
			"org.opencontainers.image.licenses":    "Apache-2.0",
			"org.opencontainers.image.created":     o.created.UTC().Format(time.RFC3339),
		},
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("the configuration: %w", err)
	}
	return img, nil
}

// rootfs is the layer's tar: the directories and files the image needs,
// in a fixed order, owned by root but for the user's home, every time the
// commit's.
func rootfs(created time.Time, certs, walhouse, probe []byte) ([]byte, error) {
	type entry struct {
		name string
		mode int64
		uid  int
		data []byte
		dir  bool
	}
	passwd := "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"
	group := "root:x:0:\nnonroot:x:65532:\n"
	entries := []entry{
		{name: "etc/", mode: 0o755, dir: true},
		{name: "etc/group", mode: 0o644, data: []byte(group)},
		{name: "etc/passwd", mode: 0o644, data: []byte(passwd)},
		{name: "etc/ssl/", mode: 0o755, dir: true},
		{name: "etc/ssl/certs/", mode: 0o755, dir: true},
		{name: "etc/ssl/certs/ca-certificates.crt", mode: 0o644, data: certs},
		{name: "home/", mode: 0o755, dir: true},
		{name: "home/nonroot/", mode: 0o700, uid: nonroot, dir: true},
		{name: "tmp/", mode: 0o1777, dir: true},
		{name: "usr/", mode: 0o755, dir: true},
		{name: "usr/local/", mode: 0o755, dir: true},
		{name: "usr/local/bin/", mode: 0o755, dir: true},
		{name: "usr/local/bin/probe", mode: 0o755, data: probe},
		{name: "usr/local/bin/walhouse", mode: 0o755, data: walhouse},
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{
			Name:    e.name,
			Mode:    e.mode,
			Uid:     e.uid,
			Gid:     e.uid,
			ModTime: created,
			Format:  tar.FormatPAX,
		}
		if e.dir {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag = tar.TypeReg
			h.Size = int64(len(e.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("the layer's tar: %w", err)
	}
	return buf.Bytes(), nil
}
