package query

import (
	"net/http"
	"time"
)

// HTTPLimits bound the connections of the API's HTTP server, so a slow or
// hostile client cannot hold a connection (and its goroutine) forever.
// Zero fields take the defaults named on each field.
type HTTPLimits struct {
	// ReadHeaderTimeout bounds reading a request's headers (default 10 s).
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds reading a whole request, body included (default
	// 30 s; bodies are at most 1 MiB).
	ReadTimeout time.Duration
	// WriteTimeout bounds writing a response of a read (default 60 s,
	// above the 30 s default of Limits.MaxExecutionTime). An export
	// streams for longer: it gets WriteTimeout for each of its writes
	// instead, and Limits.MaxExportTime for the whole.
	WriteTimeout time.Duration
	// IdleTimeout is how long a keep-alive connection may wait for its
	// next request (default 2 min).
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds a request's headers; more get 431 (default
	// 64 KiB).
	MaxHeaderBytes int
}

// withDefaults fills zero fields with their documented defaults.
func (l HTTPLimits) withDefaults() HTTPLimits {
	if l.ReadHeaderTimeout <= 0 {
		l.ReadHeaderTimeout = 10 * time.Second
	}
	if l.ReadTimeout <= 0 {
		l.ReadTimeout = 30 * time.Second
	}
	if l.WriteTimeout <= 0 {
		l.WriteTimeout = 60 * time.Second
	}
	if l.IdleTimeout <= 0 {
		l.IdleTimeout = 2 * time.Minute
	}
	if l.MaxHeaderBytes <= 0 {
		l.MaxHeaderBytes = 64 << 10
	}
	return l
}

// HTTPServer returns an http.Server that serves s with the timeouts and
// header limit of Config.HTTP. The caller sets Addr (or calls Serve with a
// listener) and shuts it down.
func (s *Server) HTTPServer() *http.Server {
	h := s.cfg.HTTP
	return &http.Server{
		Handler:           s,
		ReadHeaderTimeout: h.ReadHeaderTimeout,
		ReadTimeout:       h.ReadTimeout,
		WriteTimeout:      h.WriteTimeout,
		IdleTimeout:       h.IdleTimeout,
		MaxHeaderBytes:    h.MaxHeaderBytes,
	}
}

// streamWriter gives each write of a streamed response its own deadline,
// timeout from now, in place of the server's WriteTimeout for the whole
// response: an export may stream for an hour to a client that keeps
// reading, but never waits longer than timeout on one that stopped.
type streamWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
	set     time.Time // when the deadline was last moved
}

func newStreamWriter(w http.ResponseWriter, timeout time.Duration) *streamWriter {
	sw := &streamWriter{w: w, rc: http.NewResponseController(w), timeout: timeout}
	sw.extend()
	return sw
}

// extend moves the write deadline to timeout from now. Rows are written
// far more often than deadlines need moving, so it moves it only when a
// tenth of timeout (at most a second) has passed: each write still has at
// least nine tenths of it.
func (sw *streamWriter) extend() {
	now := time.Now()
	if now.Sub(sw.set) < min(time.Second, sw.timeout/10) {
		return
	}
	sw.set = now
	_ = sw.rc.SetWriteDeadline(now.Add(sw.timeout)) // unsupported by a test recorder: no deadline then
}

func (sw *streamWriter) Write(p []byte) (int, error) {
	sw.extend()
	return sw.w.Write(p)
}

// Flush sends what is buffered to the client.
func (sw *streamWriter) Flush() {
	sw.extend()
	_ = sw.rc.Flush()
}

// finish gives the response's end (the trailers) a full timeout.
func (sw *streamWriter) finish() {
	sw.set = time.Time{}
	sw.extend()
}
