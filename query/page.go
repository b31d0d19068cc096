package query

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
)

// pageCommitBytes is how much of a read's page is held before its status
// is sent. A page that fits (most do) is answered as a whole, so any error
// on the way, over_limit included, gets its own status; a larger page is
// streamed in pieces of this size, and memory per read stays at about this
// much whatever the page's size (a 32 MiB page of '<' was a 192 MiB
// buffer when pages were built whole with json.Marshal).
const pageCommitBytes = 256 << 10

// errPageTooLarge is the error of a page whose JSON would pass
// Limits.MaxPageBytes.
var errPageTooLarge = errors.New("the page's JSON is larger than its byte limit")

// pageWriter writes one read's JSON page: it holds up to pageCommitBytes,
// then sends the status and streams. Every byte counts against max
// (Limits.MaxPageBytes), checked before it is buffered. It is the
// jsonWriter that rowScanner.writeJSONObject writes to; strings are
// copied in pieces, never converted whole.
type pageWriter struct {
	w         http.ResponseWriter
	buf       []byte // cap pageCommitBytes
	n         int64  // bytes of the page accepted so far, sent or buffered
	max       int64
	header    func(http.Header) // sets the success headers at commit
	committed bool              // the 200 and the first bytes are sent
	err       error             // sticky: errPageTooLarge or the client's write error
}

func newPageWriter(w http.ResponseWriter, maxBytes int64, header func(http.Header)) *pageWriter {
	return &pageWriter{w: w, buf: make([]byte, 0, pageCommitBytes), max: maxBytes, header: header}
}

// Write takes p for the page.
func (pw *pageWriter) Write(p []byte) (int, error) { return pageWrite(pw, p) }

// WriteString takes s for the page without converting it to a []byte.
func (pw *pageWriter) WriteString(s string) (int, error) { return pageWrite(pw, s) }

func pageWrite[T string | []byte](pw *pageWriter, p T) (int, error) {
	if pw.err != nil {
		return 0, pw.err
	}
	if pw.n+int64(len(p)) > pw.max {
		pw.err = errPageTooLarge
		return 0, pw.err
	}
	pw.n += int64(len(p))
	total := len(p)
	for len(p) > 0 {
		k := copy(pw.buf[len(pw.buf):cap(pw.buf)], p)
		pw.buf, p = pw.buf[:len(pw.buf)+k], p[k:]
		if len(pw.buf) == cap(pw.buf) {
			if err := pw.flush(); err != nil {
				return total - len(p), err
			}
		}
	}
	return total, nil
}

// flush sends what is buffered, first the status and headers.
func (pw *pageWriter) flush() error {
	if !pw.committed {
		pw.header(pw.w.Header())
		pw.w.WriteHeader(http.StatusOK)
		pw.committed = true
	}
	if _, err := pw.w.Write(pw.buf); err != nil {
		pw.err = fmt.Errorf("send the page: %w", err)
		return pw.err
	}
	pw.buf = pw.buf[:0]
	return nil
}

// finish sends the rest of a complete page.
func (pw *pageWriter) finish() error {
	if pw.err != nil {
		return pw.err
	}
	return pw.flush()
}

// abort ends a page that failed after its 200 was sent. The page is
// closed with an "error" member in place of "meta", so that whoever reads
// the body sees why, and the response is then cut off
// (http.ErrAbortHandler): without the end of its chunked body no client
// can take the rows it got for a whole page, nor the missing nextCursor
// for the last page.
func (pw *pageWriter) abort(ae *apiError) {
	b, _ := json.Marshal(map[string]any{"error": ae}) // plain fields always marshal
	pw.buf = append(pw.buf[:0], `],"error":`...)
	pw.buf = append(pw.buf, b[len(`{"error":`):]...)
	_, _ = pw.w.Write(pw.buf)
	_ = http.NewResponseController(pw.w).Flush()
	panic(http.ErrAbortHandler)
}
