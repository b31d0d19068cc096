package query

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/walhouse/walhouse/idempotency"
	"github.com/walhouse/walhouse/monitor"
	"github.com/walhouse/walhouse/schema"
)

// Config is what NewServer needs. Conn, Database, Keys and CursorSecret are
// required.
type Config struct {
	// Conn reaches ClickHouse (clickhouse.Open).
	Conn Conn
	// Database holds the replicated tables and _walhouse_sync.
	Database string
	// Keys authenticate callers: LoadKeys, or OpenKeyFile for keys
	// reloaded while the server runs.
	Keys KeyLookup
	// CursorSecret signs pagination cursors; at least 16 bytes. Cursors
	// survive a restart only if the secret does.
	CursorSecret []byte
	// Limits apply to every tenant without an entry in TenantLimits; zero
	// fields take the defaults documented on Limits.
	Limits Limits
	// TenantLimits override Limits per tenant (zero fields: Limits').
	TenantLimits map[string]Limits
	// MaxInFlight is how many reads, exports and table listings the
	// server runs at once, all tenants together; more are refused with
	// 429 and Retry-After before their body is read (default
	// DefaultMaxInFlight).
	MaxInFlight int
	// HTTP bounds the connections of the server that HTTPServer returns
	// (zero fields: the defaults documented on HTTPLimits).
	HTTP HTTPLimits
	// AuditKey keys the HMAC-SHA256 of the subject value that export
	// audit entries record instead of the value (AuditHash); at least 16
	// bytes. Empty means a key derived from CursorSecret.
	AuditKey []byte
	// Registry receives the server's metrics and is served at /metrics.
	// Nil means a private registry.
	Registry *prometheus.Registry
	// Logger gets request failures (with SQL and server messages, which
	// callers never see) and export audit entries. Nil means slog.Default().
	Logger *slog.Logger
	// CatalogTTL is how long discovered tables and columns are reused
	// (default 10 s).
	CatalogTTL time.Duration
	// JWT, when set, also accepts bearer JWTs whose tenant is a claim
	// (NewJWTAuth); API keys keep working beside them.
	JWT *JWTAuth
	// CORS lets browser pages of the allowed origins call the API
	// (default: none).
	CORS CORS
	// Eraser carries out POST /v1/erasures (optional: without it the
	// endpoint answers 503).
	Eraser Eraser
	// Pipeline adds the slot, capture, consumer-group and dead-letter
	// state to GET /v1/lag and /metrics (optional; see monitor.NewProbe).
	Pipeline PipelineProbe
	// HistoryInterval is how often Run samples the lag into the history
	// of GET /v1/lag/history (default monitor.DefaultHistoryInterval).
	HistoryInterval time.Duration
	// HistorySpan is how far back the history goes (default
	// monitor.DefaultHistorySpan); the oldest samples are dropped beyond it.
	HistorySpan time.Duration
	// TokenSource is the database the pipeline captures (its SystemID and
	// Database; LSN unused): reads accept consistency tokens of it only.
	// Zero refuses every token (tokens_unavailable).
	TokenSource idempotency.Token
	// DefaultTokenWait and MaxTokenWait bound a token read's wait: the
	// default when it names none, and the most it may name (defaults
	// DefaultTokenWait, DefaultMaxWait).
	DefaultTokenWait, MaxTokenWait time.Duration
	// WatchInterval is how often a waited-for table's load watermark is
	// read (default DefaultWatchInterval).
	WatchInterval time.Duration
}

// Server is the HTTP API. It is an http.Handler, safe for concurrent use.
// Its Run samples the lag history of GET /v1/lag/history; run it beside the
// HTTP server for as long as it serves.
//
// Routes:
//
//	GET  /v1/tables                    read    tables and columns
//	POST /v1/tables/{table}/query      read    structured read, FINAL by default
//	POST /v1/exports                   export  GDPR subject export, streamed
//	GET  /v1/exports/{id}/manifest     export  manifest of a finished export
//	POST /v1/erasures                  erase   GDPR subject erasure, started detached (202)
//	GET  /v1/erasures/{id}             erase   its state, its signed manifest once finished
//	GET  /v1/lag                       admin   per-table and per-partition freshness, pipeline lag
//	GET  /v1/lag/history               admin   lag samples of the last hour (see Run)
//	GET  /metrics                      admin   Prometheus metrics
//	GET  /status                       —       status page (asks for an admin key)
//	GET  /openapi.json                 —       OpenAPI 3 description
//	GET  /examples/orders              —       example dashboard (asks for a read key; also /examples/)
type Server struct {
	cfg      Config
	conn     Conn
	keys     KeyLookup
	catalog  *Catalog
	cursors  *Cursors
	exporter *Exporter
	slots    *slots
	manifest *manifestStore
	history  *monitor.History
	log      *slog.Logger
	handler  http.Handler
	erasing  erasureRuns // POST /v1/erasures running detached
	watch    *watchers   // load watermarks that token reads wait for
}

// NewServer validates cfg and returns the API handler.
func NewServer(cfg Config) (*Server, error) {
	var problems []error
	if cfg.Conn == nil {
		problems = append(problems, errors.New("query: Config.Conn is nil; pass the connection from clickhouse.Open"))
	}
	if cfg.Database == "" {
		problems = append(problems, errors.New("query: Config.Database is empty; set the database of the replicated tables (--database)"))
	}
	if cfg.Keys == nil {
		problems = append(problems, errNoKeys)
	}
	if len(cfg.CursorSecret) < 16 {
		problems = append(problems, fmt.Errorf("query: Config.CursorSecret has %d bytes; use at least 16 random bytes (--cursor-secret)", len(cfg.CursorSecret)))
	}
	if cfg.HistoryInterval == 0 {
		cfg.HistoryInterval = monitor.DefaultHistoryInterval
	}
	if cfg.HistorySpan == 0 {
		cfg.HistorySpan = monitor.DefaultHistorySpan
	}
	if cfg.HistoryInterval < 0 || cfg.HistorySpan < cfg.HistoryInterval {
		problems = append(problems, fmt.Errorf("query: Config.HistoryInterval %v and HistorySpan %v: want a positive interval no longer than the span", cfg.HistoryInterval, cfg.HistorySpan))
	}
	if len(cfg.AuditKey) > 0 && len(cfg.AuditKey) < 16 {
		problems = append(problems, fmt.Errorf("query: Config.AuditKey has %d bytes; use at least 16 random bytes (--audit-key)", len(cfg.AuditKey)))
	}
	if cfg.DefaultTokenWait < 0 || cfg.MaxTokenWait < 0 || cfg.WatchInterval < 0 {
		problems = append(problems, fmt.Errorf("query: Config.DefaultTokenWait %v, MaxTokenWait %v, WatchInterval %v: none may be negative", cfg.DefaultTokenWait, cfg.MaxTokenWait, cfg.WatchInterval))
	}
	if cfg.MaxInFlight < 0 {
		problems = append(problems, fmt.Errorf("query: Config.MaxInFlight %d is negative; want 0 (the default, %d) or more", cfg.MaxInFlight, DefaultMaxInFlight))
	}
	problems = append(problems, cfg.CORS.validate()...)
	if err := errors.Join(problems...); err != nil {
		return nil, err
	}
	cfg.Limits = cfg.Limits.withDefaults()
	cfg.MaxInFlight = cmp.Or(cfg.MaxInFlight, DefaultMaxInFlight)
	cfg.HTTP = cfg.HTTP.withDefaults()
	cfg.MaxTokenWait = cmp.Or(cfg.MaxTokenWait, DefaultMaxWait)
	cfg.DefaultTokenWait = min(cmp.Or(cfg.DefaultTokenWait, DefaultTokenWait), cfg.MaxTokenWait)
	cfg.WatchInterval = cmp.Or(cfg.WatchInterval, DefaultWatchInterval)
	cfg.AuditKey = AuditKey(cfg.AuditKey, cfg.CursorSecret)
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	log := cfg.Logger.With("component", "query")
	s := &Server{
		cfg:      cfg,
		conn:     cfg.Conn,
		keys:     cfg.Keys,
		catalog:  NewCatalog(cfg.Conn, cfg.Database, cfg.CatalogTTL),
		cursors:  NewCursors(cfg.CursorSecret, 0),
		slots:    newSlots(cfg.MaxInFlight),
		manifest: newManifestStore(1000),
		history:  monitor.NewHistory(cfg.HistoryInterval, cfg.HistorySpan),
		log:      log,
	}
	s.watch = newWatchers(func(ctx context.Context, table string) (SyncState, error) {
		return syncState(ctx, cfg.Conn, cfg.Database, table)
	}, cfg.WatchInterval, log)
	s.exporter = &Exporter{conn: cfg.Conn, database: cfg.Database, catalog: s.catalog, auditKey: cfg.AuditKey, log: log}
	m, err := newHTTPMetrics(cfg.Registry)
	if err != nil {
		return nil, err
	}
	if cfg.Pipeline != nil {
		if err := cfg.Registry.Register(monitor.NewCollector(cfg.Pipeline.Probe)); err != nil {
			return nil, fmt.Errorf("register pipeline metrics: %w", err)
		}
	}
	if err := cfg.Registry.Register(&freshnessCollector{conn: cfg.Conn, database: cfg.Database, log: log}); err != nil {
		return nil, fmt.Errorf("query: register the freshness collector: %w", err)
	}

	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/tables", s.requireScope(ScopeRead, s.inSlot(s.handleTables)))
	mux.HandleFunc("POST /v1/tables/{table}/query", s.requireScope(ScopeRead, s.inSlot(s.handleQuery)))
	mux.HandleFunc("POST /v1/exports", s.requireScope(ScopeExport, s.inSlot(s.handleExport)))
	mux.HandleFunc("GET /v1/exports/{id}/manifest", s.requireScope(ScopeExport, s.handleManifest))
	mux.HandleFunc("POST /v1/erasures", s.requireScope(ScopeErase, s.inSlot(s.handleErasure)))
	mux.HandleFunc("GET /v1/erasures/{id}", s.requireScope(ScopeErase, s.handleErasureStatus))
	mux.HandleFunc("GET /v1/lag", s.requireScope(ScopeAdmin, s.handleLag))
	mux.HandleFunc("GET /v1/lag/history", s.requireScope(ScopeAdmin, s.handleLagHistory))
	mux.HandleFunc("GET /metrics", s.requireScope(ScopeAdmin, s.handleMetrics))
	mux.HandleFunc("GET /status", handleStatus)
	mux.HandleFunc("GET /openapi.json", handleOpenAPI)
	mux.HandleFunc("GET /examples/orders", handleExampleOrders)
	mux.HandleFunc("GET /examples/{$}", handleExampleOrders)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		s.writeError(w, r, &apiError{Status: http.StatusNotFound, Code: "not_found", Message: fmt.Sprintf("no route %s %s; see /openapi.json", r.Method, r.URL.Path)})
	})
	s.handler = s.withRequestID(withSafeHeaders(withCORS(cfg.CORS, m.wrap(mux))))
	return s, nil
}

// ServeHTTP serves the API.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.handler.ServeHTTP(w, r) }

func (s *Server) withRequestID(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := newRequestID()
		w.Header().Set("X-Request-Id", id)
		ctx := r.Context()
		r = r.WithContext(contextWithRequestID(ctx, id))
		h.ServeHTTP(w, r)
	})
}

// withSafeHeaders marks every response, JSON, export or error, as not to
// be content-sniffed (a tenant's text value must never run as HTML) nor
// stored by a cache or proxy (responses hold tenant data or keys' views).
func withSafeHeaders(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Cache-Control", "no-store")
		h.ServeHTTP(w, r)
	})
}

// limitsFor returns the limits of tenant.
func (s *Server) limitsFor(tenant string) Limits {
	l, ok := s.cfg.TenantLimits[tenant]
	if !ok {
		return s.cfg.Limits
	}
	return l.orDefaults(s.cfg.Limits)
}

// DefaultMaxInFlight is the default of Config.MaxInFlight.
const DefaultMaxInFlight = 32

// slots counts the queries each tenant runs, and all tenants together, to
// refuse more than a tenant's MaxConcurrent or the server's MaxInFlight.
type slots struct {
	mu       sync.Mutex
	held     map[string]int
	total    int
	maxTotal int
	freed    chan struct{} // closed at the next release; nil when nobody waits
}

func newSlots(maxTotal int) *slots { return &slots{held: map[string]int{}, maxTotal: maxTotal} }

// Why slots.acquire refused.
var (
	errTenantBusy = errors.New("the tenant runs as many queries as it may")
	errServerBusy = errors.New("the server runs as many queries as it may")
)

// acquire takes a slot for tenant, or reports errTenantBusy when the
// tenant holds n, errServerBusy when all tenants together hold maxTotal.
func (sl *slots) acquire(tenant string, n int) (release func(), err error) {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	if sl.held[tenant] >= n {
		return nil, errTenantBusy
	}
	if sl.total >= sl.maxTotal {
		return nil, errServerBusy
	}
	sl.held[tenant]++
	sl.total++
	return sync.OnceFunc(func() {
		sl.mu.Lock()
		defer sl.mu.Unlock()
		sl.total--
		if sl.held[tenant]--; sl.held[tenant] <= 0 {
			delete(sl.held, tenant)
		}
		if sl.freed != nil {
			close(sl.freed) // wakes token reads taking their slots back (wait.go)
			sl.freed = nil
		}
	}), nil
}

// acquire takes a slot for tenant. Handlers take it before they read the
// body, so parsing and validating a request (up to maxBody of filter
// values) happens inside the caps, never beside them.
func (s *Server) acquire(tenant string, lim Limits) (func(), error) {
	release, err := s.slots.acquire(tenant, lim.MaxConcurrent)
	switch {
	case errors.Is(err, errTenantBusy):
		return nil, &apiError{Status: http.StatusTooManyRequests, Code: "too_many_queries", Message: fmt.Sprintf("this tenant already runs %d queries, its limit; retry when one finishes", lim.MaxConcurrent), RetryAfter: 1}
	case errors.Is(err, errServerBusy):
		return nil, &apiError{Status: http.StatusTooManyRequests, Code: "server_busy", Message: fmt.Sprintf("the server already runs %d queries, its limit for all tenants; retry shortly", s.cfg.MaxInFlight), RetryAfter: 1}
	}
	return release, nil
}

const maxBody = 1 << 20

// decodeBody reads a JSON body strictly: unknown fields are errors, and a
// body over maxBody is refused as such rather than as truncated JSON.
func decodeBody(r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(nil, r.Body, maxBody))
	dec.DisallowUnknownFields()
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return &apiError{Status: http.StatusRequestEntityTooLarge, Code: "body_too_large", Message: fmt.Sprintf("the request body is larger than %d bytes, the limit", maxBody)}
		}
		return &RequestError{Field: "body", Reason: "not valid JSON for this endpoint: " + err.Error()}
	}
	if dec.More() {
		return &RequestError{Field: "body", Reason: "has data after the JSON object"}
	}
	return nil
}

// tableInfo is one entry of GET /v1/tables.
type tableInfo struct {
	Name    string   `json:"name"`
	Columns []Column `json:"columns"`
}

// slotted is a handler that runs inside the caller's concurrency slots,
// with the caller's key and limits.
type slotted func(w http.ResponseWriter, r *http.Request, key Key, lim Limits)

// inSlot takes the caller's tenant slot and the server's global slot before
// anything of the request body is read or parsed (a huge body must not burn
// CPU outside them), then runs h.
func (s *Server) inSlot(h slotted) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		key, _ := callerKey(r.Context())
		lim := s.limitsFor(key.Tenant)
		release, err := s.acquire(key.Tenant, lim)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		// A token read gives the slots up while it waits (slotHold).
		hold := &slotHold{s: s, tenant: key.Tenant, lim: lim, release: release}
		defer hold.done()
		h(w, r.WithContext(context.WithValue(r.Context(), slotHoldCtx{}, hold)), key, lim)
	}
}

func (s *Server) handleTables(w http.ResponseWriter, r *http.Request, key Key, lim Limits) {
	tables, err := s.catalog.TenantTables(r.Context(), key.Tenant, lim)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := make([]tableInfo, 0, len(tables))
	for _, t := range tables {
		ti := tableInfo{Name: t.Name, Columns: []Column{}}
		for _, c := range t.Columns {
			if c.Name != schema.DeletedColumn {
				ti.Columns = append(ti.Columns, c)
			}
		}
		out = append(out, ti)
	}
	writeJSON(w, http.StatusOK, map[string]any{"tables": out})
}

// Meta is the "meta" object of a read response.
type Meta struct {
	// LastSyncAt: every change committed in PostgreSQL at or before it is
	// in the result's table (see SyncState); null when unknown. It is read
	// before the data, so the data is at least this fresh.
	LastSyncAt *time.Time `json:"lastSyncAt"`
	// LSN is the WAL position loaded for every partition, "X/Y".
	LSN *LSN `json:"lsn"`
	// Fresh, only for a read with consistency tokens, tells whether the
	// table is loaded through every token (LSN at or past it): false when
	// the wait ended first (see TokenRead).
	Fresh       *bool       `json:"fresh,omitempty"`
	SyncNote    string      `json:"syncNote,omitempty"`
	Consistency Consistency `json:"consistency"`
	Rows        int         `json:"rows"`
	NextCursor  *string     `json:"nextCursor"`
}

const staleNote = "not loaded through the consistency token's position %s within the wait of %s: writes committed before the token may be missing; meta.lsn is how far the table is loaded"

const noSyncNote = "the sink has not recorded progress for this table yet: freshness is unknown"

func (s *Server) handleQuery(w http.ResponseWriter, r *http.Request, key Key, lim Limits) {
	ctx := r.Context()
	var req Request
	if err := decodeBody(r, &req); err != nil {
		s.fail(w, r, err)
		return
	}
	tw, err := s.parseTokenRead(r, req.TokenRead)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	t, err := s.tenantTableAfter(ctx, key.Tenant, lim, r.PathValue("table"), tw)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	waitStart := time.Now()
	_, states, err := s.awaitTables(ctx, []string{t.Name}, tw)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	waited := time.Since(waitStart)
	offset := 0
	if req.Cursor != "" {
		if offset, err = s.cursors.Verify(req.Cursor, key.Tenant, t.Name, req); err != nil {
			s.fail(w, r, err)
			return
		}
	}
	zones, err := s.zonesFor(ctx, req)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	st, err := BuildSelect(SelectInput{Table: t, Tenant: key.Tenant, Req: req, Offset: offset, Limits: lim, TimeZones: zones})
	if err != nil {
		s.fail(w, r, err)
		return
	}

	// A token read that waited has the read of the sync state that saw its
	// table loaded: one query less, in front of the data's, on an engine
	// that may queue them behind inserts.
	sync, ok := states[t.Name]
	if !ok {
		if sync, err = syncState(ctx, s.conn, s.cfg.Database, t.Name); err != nil {
			s.fail(w, r, err)
			return
		}
	}
	rows, err := s.conn.Query(statementContext(ctx, st), st.SQL)
	if err != nil {
		s.fail(w, r, fmt.Errorf("%w (sql: %s)", err, st.SQL))
		return
	}
	defer rows.Close()
	consistency := cmp.Or(req.Consistency, Final)
	page := newPageWriter(w, lim.MaxPageBytes, func(h http.Header) {
		h.Set("Content-Type", "application/json")
		if consistency == Approximate {
			h.Set("X-Walhouse-Consistency", string(Approximate))
		}
		if tw.active() {
			h.Set(TimingHeader, timing(waited))
		}
	})
	n, more, err := writePageRows(page, rows, st.PageSize)
	if err != nil {
		s.failPage(w, r, page, fmt.Errorf("read %s: %w (sql: %s)", t.Name, err, st.SQL))
		return
	}
	meta := Meta{LastSyncAt: sync.LastSyncAt, LSN: sync.LSN, Fresh: freshOf(sync, tw), Consistency: consistency, Rows: n}
	switch {
	case sync.LastSyncAt == nil:
		meta.SyncNote = noSyncNote
	case meta.Fresh != nil && !*meta.Fresh:
		meta.SyncNote = fmt.Sprintf(staleNote, tw.lsn, tw.wait)
	}
	if more {
		c := s.cursors.Mint(key.Tenant, t.Name, req, offset+n)
		meta.NextCursor = &c
	}
	mb, _ := json.Marshal(meta) // plain fields always marshal
	_, _ = page.WriteString(`],"meta":`)
	_, _ = page.Write(mb)
	_, _ = page.WriteString("}\n")
	if err := page.finish(); err != nil {
		s.failPage(w, r, page, fmt.Errorf("read %s: %w", t.Name, err))
	}
}

// writePageRows writes `{"data":[` and up to pageSize rows to page, and
// reports how many it wrote and whether the result had more.
func writePageRows(page *pageWriter, rows driver.Rows, pageSize int) (n int, more bool, err error) {
	if _, err := page.WriteString(`{"data":[`); err != nil {
		return 0, false, err
	}
	sc := newRowScanner(rows)
	for rows.Next() {
		if n == pageSize {
			return n, true, nil
		}
		if err := sc.scan(rows); err != nil {
			return n, false, fmt.Errorf("scan row %d: %w", n, err)
		}
		if n > 0 {
			if _, err := page.WriteString(","); err != nil {
				return n, false, err
			}
		}
		if err := sc.writeJSONObject(page); err != nil {
			return n, false, err
		}
		n++
	}
	return n, false, rows.Err()
}

// failPage answers a read that failed: with the error's own status while
// nothing of the page was sent, else by cutting the streamed page off
// (pageWriter.abort). A page over its byte limit is over_limit either way.
func (s *Server) failPage(w http.ResponseWriter, r *http.Request, page *pageWriter, err error) {
	if errors.Is(err, errPageTooLarge) {
		err = &apiError{Status: http.StatusBadRequest, Code: "over_limit", Message: fmt.Sprintf("the page's JSON is larger than %d bytes, the limit of a page; ask for fewer columns or page with a smaller limit", page.max)}
	}
	if !page.committed {
		s.fail(w, r, err)
		return
	}
	if r.Context().Err() != nil {
		// The caller went away mid-page, or seems to (net/http ends the
		// context of one that half-closes): no log, but the body is
		// still cut off, never ended as if whole.
		panic(http.ErrAbortHandler)
	}
	ae := s.classify(err)
	s.log.Error("read failed mid-page: the response is cut off", "request_id", requestID(r.Context()), "route", r.Pattern, "code", ae.Code, "bytes_sent", page.n-int64(len(page.buf)), "err", clip(err.Error(), maxMessage))
	out := *ae
	out.RequestID = requestID(r.Context())
	out.Message = clip(out.Message, maxMessage)
	page.abort(&out)
}

// statementContext carries a statement's parameters and settings to the
// ClickHouse client.
func statementContext(ctx context.Context, st Statement) context.Context {
	return ch.Context(ctx, ch.WithParameters(ch.Parameters(st.Params)), ch.WithSettings(ch.Settings(st.Settings)))
}
