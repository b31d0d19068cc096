package query

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/csv"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"

	"github.com/walhouse/walhouse/schema"
)

// Format is the encoding of an export.
type Format string

// The export formats.
const (
	// JSONL writes one line per row: {"table": "...", "row": {...}}.
	JSONL Format = "jsonl"
	// CSV writes, per table, a header line "table,<columns…>" and then one
	// line per row starting with the table name. NULL is an empty field;
	// arrays and maps are JSON text. A field that starts with =, +, -, @,
	// a tab or a carriage return is written with a leading ' (OWASP's
	// defence against CSV injection), so a spreadsheet shows it as text
	// instead of running it as a formula; plain numbers (-12.5, +3e4) are
	// left as they are.
	CSV Format = "csv"
	// Parquet writes one Parquet file (zstd): a required string column
	// _table names each row's table, and each table is an optional group
	// of its columns, typed from their ClickHouse types (Nullable columns
	// optional; integers, floats, booleans, DECIMAL up to 18 digits, UUID,
	// DATE, TIMESTAMP(µs, UTC); wider integers and decimals as exact text;
	// arrays and maps as JSON text). Row groups hold at most 16,384 rows.
	Parquet Format = "parquet"
)

// Subject identifies a data subject: every row whose Column equals Value.
type Subject struct {
	Column string `json:"column"`
	Value  any    `json:"value"`
}

// ExportRequest asks for every row of one subject within one tenant.
type ExportRequest struct {
	Tenant  string
	Subject Subject
	// Tables to export; empty means every table that has Subject.Column.
	Tables []string
	// Format defaults to JSONL.
	Format Format
	// RequestedBy names who asked (an API key id, or "cli"), for the audit
	// log and the manifest.
	RequestedBy string
	// Limits bound the export: MaxExportTime (the whole export and each
	// table's query), MaxExportRows, MaxExportBytes, and the memory and
	// thread settings of its queries. Zero fields take the defaults
	// documented on Limits.
	Limits Limits
	// Rows, when set, is updated as rows stream (progress reporting).
	Rows *atomic.Int64
}

// TableManifest describes one table of an export.
type TableManifest struct {
	Table      string     `json:"table"`
	Rows       int64      `json:"rows"`
	LastSyncAt *time.Time `json:"lastSyncAt"`
	LSN        *LSN       `json:"lsn"`
}

// Manifest describes a finished (or failed) export. SHA256 is the hex
// SHA-256 of exactly the bytes streamed, so a recipient can check that the
// file is complete and unaltered.
type Manifest struct {
	ID          string          `json:"id"`
	Tenant      string          `json:"tenant"`
	Subject     Subject         `json:"subject"`
	Format      Format          `json:"format"`
	Tables      []TableManifest `json:"tables"`
	Rows        int64           `json:"rows"`
	Bytes       int64           `json:"bytes"`
	SHA256      string          `json:"sha256"`
	RequestedBy string          `json:"requestedBy"`
	StartedAt   time.Time       `json:"startedAt"`
	FinishedAt  time.Time       `json:"finishedAt"`
	// Complete is false when the export stopped early (an error, or the
	// caller went away); the streamed content is then partial.
	Complete bool   `json:"complete"`
	Error    string `json:"error,omitempty"`
}

// Exporter streams GDPR subject exports: every matching row read FINAL,
// table by table, straight from the ClickHouse driver to the writer, so
// memory stays bounded whatever the size. It is safe for concurrent use.
type Exporter struct {
	conn     Conn
	database string
	catalog  *Catalog
	auditKey []byte
	log      *slog.Logger
}

// NewExporter returns an Exporter for the replicated tables in database.
// log receives the audit entries (nil: slog.Default()), which record the
// subject value only as AuditHash(auditKey, value).
func NewExporter(conn Conn, database string, auditKey []byte, log *slog.Logger) *Exporter {
	if log == nil {
		log = slog.Default()
	}
	return &Exporter{conn: conn, database: database, catalog: NewCatalog(conn, database, 0), auditKey: auditKey, log: log.With("component", "export")}
}

// AuditHash is what an export's audit entry records of the subject value:
// the hex HMAC-SHA256 of its text under key. The log never holds the
// value itself (personal data), yet an operator who knows a value and the
// key can find its exports: `walhouse serve --audit-hash` prints it.
func AuditHash(key []byte, value any) string {
	m := hmac.New(sha256.New, key)
	fmt.Fprint(m, value)
	return hex.EncodeToString(m.Sum(nil))
}

// AuditKey returns the audit key of a server given auditKey and
// cursorSecret: auditKey when it has one, else one derived from the
// cursor secret, else nil. serve, export and --audit-hash all take their
// key from it, so that the hashes they write and print match.
func AuditKey(auditKey, cursorSecret []byte) []byte {
	if len(auditKey) > 0 || len(cursorSecret) == 0 {
		return auditKey
	}
	m := hmac.New(sha256.New, cursorSecret)
	m.Write([]byte("walhouse audit key v1"))
	return m.Sum(nil)
}

// ExportLimitError says an export stopped at one of its caps
// (Limits.MaxExportRows, MaxExportBytes, MaxExportTime): the content
// streamed so far is partial, and the manifest says so.
type ExportLimitError struct {
	// Limit is "rows", "bytes" or "time".
	Limit string
	// Max is the cap: rows, bytes or seconds.
	Max int64
}

// Error names the cap and what to do.
func (e *ExportLimitError) Error() string {
	unit := e.Limit
	if e.Limit == "time" {
		unit = "seconds"
	}
	return fmt.Sprintf("the export reached its limit of %d %s and stopped; the content is partial: export fewer tables at a time, or ask an operator to raise the limit", e.Max, unit)
}

// exportPlan is a validated export: one statement per table.
type exportPlan struct {
	req        ExportRequest
	tables     []*Table
	statements []Statement
}

// ExportInput is what BuildExport turns into SQL.
type ExportInput struct {
	Table   *Table
	Tenant  string
	Subject Subject
	// Limits give the query's max_execution_time (MaxExportTime), memory
	// and threads.
	Limits Limits
}

// BuildExport builds the statement that reads every row of a subject in
// one table: FINAL, live rows only, the caller's tenant always, ordered by
// the sorting key (which ClickHouse reads in order, without sorting).
func BuildExport(in ExportInput) (Statement, error) {
	t := in.Table
	b := &builder{t: t, params: map[string]string{}}
	tc, _ := t.Column(t.TenantColumn)
	tenantVal, err := tc.typ.bindValue(tenantValue(tc.typ, in.Tenant))
	if err != nil {
		return Statement{}, ErrTenantType
	}
	b.params["tenant"] = tenantVal
	c, err := b.column("subject.column", in.Subject.Column)
	if err != nil {
		return Statement{}, err
	}
	if c.typ.Kind == kindOther {
		return Statement{}, reqErr("subject.column", "column %q is %s, which cannot be compared", c.Name, c.Type)
	}
	v := in.Subject.Value
	if s, ok := v.(string); ok {
		v = tenantValue(c.typ, s) // text from the command line: "true" for a Bool column
	}
	c = c.forValue(v) // a JSON path compared with a number
	ph, err := b.bindAs("subject", c, v)
	if err != nil {
		return Statement{}, err
	}
	var cols, order []string
	for _, col := range t.Columns {
		if col.Name != schema.DeletedColumn {
			cols = append(cols, schema.QuoteIdent(col.Name))
		}
	}
	for _, k := range t.SortingKey {
		order = append(order, schema.QuoteIdent(k))
	}
	sql := fmt.Sprintf("SELECT %s\nFROM %s FINAL\nWHERE %s = {tenant:%s}\n  AND %s = 0\n  AND %s = %s\nORDER BY %s",
		strings.Join(cols, ", "), t.qualified(),
		schema.QuoteIdent(t.TenantColumn), tc.typ.Param,
		schema.QuoteIdent(schema.DeletedColumn),
		c.sql(), ph,
		strings.Join(order, ", "))
	lim := in.Limits.withDefaults()
	set := lim.resourceSettings()
	setFinal(set, t)
	set["max_execution_time"] = seconds(lim.MaxExportTime)
	set["optimize_read_in_order"] = 1
	return Statement{SQL: sql, Params: b.params, Settings: set}, nil
}

// bindAs binds v for c under a fixed parameter name.
func (b *builder) bindAs(name string, c Column, v any) (string, error) {
	text, err := c.typ.bindValue(v)
	if err != nil {
		return "", reqErr(name+".value", "column %q (%s): %v", c.Name, c.Type, err)
	}
	b.params[name] = text
	return "{" + name + ":" + c.typ.Param + "}", nil
}

func (e *Exporter) plan(ctx context.Context, req ExportRequest) (*exportPlan, error) {
	switch req.Format {
	case "":
		req.Format = JSONL
	case JSONL, CSV, Parquet:
	default:
		return nil, reqErr("format", "%q is not one of jsonl, csv, parquet", req.Format)
	}
	if req.Subject.Column == "" {
		return nil, reqErr("subject.column", "is required")
	}
	if req.Subject.Value == nil {
		return nil, reqErr("subject.value", "is required")
	}
	req.Limits = req.Limits.withDefaults()
	p := &exportPlan{req: req}
	mine, err := e.catalog.TenantTables(ctx, req.Tenant, req.Limits)
	if err != nil {
		return nil, err
	}
	if len(req.Tables) == 0 {
		for _, t := range mine {
			if _, ok := t.Column(req.Subject.Column); ok {
				p.tables = append(p.tables, t)
			}
		}
		if len(p.tables) == 0 {
			return nil, reqErr("subject.column", "no table has a column %q", req.Subject.Column)
		}
	} else {
		for i, name := range req.Tables {
			if slices.Contains(req.Tables[:i], name) {
				return nil, reqErr(fmt.Sprintf("tables[%d]", i), "table %q is listed twice", name)
			}
			t, err := e.catalog.TenantTable(ctx, req.Tenant, req.Limits, name)
			if err != nil {
				return nil, reqErr(fmt.Sprintf("tables[%d]", i), "%v; GET /v1/tables lists the tables", err)
			}
			p.tables = append(p.tables, t)
		}
	}
	if req.Format == Parquet {
		// Refuse what cannot be written before anything is streamed.
		if _, err := parquetSchema(p.tables); err != nil {
			return nil, err
		}
	}
	for _, t := range p.tables {
		st, err := BuildExport(ExportInput{Table: t, Tenant: req.Tenant, Subject: req.Subject, Limits: req.Limits})
		if err != nil {
			return nil, fmt.Errorf("table %s: %w", t.Name, err)
		}
		p.statements = append(p.statements, st)
	}
	return p, nil
}

// Export streams every row of the subject to w and returns the manifest.
// On error the manifest says how far it got (Complete false). Every export,
// complete or not, is logged as an audit entry.
func (e *Exporter) Export(ctx context.Context, w io.Writer, req ExportRequest) (Manifest, error) {
	p, err := e.plan(ctx, req)
	if err != nil {
		return Manifest{}, err
	}
	return e.run(ctx, w, p, newExportID())
}

func (e *Exporter) run(ctx context.Context, w io.Writer, p *exportPlan, id string) (Manifest, error) {
	m := Manifest{ID: id, Tenant: p.req.Tenant, Subject: p.req.Subject, Format: p.req.Format, RequestedBy: p.req.RequestedBy, StartedAt: time.Now().UTC(), Tables: []TableManifest{}}
	if m.Format == "" {
		m.Format = JSONL
	}
	lim := p.req.Limits
	out := &hashWriter{w: w, h: sha256.New(), max: lim.MaxExportBytes}
	sctx, cancel := context.WithTimeout(ctx, lim.MaxExportTime)
	err := e.stream(sctx, out, p, &m)
	timedOut := sctx.Err() == context.DeadlineExceeded && ctx.Err() == nil
	cancel()
	var ex *ch.Exception
	switch {
	case err == nil:
	case out.over != nil:
		err = out.over // whatever a format's writer made of it
	case timedOut || errors.As(err, &ex) && ex.Code == chTimeoutExceeded:
		err = fmt.Errorf("%w: %w", &ExportLimitError{Limit: "time", Max: int64(seconds(lim.MaxExportTime))}, err)
	}
	m.FinishedAt = time.Now().UTC()
	m.Bytes = out.n
	m.SHA256 = hex.EncodeToString(out.h.Sum(nil))
	m.Complete = err == nil
	if le, ok := errors.AsType[*ExportLimitError](err); ok {
		m.Error = le.Error()
	} else if err != nil {
		m.Error = "the export stopped early; the content is partial"
	}
	tables := make([]string, len(m.Tables))
	for i, t := range m.Tables {
		tables[i] = t.Table
	}
	e.log.Info("audit: subject export",
		"export_id", m.ID, "requested_by", m.RequestedBy, "tenant", m.Tenant,
		"subject_column", m.Subject.Column, "subject_hmac", AuditHash(e.auditKey, m.Subject.Value),
		"tables", tables, "rows", m.Rows, "bytes", m.Bytes, "sha256", m.SHA256,
		"complete", m.Complete, "err", err)
	return m, err
}

func (e *Exporter) stream(ctx context.Context, out *hashWriter, p *exportPlan, m *Manifest) error {
	flusher, _ := out.w.(http.Flusher)
	var pq *parquetExport
	if m.Format == Parquet {
		var err error
		if pq, err = newParquetExport(out, p.tables); err != nil {
			return err
		}
	}
	for i, t := range p.tables {
		st := p.statements[i]
		sync, err := syncState(ctx, e.conn, e.database, t.Name)
		if err != nil {
			return err
		}
		tm := TableManifest{Table: t.Name, LastSyncAt: sync.LastSyncAt, LSN: sync.LSN}
		rows, err := e.conn.Query(statementContext(ctx, st), st.SQL)
		if err != nil {
			m.Tables = append(m.Tables, tm)
			return fmt.Errorf("export %s: %w (sql: %s)", t.Name, err, st.SQL)
		}
		sc := newRowScanner(rows)
		var cw *csv.Writer
		tableJSON, _ := json.Marshal(t.Name)
		if m.Format == CSV {
			cw = csv.NewWriter(out)
			rec := []string{"table"}
			for _, name := range sc.names {
				rec = append(rec, csvSafe(name))
			}
			_ = cw.Write(rec)
		}
		var rec []string
		var buf bytes.Buffer
		for rows.Next() {
			if m.Rows >= p.req.Limits.MaxExportRows {
				err = &ExportLimitError{Limit: "rows", Max: p.req.Limits.MaxExportRows}
				break
			}
			if err = sc.scan(rows); err != nil {
				break
			}
			if pq != nil {
				err = pq.writeRow(t.Name, sc)
			} else if cw != nil {
				rec = append(rec[:0], csvSafe(t.Name))
				for c := range sc.names {
					rec = append(rec, csvSafe(sc.csvText(c)))
				}
				err = cw.Write(rec)
			} else {
				buf.Reset()
				buf.WriteString(`{"table":`)
				buf.Write(tableJSON)
				buf.WriteString(`,"row":`)
				_ = sc.writeJSONObject(&buf) // a bytes.Buffer takes everything
				buf.WriteString("}\n")
				_, err = out.Write(buf.Bytes())
			}
			if err != nil {
				break
			}
			tm.Rows++
			m.Rows++
			if p.req.Rows != nil {
				p.req.Rows.Add(1)
			}
			if tm.Rows%1000 == 0 {
				if cw != nil {
					cw.Flush()
				}
				if flusher != nil {
					flusher.Flush()
				}
			}
		}
		if err == nil {
			err = rows.Err()
		}
		rows.Close()
		if cw != nil {
			cw.Flush()
			if err == nil {
				err = cw.Error()
			}
		}
		m.Tables = append(m.Tables, tm)
		if err != nil {
			return fmt.Errorf("export %s: %w", t.Name, err)
		}
		if flusher != nil {
			flusher.Flush()
		}
	}
	if pq != nil {
		if err := pq.close(); err != nil {
			return err
		}
		if flusher != nil {
			flusher.Flush()
		}
	}
	return nil
}

// hashWriter hashes and counts what it passes on, up to max bytes (a cap
// of the export): of a write that would go beyond, it passes on what fits
// and reports the cap.
type hashWriter struct {
	w    io.Writer
	h    hash.Hash
	n    int64
	max  int64
	over *ExportLimitError // set when a write was refused
}

func (hw *hashWriter) Write(p []byte) (int, error) {
	if hw.max > 0 && hw.n+int64(len(p)) > hw.max {
		hw.over = &ExportLimitError{Limit: "bytes", Max: hw.max}
		n, err := hw.Write(p[:hw.max-hw.n])
		if err == nil {
			err = hw.over
		}
		return n, err
	}
	n, err := hw.w.Write(p)
	hw.h.Write(p[:n])
	hw.n += int64(n)
	return n, err
}

// plainNumber matches the numbers csvSafe leaves alone.
var plainNumber = regexp.MustCompile(`^[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?$`)

// csvSafe neutralises a CSV field a spreadsheet would run as a formula
// (OWASP, CSV injection): one starting with =, +, -, @, tab or carriage
// return gets a leading '. Plain numbers are not formulas and stay as
// they are, so negative amounts keep their value.
func csvSafe(field string) string {
	if field == "" || !strings.ContainsRune("=+-@\t\r", rune(field[0])) || plainNumber.MatchString(field) {
		return field
	}
	return "'" + field
}

func newExportID() string { return "exp_" + newRequestID() }

// manifestStore keeps the manifests of recent exports for
// GET /v1/exports/{id}/manifest, evicting the oldest beyond capacity.
type manifestStore struct {
	mu    sync.Mutex
	cap   int
	order []string
	byID  map[string]Manifest
}

func newManifestStore(capacity int) *manifestStore {
	return &manifestStore{cap: capacity, byID: map[string]Manifest{}}
}

func (ms *manifestStore) put(m Manifest) {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	if _, ok := ms.byID[m.ID]; !ok {
		ms.order = append(ms.order, m.ID)
	}
	ms.byID[m.ID] = m
	for len(ms.order) > ms.cap {
		delete(ms.byID, ms.order[0])
		ms.order = ms.order[1:]
	}
}

func (ms *manifestStore) get(id string) (Manifest, bool) {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	m, ok := ms.byID[id]
	return m, ok
}

// exportBody is the body of POST /v1/exports.
type exportBody struct {
	Subject Subject  `json:"subject"`
	Tables  []string `json:"tables,omitempty"`
	Format  Format   `json:"format,omitempty"`
	// TokenRead waits for consistency tokens, for every table exported.
	TokenRead
}

// FreshHeader tells an export with consistency tokens whether every table
// was loaded through them ("true") or the wait ended first ("false").
const FreshHeader = "Walhouse-Fresh"

// Export response trailers.
const (
	trailerRows   = "X-Walhouse-Export-Rows"
	trailerSHA256 = "X-Walhouse-Export-Sha256"
	trailerStatus = "X-Walhouse-Export-Status"
)

func (s *Server) handleExport(w http.ResponseWriter, r *http.Request, key Key, lim Limits) {
	ctx := r.Context()
	var body exportBody
	if err := decodeBody(r, &body); err != nil {
		s.fail(w, r, err)
		return
	}
	tw, err := s.parseTokenRead(r, body.TokenRead)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	p, err := s.exporter.plan(ctx, ExportRequest{Tenant: key.Tenant, Subject: body.Subject, Tables: body.Tables, Format: body.Format, RequestedBy: key.ID, Limits: lim})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	names := make([]string, len(p.tables))
	for i, t := range p.tables {
		names[i] = t.Name
	}
	waitStart := time.Now()
	fresh, _, err := s.awaitTables(ctx, names, tw)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	id := newExportID()
	h := w.Header()
	if tw.active() {
		h.Set(FreshHeader, strconv.FormatBool(fresh))
		h.Set(TimingHeader, timing(time.Since(waitStart)))
	}
	switch p.req.Format {
	case CSV:
		h.Set("Content-Type", "text/csv; charset=utf-8")
	case Parquet:
		h.Set("Content-Type", "application/vnd.apache.parquet")
	default:
		h.Set("Content-Type", "application/x-ndjson")
	}
	h.Set("X-Walhouse-Export-Id", id)
	h.Set("X-Walhouse-Manifest", "/v1/exports/"+id+"/manifest")
	h.Set("Trailer", trailerRows+", "+trailerSHA256+", "+trailerStatus)
	w.WriteHeader(http.StatusOK)
	sw := newStreamWriter(w, s.cfg.HTTP.WriteTimeout)
	m, err := s.exporter.run(ctx, sw, p, id)
	sw.finish()
	s.manifest.put(keptManifest(m, s.cfg.AuditKey))
	h.Set(trailerRows, fmt.Sprint(m.Rows))
	h.Set(trailerSHA256, m.SHA256)
	if err != nil {
		h.Set(trailerStatus, "failed: "+m.Error+"; request id "+requestID(ctx))
		s.log.Error("export failed mid-stream", "request_id", requestID(ctx), "export_id", id, "err", err)
		return
	}
	h.Set(trailerStatus, "complete")
}

func (s *Server) handleManifest(w http.ResponseWriter, r *http.Request) {
	key, _ := callerKey(r.Context())
	m, ok := s.manifest.get(r.PathValue("id"))
	if !ok || m.Tenant != key.Tenant {
		s.writeError(w, r, &apiError{Status: http.StatusNotFound, Code: "not_found", Message: "no export with this id for your tenant (manifests of the last 1000 exports are kept until restart)"})
		return
	}
	writeJSON(w, http.StatusOK, m)
}
