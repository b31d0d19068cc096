package chdb

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Defaults of the Server options.
const (
	DefaultMaxBodySize     = 1 << 30 // 1 GiB
	DefaultIOTimeout       = time.Minute
	DefaultShutdownTimeout = 30 * time.Second
)

// insertHeadSize bounds how much of a request body is examined to find an
// INSERT's FORMAT clause when the statement itself arrives in the body.
const insertHeadSize = 64 << 10

// helloQuery is the first statement clickhouse-go sends over HTTP; see
// helloBlock for how it is answered.
const helloQuery = "SELECT displayName(), version(), revision(), timezone()"

// Option configures a Server.
type Option interface{ apply(*serverConfig) }

type optionFunc func(*serverConfig)

func (f optionFunc) apply(c *serverConfig) { f(c) }

type serverConfig struct {
	maxBodySize     int64
	ioTimeout       time.Duration
	shutdownTimeout time.Duration
	log             *slog.Logger
}

// WithMaxBodySize bounds a request body, after decompression, in bytes
// (default DefaultMaxBodySize). Larger requests fail with HTTP 413.
func WithMaxBodySize(n int64) Option {
	return optionFunc(func(c *serverConfig) { c.maxBodySize = n })
}

// WithIOTimeout bounds how long one read of a request body, or one piece
// (at most 64 KiB) of a response, may wait on the client (default
// DefaultIOTimeout). The engine serves nobody else meanwhile, so a stalled
// client must not hold it; a slow one that keeps reading is served to the
// end, however long the result, as ClickHouse's http_send_timeout (a
// socket send timeout, 30 s by default) serves it.
func WithIOTimeout(d time.Duration) Option {
	return optionFunc(func(c *serverConfig) { c.ioTimeout = d })
}

// WithShutdownTimeout bounds how long Serve waits for running requests once
// its context ends (default DefaultShutdownTimeout); then it closes them.
func WithShutdownTimeout(d time.Duration) Option {
	return optionFunc(func(c *serverConfig) { c.shutdownTimeout = d })
}

// WithLogger sets the logger (default slog.Default()).
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(c *serverConfig) { c.log = l })
}

// Server answers ClickHouse's HTTP interface from an Engine, enough of it
// for clickhouse-go/v2 with Protocol HTTP, curl and the ClickHouse docs'
// examples. It is an http.Handler and is safe for concurrent use; the engine
// runs the statements one at a time.
type Server struct {
	engine *Engine
	cfg    serverConfig
}

// NewServer returns a Server over e. It reports every invalid option.
func NewServer(e *Engine, opts ...Option) (*Server, error) {
	cfg := serverConfig{
		maxBodySize:     DefaultMaxBodySize,
		ioTimeout:       DefaultIOTimeout,
		shutdownTimeout: DefaultShutdownTimeout,
		log:             slog.Default(),
	}
	for _, o := range opts {
		o.apply(&cfg)
	}
	var errs []error
	if e == nil {
		errs = append(errs, errors.New("chdb: NewServer needs an engine"))
	}
	if cfg.maxBodySize <= 0 {
		errs = append(errs, fmt.Errorf("chdb: WithMaxBodySize(%d): want a positive number of bytes", cfg.maxBodySize))
	}
	if cfg.ioTimeout <= 0 {
		errs = append(errs, fmt.Errorf("chdb: WithIOTimeout(%v): want a positive duration", cfg.ioTimeout))
	}
	if cfg.shutdownTimeout < 0 {
		errs = append(errs, fmt.Errorf("chdb: WithShutdownTimeout(%v): want zero or a positive duration", cfg.shutdownTimeout))
	}
	if cfg.log == nil {
		errs = append(errs, errors.New("chdb: WithLogger(nil): want a logger"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return &Server{engine: e, cfg: cfg}, nil
}

// Serve answers HTTP on ln until ctx ends, then stops accepting, lets
// running requests finish within the shutdown timeout, and returns nil.
// It returns the listener's error if serving fails first.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	hs := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: s.cfg.ioTimeout,
		IdleTimeout:       5 * time.Minute,
		ErrorLog:          slog.NewLogLogger(s.cfg.log.Handler(), slog.LevelWarn),
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("chdb: serve HTTP on %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), s.cfg.shutdownTimeout)
	defer cancel()
	err := hs.Shutdown(sctx)
	if err != nil {
		// Requests still running: closing their connections cancels their
		// contexts, which stops their statements at the next chunk.
		_ = hs.Close()
	}
	<-errc
	if err != nil {
		return fmt.Errorf("chdb: shut down HTTP: %w", err)
	}
	return nil
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	switch r.URL.Path {
	case "/ping":
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			s.fail(w, r, http.StatusMethodNotAllowed, errorf(CodeUnsupportedMethod, "use GET or HEAD for /ping"))
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=UTF-8")
		_, _ = io.WriteString(w, "Ok.\n")
		return
	case "/", "":
	default:
		s.fail(w, r, http.StatusNotFound, errorf(CodeUnsupportedMethod, fmt.Sprintf("no handler for path %s; the embedded-engine front serves / and /ping", r.URL.Path)))
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodPost && r.Method != http.MethodHead {
		s.fail(w, r, http.StatusMethodNotAllowed, errorf(CodeUnsupportedMethod, "use GET or POST"))
		return
	}
	if r.Method != http.MethodPost && r.URL.RawQuery == "" {
		// ClickHouse answers a bare GET / like /ping.
		_, _ = io.WriteString(w, "Ok.\n")
		return
	}
	// Per-read and per-write deadlines set while serving must not outlive
	// the request on a kept-alive connection.
	defer func() {
		ctl := http.NewResponseController(w)
		_ = ctl.SetReadDeadline(time.Time{})
		_ = ctl.SetWriteDeadline(time.Time{})
	}()
	status, err := s.handle(w, r)
	// Engine exceptions are the client's business (a wrong query); only
	// failures of the front itself deserve attention.
	level := slog.LevelDebug
	var ce *Error
	if err != nil && !errors.As(err, &ce) && !isClientError(err) {
		level = slog.LevelWarn
	}
	s.cfg.log.Log(r.Context(), level, "chdb http request",
		"remote", r.RemoteAddr, "status", status, "duration", time.Since(start), "error", err)
}

// handle runs one statement and returns the HTTP status it answered with.
func (s *Server) handle(w http.ResponseWriter, r *http.Request) (int, error) {
	p, err := parseParams(r.URL.Query())
	if err != nil {
		return s.fail(w, r, http.StatusBadRequest, err), err
	}
	if ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); strings.HasPrefix(ct, "multipart/") {
		err := errorf(CodeUnsupportedMethod, "external tables (multipart/form-data requests) are not supported by the embedded-engine front")
		return s.fail(w, r, http.StatusBadRequest, err), err
	}
	body, err := s.requestBody(w, r)
	if err != nil {
		return s.fail(w, r, http.StatusBadRequest, err), err
	}
	defer body.Close()

	st := Statement{Format: p.format, Database: p.database, Params: p.params, Settings: p.settings}
	if st.Format == "" {
		st.Format = "TabSeparated"
	}
	head := p.query
	br := bufio.NewReaderSize(body, insertHeadSize)
	peek, perr := br.Peek(insertHeadSize)
	if perr != nil && perr != io.EOF && perr != bufio.ErrBufferFull {
		return s.bodyFailed(w, r, perr)
	}
	if head != "" && len(peek) > 0 {
		head += "\n"
	}
	// The statement is the query parameter, a line break and the body, as
	// on a server. An INSERT whose data follows its FORMAT clause streams
	// that data into the engine; everything else is read whole.
	if stmt, format, dataAt, ok := splitInsert(head + string(peek)); ok {
		data := io.MultiReader(strings.NewReader(head), br)
		if _, err := io.CopyN(io.Discard, data, int64(dataAt)); err != nil {
			return s.bodyFailed(w, r, err)
		}
		st.SQL, st.Format = stmt, format
		return s.insert(w, r, st, data)
	}
	rest, err := io.ReadAll(br)
	if err != nil {
		return s.bodyFailed(w, r, err)
	}
	st.SQL = head + string(rest)
	if strings.TrimSpace(st.SQL) == "" {
		err := errorf(CodeSyntaxError, "empty query: send it in the body or the query URL parameter")
		return s.fail(w, r, http.StatusBadRequest, err), err
	}
	switch {
	case strings.TrimRight(strings.TrimSpace(st.SQL), ";") == helloQuery:
		return s.hello(w, r, st, p.clientRevision)
	case leadingKeyword(st.SQL) == "SET":
		// A server runs each session-less HTTP request in a fresh session,
		// so a SET there has no effect beyond its own request; here it has
		// none at all, rather than leaking into the shared session.
		w.Header().Set("X-ClickHouse-Summary", summaryJSON(Progress{}))
		return http.StatusOK, nil
	}
	return s.query(w, r, st, p.waitEndOfQuery)
}

// hello answers clickhouse-go's first query (see helloBlock). It runs in
// the request's database and settings, so a wrong database fails here, as
// on a server.
func (s *Server) hello(w http.ResponseWriter, r *http.Request, st Statement, revision uint64) (int, error) {
	st.SQL, st.Format, st.Params = "SELECT displayName(), version(), timezone()", "JSONCompactEachRow", nil
	var out bytes.Buffer
	if _, err := s.engine.Run(r.Context(), st, &out); err != nil {
		return s.fail(w, r, statusOf(err), err), err
	}
	var row [3]string
	if err := json.Unmarshal(out.Bytes(), &row); err != nil {
		err = fmt.Errorf("read the engine's identity %q: %w", out.Bytes(), err)
		return s.fail(w, r, http.StatusInternalServerError, err), err
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("X-ClickHouse-Format", "Native")
	_, err := w.Write(helloBlock(revision, row[0], row[1], row[2]))
	return http.StatusOK, err
}

// requestBody returns the request body, bounded and decompressed.
func (s *Server) requestBody(w http.ResponseWriter, r *http.Request) (io.ReadCloser, error) {
	raw := http.MaxBytesReader(w, r.Body, s.cfg.maxBodySize)
	raw = &deadlineReader{rc: raw, ctl: http.NewResponseController(w), timeout: s.cfg.ioTimeout}
	var dec io.ReadCloser
	switch enc := strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding"))); enc {
	case "", "identity":
		return raw, nil
	case "gzip", "x-gzip":
		zr, err := gzip.NewReader(raw)
		if err != nil {
			return nil, errorf(CodeBadArguments, "request body is not gzip: "+err.Error())
		}
		dec = zr
	case "deflate":
		zr, err := zlib.NewReader(raw)
		if err != nil {
			return nil, errorf(CodeBadArguments, "request body is not deflate (zlib): "+err.Error())
		}
		dec = zr
	default:
		return nil, errorf(CodeUnsupportedMethod, fmt.Sprintf("Content-Encoding %q is not supported by the embedded-engine front; use gzip, deflate or none", enc))
	}
	// The limit applies to what the engine sees too: a small compressed
	// body must not expand without bound.
	return &limitedBody{r: dec, closers: []io.Closer{dec, raw}, left: s.cfg.maxBodySize, max: s.cfg.maxBodySize}, nil
}

// query runs a statement with output and streams the output to w.
func (s *Server) query(w http.ResponseWriter, r *http.Request, st Statement, waitEnd bool) (int, error) {
	rw := newResponseStream(w, r, st.Format, s.cfg.ioTimeout)
	var out io.Writer = rw
	var buf *bytes.Buffer
	if waitEnd {
		// wait_end_of_query: the client wants a failure as an HTTP status
		// even when it comes after the first rows.
		buf = &bytes.Buffer{}
		out = buf
	}
	pr, err := s.engine.Run(r.Context(), st, out)
	if err == nil && buf != nil {
		rw.summary = &pr
		_, err = rw.Write(buf.Bytes())
	}
	if err != nil {
		if rw.committed {
			rw.exception(err)
			return http.StatusOK, err
		}
		return s.fail(w, r, statusOf(err), err), err
	}
	if !rw.committed {
		rw.summary = &pr
		rw.commit()
	}
	return http.StatusOK, nil
}

// insert streams data into an INSERT and answers with its summary.
func (s *Server) insert(w http.ResponseWriter, r *http.Request, st Statement, data io.Reader) (int, error) {
	pr, err := s.engine.InsertFrom(r.Context(), st, data)
	if err != nil {
		return s.fail(w, r, statusOf(err), err), err
	}
	w.Header().Set("X-ClickHouse-Summary", summaryJSON(pr))
	w.WriteHeader(http.StatusOK)
	return http.StatusOK, nil
}

func (s *Server) bodyFailed(w http.ResponseWriter, r *http.Request, err error) (int, error) {
	err = fmt.Errorf("read request body: %w", err)
	return s.fail(w, r, statusOf(err), err), err
}

// fail answers with err the way ClickHouse does: the status, the exception
// code in X-ClickHouse-Exception-Code, and the message as the body, which
// clickhouse-go turns into a *clickhouse.Exception.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, status int, err error) int {
	ce := asEngineError(err)
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=UTF-8")
	h.Set("X-ClickHouse-Exception-Code", strconv.Itoa(ce.Code))
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	if r.Method != http.MethodHead {
		_, _ = io.WriteString(w, ce.Error()+"\n")
	}
	return status
}

// asEngineError gives every error a ClickHouse code and message.
func asEngineError(err error) *Error {
	var ce *Error
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &ce):
		return ce
	case errors.As(err, &mbe), errors.Is(err, errBodyTooLarge):
		return errorf(CodeBadArguments, "request body too large: "+err.Error())
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return errorf(CodeQueryWasCancelled, "query was cancelled: "+err.Error())
	default:
		return errorf(CodeUnknownException, err.Error())
	}
}

// statusOf maps an error to the HTTP status a server would use.
func statusOf(err error) int {
	var mbe *http.MaxBytesError
	var ce *Error
	switch {
	case errors.As(err, &mbe), errors.Is(err, errBodyTooLarge):
		return http.StatusRequestEntityTooLarge
	case errors.Is(err, ErrClosed):
		return http.StatusServiceUnavailable
	case errors.As(err, &ce):
		return http.StatusInternalServerError
	case isClientError(err):
		return http.StatusBadRequest
	default:
		return http.StatusInternalServerError
	}
}

// isClientError reports failures caused by the client's connection.
func isClientError(err error) bool {
	var ne net.Error
	var mbe *http.MaxBytesError
	return errors.Is(err, context.Canceled) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.As(err, &ne) || errors.As(err, &mbe) || errors.Is(err, errBodyTooLarge)
}

// responseStream writes a result as the engine produces it. Headers go out
// with the first byte, so a failure before that is an HTTP error, and one
// after it is an exception block in the body, framed as ClickHouse frames
// it and announced by X-ClickHouse-Exception-Tag.
type responseStream struct {
	w         http.ResponseWriter
	ctl       *http.ResponseController
	format    string
	timeout   time.Duration
	tag       string
	head      bool
	committed bool
	summary   *Progress // sent as X-ClickHouse-Summary when known before commit
}

func newResponseStream(w http.ResponseWriter, r *http.Request, format string, timeout time.Duration) *responseStream {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return &responseStream{
		w: w, ctl: http.NewResponseController(w), format: format, timeout: timeout,
		tag: hex.EncodeToString(b[:]), head: r.Method == http.MethodHead,
	}
}

func (s *responseStream) commit() {
	if s.committed {
		return
	}
	s.committed = true
	h := s.w.Header()
	h.Set("Content-Type", contentType(s.format))
	h.Set("X-ClickHouse-Format", s.format)
	h.Set("X-ClickHouse-Exception-Tag", s.tag)
	if s.summary != nil {
		h.Set("X-ClickHouse-Summary", summaryJSON(*s.summary))
	}
	s.w.WriteHeader(http.StatusOK)
}

// sendPiece is the most of a result written under one write deadline. The
// engine hands over whole blocks (up to tens of MB); a deadline per block
// would fail a client that reads steadily but needs longer than the timeout
// to drain one. Per piece, the deadline bounds only how long the client
// accepts nothing, like a socket send timeout.
const sendPiece = 64 << 10

func (s *responseStream) Write(p []byte) (int, error) {
	s.commit()
	if s.head {
		return len(p), nil
	}
	written := 0
	for len(p) > 0 {
		piece := p[:min(len(p), sendPiece)]
		_ = s.ctl.SetWriteDeadline(time.Now().Add(s.timeout))
		n, err := s.w.Write(piece)
		written += n
		if err == nil {
			err = s.ctl.Flush()
		}
		if err != nil {
			return written, err
		}
		p = p[len(piece):]
	}
	return written, nil
}

// exception ends a committed response with err in ClickHouse's framing:
// "\r\n__exception__\r\n<tag>\r\n<message>\n<length> <tag>\r\n__exception__\r\n".
func (s *responseStream) exception(err error) {
	if s.head {
		return
	}
	msg := asEngineError(err).Error()
	var b strings.Builder
	fmt.Fprintf(&b, "\r\n__exception__\r\n%s\r\n%s\n%d %s\r\n__exception__\r\n", s.tag, msg, len(msg), s.tag)
	_ = s.ctl.SetWriteDeadline(time.Now().Add(s.timeout))
	_, _ = io.WriteString(s.w, b.String())
	_ = s.ctl.Flush()
}

func contentType(format string) string {
	switch f := strings.ToLower(format); {
	case strings.HasPrefix(f, "json"):
		return "application/json; charset=UTF-8"
	case strings.HasPrefix(f, "tabseparated"), strings.HasPrefix(f, "tsv"):
		return "text/tab-separated-values; charset=UTF-8"
	case strings.HasPrefix(f, "csv"):
		return "text/csv; charset=UTF-8"
	case f == "native", strings.HasPrefix(f, "rowbinary"), f == "parquet", strings.HasPrefix(f, "arrow"):
		return "application/octet-stream"
	default:
		return "text/plain; charset=UTF-8"
	}
}

// summaryJSON renders Progress as X-ClickHouse-Summary does; ClickHouse
// quotes the numbers.
func summaryJSON(p Progress) string {
	return fmt.Sprintf(`{"read_rows":"%d","read_bytes":"%d","written_rows":"%d","written_bytes":"%d","total_rows_to_read":"0","result_rows":"0","result_bytes":"0","elapsed_ns":"%d"}`,
		p.RowsRead, p.BytesRead, p.RowsWritten, p.BytesWritten, p.Elapsed.Nanoseconds())
}

// deadlineReader arms the connection's read deadline for each read, so a
// client that stops sending mid-body is dropped after timeout instead of
// holding the engine, and disarms it after each read: once the body is
// consumed, net/http keeps reading the connection in the background to
// notice a client that goes away, and a deadline left armed would expire
// there while a long result streams, cancelling the request's context and
// so its query (code 394) although the client is still reading.
type deadlineReader struct {
	rc      io.ReadCloser
	ctl     *http.ResponseController
	timeout time.Duration
}

func (d *deadlineReader) Read(p []byte) (int, error) {
	_ = d.ctl.SetReadDeadline(time.Now().Add(d.timeout))
	n, err := d.rc.Read(p)
	_ = d.ctl.SetReadDeadline(time.Time{})
	return n, err
}

func (d *deadlineReader) Close() error { return d.rc.Close() }

var errBodyTooLarge = errors.New("decompressed request body exceeds the limit")

// limitedBody bounds a decompressed body and closes the whole chain.
type limitedBody struct {
	r       io.Reader
	closers []io.Closer
	left    int64
	max     int64
}

func (l *limitedBody) Read(p []byte) (int, error) {
	if l.left <= 0 {
		// Tell a body that ends exactly at the limit from one that goes on.
		var one [1]byte
		if n, _ := l.r.Read(one[:]); n > 0 {
			return 0, fmt.Errorf("%w (%d bytes)", errBodyTooLarge, l.max)
		}
		return 0, io.EOF
	}
	if int64(len(p)) > l.left {
		p = p[:l.left]
	}
	n, err := l.r.Read(p)
	l.left -= int64(n)
	return n, err
}

func (l *limitedBody) Close() error {
	var errs []error
	for _, c := range l.closers {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}
