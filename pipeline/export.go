package pipeline

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/walhouse/walhouse/query"
)

// ExportRun is everything `walhouse export` runs: every row of one data
// subject (GDPR) from ClickHouse into a file, with a manifest next to it.
type ExportRun struct {
	ClickHouse ClickHouse
	// Out is the file to write, readable by its owner only; the manifest
	// goes to Out + ".manifest.json".
	Out string
	// Request names the subject, its tables, who asked and the limits;
	// RunExport sets its Format (from Out's extension when it is empty)
	// and Rows.
	Request query.ExportRequest
	// AuditKey is the key of the HMAC that the audit entry records instead
	// of the subject value: serve's, so that the hashes match.
	AuditKey []byte
	// Progress receives the rows exported so far every second, and the
	// summary at the end (a terminal: stderr).
	Progress io.Writer
}

// RunExport exports the subject of r into r.Out and writes its manifest.
// A file refused before anything was written is removed; one stopped
// early keeps its rows and a manifest that says complete=false.
func RunExport(ctx context.Context, r ExportRun) error {
	if r.Request.Format == "" {
		r.Request.Format = ExportFormat(r.Out)
	}
	conn, err := r.ClickHouse.Open(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	file, err := CreatePrivate(r.Out)
	if err != nil {
		return err
	}
	defer file.Close()
	w := bufio.NewWriterSize(file, 1<<20)

	var rows atomic.Int64
	r.Request.Rows = &rows
	start := time.Now()
	stopProgress := exportProgress(r.Progress, &rows, start)
	m, err := query.NewExporter(conn, r.ClickHouse.Database, r.AuditKey, slog.Default()).Export(ctx, w, r.Request)
	stopProgress()
	if ferr := w.Flush(); err == nil && ferr != nil {
		err = fmt.Errorf("write %s: %w", r.Out, ferr)
	}
	if cerr := file.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("close %s: %w", r.Out, cerr)
	}
	n := rows.Load()
	fmt.Fprintf(r.Progress, "\rexport: %d rows, %.0f rows/s, done in %s\n", n, float64(n)/time.Since(start).Seconds(), time.Since(start).Round(time.Millisecond))
	if m.ID == "" {
		_ = os.Remove(r.Out) // refused before anything was written
		return err
	}
	mb, _ := json.MarshalIndent(m, "", "  ")
	if werr := writePrivate(r.Out+".manifest.json", append(mb, '\n')); werr != nil && err == nil {
		err = fmt.Errorf("write the manifest: %w", werr)
	}
	if err != nil {
		return fmt.Errorf("export stopped early (the manifest says complete=false): %w", err)
	}
	fmt.Fprintf(r.Progress, "export: %s (%d rows, sha256 %s), manifest %s.manifest.json\n", r.Out, m.Rows, m.SHA256, r.Out)
	return nil
}

// ExportFormat is the format of an export to the file out: csv for a
// .csv file, parquet for a .parquet file, else jsonl.
func ExportFormat(out string) query.Format {
	switch strings.ToLower(filepath.Ext(out)) {
	case ".csv":
		return query.CSV
	case ".parquet":
		return query.Parquet
	default:
		return query.JSONL
	}
}

// exportProgress prints the rows exported so far and their rate on w
// every second, until the function it returns is called.
func exportProgress(w io.Writer, rows *atomic.Int64, start time.Time) (stop func()) {
	done := make(chan struct{})
	progressDone := make(chan struct{})
	go func() {
		defer close(progressDone)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				n := rows.Load()
				fmt.Fprintf(w, "\rexport: %d rows, %.0f rows/s   ", n, float64(n)/time.Since(start).Seconds())
			}
		}
	}()
	return func() {
		close(done)
		<-progressDone
	}
}

// CreatePrivate creates (or truncates) path readable by its owner only:
// an export or an erasure manifest is about one person. A file that
// existed keeps no wider mode than 0600 either.
func CreatePrivate(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", path, err)
	}
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return nil, fmt.Errorf("make %s private (mode 0600): %w", path, err)
	}
	return f, nil
}

// writePrivate writes data to path with mode 0600, as CreatePrivate.
func writePrivate(path string, data []byte) error {
	f, err := CreatePrivate(path)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
