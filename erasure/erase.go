package erasure

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/walhouse/walhouse/internal/backoff"
	"github.com/walhouse/walhouse/record"
	"github.com/walhouse/walhouse/schema"
)

// PG is what an Eraser needs of PostgreSQL; *pgx.Conn and *pgxpool.Pool
// satisfy it.
type PG interface {
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}

// Request asks to erase one data subject of one tenant.
type Request struct {
	Tenant string
	// Column and Value identify the subject: every row whose Column
	// equals Value (in PostgreSQL's text form, e.g. 42 or a UUID).
	Column, Value string
	// Tables are ClickHouse table names; empty means every walhouse table
	// that has Column.
	Tables []string
	// RequestedBy names who asked (an API key id, or "cli").
	RequestedBy string
	// MaxRows overrides Config.MaxRows for this request (0: keep it):
	// `walhouse erase --max-rows` forces a broad erasure; the API never
	// sets it.
	MaxRows int
}

// Eraser erases data subjects. It is safe for concurrent use; erasures of
// the same subject at once are harmless (each records and removes the
// same).
type Eraser struct {
	pg       PG
	conn     Conn
	database string
	keys     Keys
	settle   time.Duration
	maxRows  int
	starts   int // per tenant and minute, Begin
	log      *slog.Logger
}

// Config is what NewEraser needs. PG, Conn, Database and Keys are
// required.
type Config struct {
	PG       PG
	Conn     Conn
	Database string
	Keys     Keys
	// Settle is how long an erasure waits between recording the ledger
	// entry and removing rows, so that every sink has read the entry
	// (default DefaultSettle). A sink loads only with a copy of the
	// ledger younger than its max age (LedgerConfig.MaxAge), so an insert
	// made without the entry began less than that max age after the entry
	// was recorded: with Settle above the max age plus an insert's
	// duration, what it loaded is removed with the rest.
	Settle time.Duration
	// MaxRows caps the rows one erasure may remove or record by key
	// (default DefaultMaxRows): a broad value (a status, a country) would
	// make one huge statement and ledger the sinks re-read. Past it the
	// erasure refuses with *TooBroadError before it records anything.
	MaxRows int
	// StartsPerMinute caps the erasures Begin (the API) starts per tenant
	// in any minute, across every serve (default DefaultStartsPerMinute):
	// each is a ledger entry every sink holds and a mutation. Past it
	// Begin refuses with *RateError. Erase (the command line) is not
	// capped.
	StartsPerMinute int
	// Logger receives the audit entry (default slog.Default()).
	Logger *slog.Logger
}

// DefaultMaxRows is the default Config.MaxRows.
const DefaultMaxRows = 10000

// DefaultStartsPerMinute is the default Config.StartsPerMinute.
const DefaultStartsPerMinute = 10

// RateError refuses an erasure of a tenant that started StartsPerMinute
// erasures in the last minute already. Nothing was recorded.
type RateError struct{ Max int }

func (e *RateError) Error() string {
	return fmt.Sprintf("the tenant started %d erasures in the last minute, the most it may: nothing was recorded; retry in a minute", e.Max)
}

// TooBroadError refuses an erasure whose subject has more rows in
// ClickHouse than the cap (Config.MaxRows, or Request.MaxRows): likely
// not a data subject but a common value. Nothing was recorded or removed.
type TooBroadError struct {
	// Max is the cap; the subject has more rows than it.
	Max int
}

func (e *TooBroadError) Error() string {
	return fmt.Sprintf("the subject has more than %d rows in ClickHouse: is the column a data subject's (a customer id, an e-mail address), not a common value? Nothing was recorded or removed; walhouse erase --max-rows raises the cap", e.Max)
}

// NewEraser returns an Eraser.
func NewEraser(cfg Config) (*Eraser, error) {
	var errs []error
	if cfg.PG == nil {
		errs = append(errs, errors.New("a PostgreSQL connection is required (walhouse checks there that the subject's rows are gone)"))
	}
	if cfg.Conn == nil || cfg.Database == "" {
		errs = append(errs, errors.New("a ClickHouse connection and database are required"))
	}
	if cfg.Keys.sign == nil {
		errs = append(errs, errors.New("the erasure key is required (NewKeys)"))
	}
	if cfg.StartsPerMinute < 0 {
		errs = append(errs, fmt.Errorf("starts per minute %d: must not be negative", cfg.StartsPerMinute))
	}
	if cfg.MaxRows < 0 {
		errs = append(errs, fmt.Errorf("max rows %d: must not be negative", cfg.MaxRows))
	}
	if cfg.Settle < 0 {
		errs = append(errs, fmt.Errorf("settle %v: must not be negative", cfg.Settle))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("erasure: %w", err)
	}
	if cfg.Settle == 0 {
		cfg.Settle = DefaultSettle
	}
	return &Eraser{pg: cfg.PG, conn: cfg.Conn, database: cfg.Database, keys: cfg.Keys, settle: cfg.Settle, maxRows: cmp.Or(cfg.MaxRows, DefaultMaxRows), starts: cmp.Or(cfg.StartsPerMinute, DefaultStartsPerMinute),
		log: cmp.Or(cfg.Logger, slog.Default()).With("component", "erasure")}, nil
}

// RequestError is a request that cannot be carried out as asked.
type RequestError struct {
	// Msg says what is wrong without naming any table or type the caller
	// did not name: the API answers with it.
	Msg string
	// Detail names the tables and types concerned, for the log and the
	// command line ("" when Msg says it all).
	Detail string
}

func (e *RequestError) Error() string {
	if e.Detail == "" {
		return e.Msg
	}
	return e.Msg + " (" + e.Detail + ")"
}

// StillInSourceError refuses an erasure whose subject still has rows in
// PostgreSQL: walhouse erases only what the source no longer holds (the
// application deletes the rows first), or the next change would bring
// them back.
type StillInSourceError struct {
	// Rows is the number of the subject's rows per source table, counted
	// up to maxStillInSource+1 (more than maxStillInSource).
	Rows map[string]int64
}

// maxStillInSource bounds the subject's rows counted per source table for
// a StillInSourceError.
const maxStillInSource = 1000

func (e *StillInSourceError) Error() string {
	var parts []string
	for _, t := range slices.Sorted(maps.Keys(e.Rows)) {
		if e.Rows[t] > maxStillInSource {
			parts = append(parts, fmt.Sprintf("%s (more than %d rows)", t, maxStillInSource))
			continue
		}
		parts = append(parts, fmt.Sprintf("%s (%d rows)", t, e.Rows[t]))
	}
	return "the subject still has rows in PostgreSQL: " + strings.Join(parts, ", ") + "; delete them there first, then erase again"
}

// target is one ClickHouse table an erasure concerns.
type target struct {
	name        string // ClickHouse table
	column      string // the subject column
	owner       string // PostgreSQL table, quoted ("schema"."table")
	src         sourceKey
	tenantCol   string
	keyCols     []string // the sorting key: tenant column, then the primary key
	tenantType  string   // ClickHouse type of the tenant column
	subjectType string   // ClickHouse type of the subject column
	// Filled by the PostgreSQL check: the PostgreSQL text of tenant and
	// value, which records carry and the ledger hashes.
	tenantText, valueText string
	// keys are the primary keys (toString of each column but the tenant)
	// of the rows with a version of the subject that PostgreSQL no longer
	// holds, read in the check's snapshot: the ledger records them and
	// the removal takes all their versions.
	keys [][]string
	// live counts the rows with a version of the subject that PostgreSQL
	// still holds: only their versions carrying the subject are removed.
	live uint64
	// check is the source check the table had (a Check constant).
	check string
	// hasRows: ClickHouse holds rows of the tenant in the table.
	hasRows bool
}

// Erase erases req's subject: the check in PostgreSQL, the ledger entry,
// the removal of every version in ClickHouse, its verification, and the
// signed manifest, which it returns. It refuses with *StillInSourceError
// when the subject still has rows in PostgreSQL, and with *RequestError
// for a request it cannot carry out. An erasure that fails after its
// ledger entry was recorded keeps the subject out of new loads; run it
// again to finish the removal. Erase is Plan, Start and Run in a row.
func (e *Eraser) Erase(ctx context.Context, req Request) (Manifest, error) {
	p, err := e.Plan(ctx, req)
	if err != nil {
		return p.Manifest(), err
	}
	if err := e.Start(ctx, p); err != nil {
		return p.Manifest(), err
	}
	return e.Run(ctx, p)
}

// Plan is an erasure checked and ready to run: Eraser.Plan made it,
// Eraser.Start records its start, Eraser.Run carries it out.
type Plan struct {
	m       Manifest
	req     Request
	targets []*target
}

// ID returns the erasure's id, the manifest's.
func (p *Plan) ID() string { return p.m.ID }

// Manifest returns the manifest as far as the plan knows it (unsigned).
func (p *Plan) Manifest() Manifest { return p.m }

// Plan checks req without recording or removing anything: the tables, the
// sinks' settle bound, PostgreSQL (the subject's rows, and every row the
// removal would take, in one snapshot) and the cap of rows. It returns
// the refusals Erase does; the plan it returns (also with an error, for
// its id) is to be started and run at once, as its check is one instant.
func (e *Eraser) Plan(ctx context.Context, req Request) (*Plan, error) {
	p := &Plan{req: req, m: Manifest{ID: newID(), Tenant: req.Tenant, Column: req.Column, RequestedBy: req.RequestedBy, StartedAt: time.Now().UTC(), Tables: []TableResult{}}}
	if req.Column == "" || req.Value == "" {
		return p, &RequestError{Msg: "the subject column and value are required"}
	}
	if err := ensureTables(ctx, e.conn, e.database); err != nil {
		return p, err
	}
	targets, skipped, err := e.targets(ctx, req)
	if err != nil {
		return p, err
	}
	p.m.TablesSkipped = skipped
	if err := e.checkReaders(ctx); err != nil {
		return p, err
	}
	asOf, targets, err := e.check(ctx, req, targets)
	if err != nil {
		return p, err
	}
	p.targets = targets
	p.m.AsOfLSN = asOf
	p.m.SubjectHMAC = e.keys.Hash(Subject{Tenant: req.Tenant, Column: req.Column, Value: req.Value}).String()
	return p, nil
}

// Start records that p begins, before anything else is: the audit line
// `audit: subject erasure started` and a row of state "started" in
// ManifestTable, which Status reads. An erasure whose run is cut short
// (a crash, a deadline) is still on record.
func (e *Eraser) Start(ctx context.Context, p *Plan) error {
	tables := make([]string, len(p.targets))
	for i, t := range p.targets {
		tables[i] = t.name
	}
	e.log.Info("audit: subject erasure started", "erasure_id", p.m.ID, "requested_by", p.m.RequestedBy, "tenant", p.m.Tenant,
		"subject_column", p.m.Column, "subject_hmac", p.m.SubjectHMAC, "tables", tables, "as_of_lsn", p.m.AsOfLSN)
	return e.store(ctx, p.m, StateStarted, p.m.StartedAt, "")
}

// Run carries out a started plan: the ledger entry, the settle wait, the
// removal, its verification, and the signed manifest, stored and audited.
// A run that fails stores state "failed" with its error when it can.
func (e *Eraser) Run(ctx context.Context, p *Plan) (Manifest, error) {
	m, err := e.run(ctx, p)
	if err != nil && m.Signature == "" {
		// Best effort, past ctx's end too: Status then says why.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if serr := e.store(sctx, m, StateFailed, time.Now().UTC(), err.Error()); serr != nil {
			e.log.Error("could not record the erasure's failure", "erasure_id", m.ID, "err", serr)
		}
		e.log.Error("audit: subject erasure failed", "erasure_id", m.ID, "requested_by", m.RequestedBy, "tenant", m.Tenant, "err", err)
	}
	return m, err
}

func (e *Eraser) run(ctx context.Context, p *Plan) (Manifest, error) {
	m := p.m
	m.Tables = []TableResult{}
	if err := e.record(ctx, m.ID, p.req, p.targets, m.AsOfLSN); err != nil {
		return m, err
	}
	// Every sink must know the entry before the rows go, or one that is
	// loading an older record right now would put it back.
	if err := backoff.Sleep(ctx, e.settle); err != nil {
		return m, err
	}
	m.Verified = true
	for _, t := range p.targets {
		res, err := e.remove(ctx, t, m.AsOfLSN)
		if err != nil {
			return m, err
		}
		// Tables the tenant had nothing in stay unnamed, but for one of its
		// own whose source check was partial: the manifest says so.
		if res.Removed > 0 || res.Left > 0 || res.LiveRowsKept > 0 || len(p.req.Tables) > 0 || t.hasRows && t.check != CheckSubjectAndKeys {
			m.Tables = append(m.Tables, res)
		}
		m.Verified = m.Verified && res.Left == 0
	}
	m.Verified = m.Verified && len(m.TablesSkipped) == 0
	m.FinishedAt = time.Now().UTC()
	if err := e.keys.Sign(&m); err != nil {
		return m, err
	}
	if err := e.audit(ctx, m); err != nil {
		return m, err
	}
	if len(m.TablesSkipped) > 0 {
		return m, fmt.Errorf("tables with versions of the subject were skipped, without walhouse's comment naming their source table: %s (see the manifest's tablesSkipped); the sink writes it at its next load of each: erase again after it", strings.Join(m.TablesSkipped, ", "))
	}
	if !m.Verified {
		return m, errors.New("versions of the subject are still in ClickHouse after the removal (see the manifest's versionsLeft); run the erasure again")
	}
	return m, nil
}

// targets lists the ClickHouse tables of the erasure with their source
// tables and column types.
//
// It also returns the tables it cannot cover that hold versions of the
// subject of the tenant: tables with the column but without walhouse's
// comment naming their source table (made before the comment; the sink
// writes it at its next load). It refuses with ErrCluster on a cluster.
func (e *Eraser) targets(ctx context.Context, req Request) ([]*target, []string, error) {
	qctx := chParams(ctx, map[string]string{"db": e.database, "col": req.Column})
	rows, err := e.conn.Query(qctx, `SELECT t.name, t.engine, t.comment, t.sorting_key, c.type
FROM system.tables AS t INNER JOIN system.columns AS c ON c.database = t.database AND c.table = t.name
WHERE t.database = {db:String} AND (t.engine LIKE '%ReplacingMergeTree' OR t.engine = 'Distributed') AND NOT startsWith(t.name, '_walhouse') AND c.name = {col:String}
ORDER BY t.name`)
	if err != nil {
		return nil, nil, fmt.Errorf("list the tables of %s: %w", e.database, err)
	}
	defer rows.Close()
	byName := map[string]*target{}
	var all []*target
	var uncommented [][2]string // table, its first sorting-key column
	for rows.Next() {
		var name, engine, comment, key, typ string
		if err := rows.Scan(&name, &engine, &comment, &key, &typ); err != nil {
			return nil, nil, fmt.Errorf("list the tables of %s: %w", e.database, err)
		}
		if engine == "Distributed" {
			return nil, nil, ErrCluster
		}
		owner, ok := schema.CommentOwner(comment)
		src, okSrc := parseOwner(owner)
		keyCols := schema.SplitSortingKey(key)
		if !ok || !okSrc || len(keyCols) < 2 {
			if len(keyCols) > 0 && keyCols[0] != req.Column {
				uncommented = append(uncommented, [2]string{name, keyCols[0]})
			}
			continue
		}
		if keyCols[0] == req.Column {
			// Every row of the tenant: not a data subject.
			return nil, nil, &RequestError{Msg: fmt.Sprintf("column %q is a tenant column: an erasure removes one data subject, not a tenant", req.Column)}
		}
		t := &target{name: name, column: req.Column, owner: owner, src: src, tenantCol: keyCols[0], keyCols: keyCols, subjectType: typ}
		byName[name] = t
		all = append(all, t)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("list the tables of %s: %w", e.database, err)
	}
	var skipped []string
	for _, u := range uncommented {
		// Named only when the tenant has versions of the subject there:
		// another tenant's table stays unnamed.
		q := fmt.Sprintf("SELECT count() FROM (SELECT 1 FROM %s.%s WHERE toString(%s) = {tenant:String} AND toString(%s) = {subject:String} LIMIT 1)",
			schema.QuoteIdent(e.database), schema.QuoteIdent(u[0]), schema.QuoteIdent(u[1]), schema.QuoteIdent(req.Column))
		var n uint64
		if err := queryOne(chParams(ctx, map[string]string{"tenant": req.Tenant, "subject": req.Value}), e.conn, q, &n); err != nil {
			return nil, nil, fmt.Errorf("look for the subject in %s: %w", u[0], err)
		}
		if n > 0 && (len(req.Tables) == 0 || slices.Contains(req.Tables, u[0])) {
			skipped = append(skipped, u[0])
		}
	}
	var out []*target
	if len(req.Tables) == 0 {
		out = all
	} else {
		for _, n := range req.Tables {
			t, ok := byName[n]
			if !ok {
				// The same answer whether the table does not exist or
				// lacks the column: a caller learns nothing of tables that
				// are not its own.
				if slices.Contains(skipped, n) {
					continue // named in the manifest
				}
				return nil, nil, notATarget(n, req.Column)
			}
			if !slices.Contains(out, t) {
				out = append(out, t)
			}
		}
	}
	if len(out) == 0 && len(skipped) > 0 {
		return nil, nil, &RequestError{Msg: fmt.Sprintf("the tables with versions of the subject lack walhouse's comment naming their source table: %s; nothing was recorded. The sink writes the comment at its next load of each table: erase again after it", strings.Join(skipped, ", "))}
	}
	if len(out) == 0 {
		return nil, nil, noTarget(req.Column)
	}
	for _, t := range out {
		if err := e.tenantType(ctx, t); err != nil {
			return nil, nil, err
		}
		if err := e.tenantRows(ctx, t, req.Tenant); err != nil {
			return nil, nil, err
		}
		if len(req.Tables) > 0 && !t.hasRows {
			// Another tenant's table answers as one that does not exist:
			// a caller learns nothing of tables that are not its own.
			return nil, nil, notATarget(t.name, req.Column)
		}
	}
	return out, skipped, nil
}

// ErrCluster refuses an erasure on a ClickHouse cluster: its ledger and
// mutations are those of one server, and the sinks of other hosts would
// not see its entries.
var ErrCluster = errors.New("the tables are Distributed tables of a ClickHouse cluster, and erasure does not support clusters yet (its ledger and removal are those of one server; sinks on other hosts would not see its entries): nothing was recorded. Erase on a single-server deployment, or remove the subject's rows by hand on every shard (docs/erasure.md, Clusters)")

// queryOne runs q and scans its one row into dest.
func queryOne(ctx context.Context, conn Conn, q string, dest ...any) error {
	rows, err := conn.Query(ctx, q)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return err
		}
	}
	return rows.Err()
}

// notATarget is the answer for a listed table that is not one the erasure
// can cover: the same whether it does not exist, lacks the column or is
// another tenant's.
func notATarget(table, column string) error {
	return &RequestError{Msg: fmt.Sprintf("table %q has no column %q (or is not a table walhouse loads for this tenant)", table, column)}
}

func noTarget(column string) error {
	return &RequestError{Msg: fmt.Sprintf("no table of this tenant has a column %q", column)}
}

// tenantRows sets t.hasRows: whether ClickHouse holds any row of tenant in
// t, what makes it one of the tenant's tables (as the query API lists
// them).
func (e *Eraser) tenantRows(ctx context.Context, t *target, tenant string) error {
	q := fmt.Sprintf("SELECT count() FROM (SELECT 1 FROM %s.%s WHERE toString(%s) = {tenant:String} LIMIT 1)",
		schema.QuoteIdent(e.database), schema.QuoteIdent(t.name), schema.QuoteIdent(t.tenantCol))
	rows, err := e.conn.Query(chParams(ctx, map[string]string{"tenant": tenant}), q)
	if err != nil {
		return fmt.Errorf("look for the tenant's rows in %s: %w", t.name, err)
	}
	defer rows.Close()
	var n uint64
	for rows.Next() {
		if err := rows.Scan(&n); err != nil {
			return fmt.Errorf("look for the tenant's rows in %s: %w", t.name, err)
		}
	}
	t.hasRows = n > 0
	return rows.Err()
}

func (e *Eraser) tenantType(ctx context.Context, t *target) error {
	cols, err := schema.ReadColumns(ctx, e.conn, e.database, t.name)
	if err != nil {
		return fmt.Errorf("read the tenant column of %s: %w", t.name, err)
	}
	for _, c := range cols {
		if c.Name == t.tenantCol {
			t.tenantType = c.Type
		}
	}
	if t.tenantType == "" {
		return fmt.Errorf("table %s: its tenant column %q is missing", t.name, t.tenantCol)
	}
	return nil
}

// check counts the subject's rows in every source table, in one snapshot
// whose first statement reads the as-of LSN, and reads the PostgreSQL
// text of tenant and value, which records carry. In the same snapshot it
// looks up every row the removal would take by its key (the rows with a
// version of the subject in ClickHouse): a row PostgreSQL still holds (it
// once carried the subject; it was reassigned, its e-mail changed) keeps
// its key out of the ledger and the removal, which then takes only its
// versions that carry the subject — merge-safe, as its newest version,
// which FINAL and the next change's unchanged TOAST values read, does not.
// A live row whose newest version still carries the subject (its change
// not loaded yet) refuses the erasure with *LiveRowsError.
//
// It returns the targets that are the tenant's: a table whose PostgreSQL
// table has no tenant column (mapped to a configured default tenant) is
// the tenant's only when ClickHouse holds rows of the tenant in it; any
// other would be counted without a tenant filter, and a refusal would
// tell the caller whether another tenant's table holds the value.
func (e *Eraser) check(ctx context.Context, req Request, all []*target) (record.LSN, []*target, error) {
	tx, err := e.pg.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return 0, nil, fmt.Errorf("check the subject in PostgreSQL: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // read only
	// The text of values as records carry it, whatever the connection's
	// defaults: capture's session settings (capture/source.go). The ledger
	// hashes the subject's text, and the keys read from ClickHouse
	// (timestamps in UTC) are cast back by them. SET takes no snapshot:
	// the as-of LSN below is still the snapshot's first read.
	for _, set := range [...]string{"TimeZone = 'UTC'", "DateStyle = 'ISO, YMD'", "IntervalStyle = 'postgres'", "extra_float_digits = 3", "bytea_output = 'hex'"} {
		if _, err := tx.Exec(ctx, "SET LOCAL "+set); err != nil {
			return 0, nil, fmt.Errorf("check the subject in PostgreSQL: %s: %w", set, err)
		}
	}
	var lsnText string
	// The insert position, not pg_current_wal_lsn (the write position):
	// under synchronous_commit = off the write position lags the commits
	// the snapshot already sees, whose changes would then pass the
	// ledger's as-of bound and escape the removal.
	if err := tx.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&lsnText); err != nil {
		return 0, nil, fmt.Errorf("read the current WAL position (connect to the primary): %w", err)
	}
	asOf, err := record.ParseLSN(lsnText)
	if err != nil {
		return 0, nil, err
	}
	left := map[string]int64{}
	var (
		targets []*target
		types   []map[string]string
	)
	for _, t := range all {
		t.tenantText, t.valueText = req.Tenant, req.Value
		var exists bool
		if err := tx.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", t.owner).Scan(&exists); err != nil {
			return 0, nil, fmt.Errorf("look up %s: %w", t.owner, err)
		}
		if !exists {
			t.check = CheckTableGone // no row of it can come back
			targets, types = append(targets, t), append(types, nil)
			continue
		}
		ty, err := columnTypes(ctx, tx, t.owner, append([]string{t.tenantCol, req.Column}, t.keyCols[1:]...))
		if err != nil {
			return 0, nil, err
		}
		if _, ok := ty[t.tenantCol]; !ok && !t.hasRows {
			continue // another tenant's default table, or one with nothing of the tenant
		}
		if ttype, ok := ty[t.tenantCol]; ok {
			text, bad, err := castText(ctx, tx, ttype, req.Tenant)
			if err != nil {
				return 0, nil, fmt.Errorf("check the tenant in %s: %w", t.owner, err)
			}
			if bad != nil && !t.hasRows {
				// Its tenant column cannot hold the tenant: another
				// tenant's table, with no row of this one. Left out, not
				// refused: a refusal would stop the tenant's erasures and
				// tell the caller that such a table exists.
				continue
			}
			if bad != nil {
				return 0, nil, &RequestError{Msg: "the tenant is not a value of the tables' tenant column",
					Detail: fmt.Sprintf("tenant %q is not a value of %s's tenant column (%s): %v", req.Tenant, t.owner, ttype, bad)}
			}
			t.tenantText = text
		} // else the table maps to a configured default tenant: every row is the tenant's
		ctype, ok := ty[req.Column]
		if ok {
			text, bad, err := castText(ctx, tx, ctype, req.Value)
			if err != nil {
				return 0, nil, fmt.Errorf("check the subject value in %s: %w", t.owner, err)
			}
			if bad != nil && !t.hasRows {
				// Its subject column cannot hold the value, and ClickHouse
				// holds no row of the tenant: nothing of the subject is
				// there. Left out, as above.
				continue
			}
			if bad != nil {
				return 0, nil, &RequestError{Msg: fmt.Sprintf("the subject value is not a value of the type of column %q", req.Column),
					Detail: fmt.Sprintf("%s.%s is %s: %v", t.owner, req.Column, ctype, bad)}
			}
			t.valueText = text
		}
		targets, types = append(targets, t), append(types, ty)
		if !ok {
			// Dropped or renamed: its rows cannot be counted by it, but
			// every row the removal would take is looked up by key below.
			t.check = CheckKeysOnly
			continue
		}
		t.check = CheckSubjectAndKeys
		where := fmt.Sprintf("%s = CAST($1::text AS %s)", pgx.Identifier{req.Column}.Sanitize(), ctype)
		args := []any{req.Value}
		if ttype, ok := ty[t.tenantCol]; ok {
			where += fmt.Sprintf(" AND %s = CAST($2::text AS %s)", pgx.Identifier{t.tenantCol}.Sanitize(), ttype)
			args = append(args, req.Tenant)
		}
		// Counted up to a bound: a broad value (a status) must not make
		// the primary count millions of rows for a refusal.
		var n int64
		if err := tx.QueryRow(ctx, fmt.Sprintf("SELECT count(*) FROM (SELECT 1 FROM %s WHERE %s LIMIT %d) AS s", t.owner, where, maxStillInSource+1), args...).Scan(&n); err != nil {
			return 0, nil, fmt.Errorf("count the subject's rows in %s: %w", t.owner, err)
		}
		if n > 0 {
			left[t.owner] = n
		}
	}
	if len(targets) == 0 {
		return 0, nil, noTarget(req.Column)
	}
	if len(left) > 0 {
		return 0, nil, &StillInSourceError{Rows: left}
	}
	maxRows := cmp.Or(req.MaxRows, e.maxRows)
	found := make([][]candidate, len(targets))
	total := 0
	for i, t := range targets {
		// Read no more than the cap allows, plus one to know it is passed.
		if found[i], err = e.candidates(ctx, t, maxRows-total+1); err != nil {
			return 0, nil, err
		}
		if total += len(found[i]); total > maxRows {
			return 0, nil, &TooBroadError{Max: maxRows}
		}
	}
	unsafe := map[string]int{}
	for i, t := range targets {
		cands := found[i]
		live := map[int]bool{}
		if t.check != CheckTableGone && len(cands) > 0 {
			if live, err = liveKeys(ctx, tx, t, types[i], cands); err != nil {
				return 0, nil, err
			}
		}
		t.keys = nil
		for j, c := range cands {
			switch {
			case !live[j]:
				t.keys = append(t.keys, c.key)
			case c.newestUnsafe:
				unsafe[t.name]++
			default:
				t.live++
			}
		}
	}
	if len(unsafe) > 0 {
		return 0, nil, &LiveRowsError{Rows: unsafe}
	}
	return asOf, targets, nil
}

// castText returns v cast to PostgreSQL type typ, in PostgreSQL's text
// form. When v is not a value of typ it returns the cast's error as bad,
// and tx stays usable (the cast runs under a savepoint); err is any other
// failure.
func castText(ctx context.Context, tx pgx.Tx, typ, v string) (text string, bad error, err error) {
	sp, err := tx.Begin(ctx) // a savepoint
	if err != nil {
		return "", nil, err
	}
	defer sp.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // released by Commit below when the cast worked
	err = sp.QueryRow(ctx, fmt.Sprintf("SELECT CAST($1::text AS %s)::text", typ), v).Scan(&text)
	if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok && strings.HasPrefix(pgErr.Code, "22") {
		// Class 22, data exception: invalid text, out of range.
		if err := sp.Rollback(ctx); err != nil {
			return "", nil, err
		}
		return "", err, nil
	}
	if err != nil {
		return "", nil, err
	}
	return text, nil, sp.Commit(ctx)
}

// columnTypes returns the PostgreSQL types of those of names that table
// (quoted, "schema"."table") has.
func columnTypes(ctx context.Context, tx pgx.Tx, table string, names []string) (map[string]string, error) {
	types := map[string]string{}
	rows, err := tx.Query(ctx, `SELECT a.attname, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a
WHERE a.attrelid = to_regclass($1) AND a.attname = ANY($2) AND a.attnum > 0 AND NOT a.attisdropped`, table, names)
	if err != nil {
		return nil, fmt.Errorf("read the columns of %s: %w", table, err)
	}
	defer rows.Close()
	for rows.Next() {
		var name, typ string
		if err := rows.Scan(&name, &typ); err != nil {
			return nil, fmt.Errorf("read the columns of %s: %w", table, err)
		}
		types[name] = typ
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the columns of %s: %w", table, err)
	}
	return types, nil
}

// ledgerRowsPerInsert bounds the ledger rows one INSERT carries (each
// about 250 bytes of statement), below max_query_size.
const ledgerRowsPerInsert = 500

// record writes the ledger entries: per table, one for the subject and
// one for each row the removal takes whole, by its key (target.keys, the
// rows PostgreSQL no longer holds). Every value is a name or a hex hash,
// written as a quoted literal: a subject with many rows would make too
// many query parameters.
func (e *Eraser) record(ctx context.Context, id string, req Request, targets []*target, asOf record.LSN) error {
	var values []string
	add := func(t *target, column, value string) {
		h := e.keys.Hash(Subject{Tenant: t.tenantText, Schema: t.src.schema, Table: t.src.table, Column: column, Value: value})
		values = append(values, fmt.Sprintf("(%s, %s, %s, '%s', %d, %s, %s)",
			schema.QuoteString(t.src.schema), schema.QuoteString(t.src.table), schema.QuoteString(column), h, uint64(asOf),
			schema.QuoteString(e.keys.KeyID()), schema.QuoteString(id)))
	}
	for _, t := range targets {
		add(t, req.Column, t.valueText)
		for _, k := range t.keys {
			add(t, RowKey, KeyValue(k))
		}
	}
	// In chunks, each a statement of bounded size; a failure part-way
	// leaves some entries recorded, which is safe: running the erasure
	// again records them all (a repeated entry changes nothing).
	for start := 0; start < len(values); start += ledgerRowsPerInsert {
		chunk := values[start:min(start+ledgerRowsPerInsert, len(values))]
		stmt := fmt.Sprintf("INSERT INTO %s.%s (source_schema, source_table, column, subject_hash, as_of_lsn, key_id, erasure_id) VALUES %s",
			schema.QuoteIdent(e.database), schema.QuoteIdent(LedgerTable), strings.Join(chunk, ", "))
		if err := e.conn.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("record the erasure in the ledger (nothing was removed; run it again): %w", err)
		}
	}
	return nil
}

// removalRounds is how often remove runs its mutation while versions are
// left.
const removalRounds = 3

// defaultMaxQuerySize is ClickHouse's default max_query_size: a longer
// statement (a removal naming many keys) raises it for itself.
const defaultMaxQuerySize = 256 << 10

// remove deletes every version of the subject's rows of t with one
// mutation, waiting for it, and counts them before and after, without
// FINAL. A version is the subject's when its subject column holds the
// value, or when it has the key of a row that did and that PostgreSQL no
// longer holds (t.keys): a tombstone carries only the key (a PostgreSQL
// delete sends no more), so it is found by its row's other versions. The
// keys are one literal set, not a subquery: a mutation runs part by part,
// and a subquery run for a later part would no longer find the rows
// removed from an earlier one. One mutation per table, whatever the
// number of keys (capped by Config.MaxRows): each mutation rewrites every
// part it touches.
func (e *Eraser) remove(ctx context.Context, t *target, asOf record.LSN) (TableResult, error) {
	res := TableResult{Table: t.name, Source: t.src.schema + "." + t.src.table, SourceCheck: t.check, LiveRowsKept: t.live}
	qname := schema.QuoteIdent(e.database) + "." + schema.QuoteIdent(t.name)
	// Only versions of changes made before the check (a snapshot read's
	// version is 0): a row PostgreSQL got after it — the subject back, a
	// deleted key used again — is not what the check cleared, and its
	// newer changes load (the ledger holds back only those up to asOf).
	tenant := fmt.Sprintf("%s = {tenant:%s} AND %s <= %d", schema.QuoteIdent(t.tenantCol), t.tenantType, schema.QuoteIdent(schema.VersionColumn), record.Version(asOf))
	subject := fmt.Sprintf("%s = {subject:%s}", schema.QuoteIdent(t.column), t.subjectType)
	where := tenant + " AND " + subject
	if len(t.keys) > 0 {
		var b strings.Builder
		for i, k := range t.keys {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteByte('(')
			for j, v := range k {
				if j > 0 {
					b.WriteString(", ")
				}
				b.WriteString(schema.QuoteString(v))
			}
			b.WriteByte(')')
		}
		key := "(" + strings.Join(keyExprs(t), ", ") + ")" // a one-column key is no tuple: ('3') is the string '3'
		where = fmt.Sprintf("%s AND (%s OR %s IN (%s))", tenant, subject, key, b.String())
	}
	settings := ch.Settings{}
	if n := len(where) + 4096; n > defaultMaxQuerySize {
		settings["max_query_size"] = n
	}
	params := map[string]string{"tenant": t.tenantText, "subject": t.valueText}
	qctx := ch.Context(ctx, ch.WithParameters(toParams(params)), ch.WithSettings(settings))
	count := func() (uint64, error) {
		rows, err := e.conn.Query(qctx, "SELECT count() FROM "+qname+" WHERE "+where)
		if err != nil {
			return 0, fmt.Errorf("count the subject's versions in %s: %w", t.name, err)
		}
		defer rows.Close()
		var n uint64
		for rows.Next() {
			if err := rows.Scan(&n); err != nil {
				return 0, fmt.Errorf("count the subject's versions in %s: %w", t.name, err)
			}
		}
		return n, rows.Err()
	}
	before, err := count()
	if err != nil {
		return res, err
	}
	res.Left = before
	if before == 0 {
		return res, nil
	}
	msettings := maps.Clone(settings)
	msettings["mutations_sync"] = 2
	mctx := ch.Context(ctx, ch.WithParameters(toParams(params)), ch.WithSettings(msettings))
	// A sink that had read an older record before it read the ledger
	// entry and loaded it only now (a batch retried for longer than the
	// settle time) leaves a version behind: removed by the next round.
	for round := 0; round < removalRounds && res.Left > 0; round++ {
		if err := e.conn.Exec(mctx, "ALTER TABLE "+qname+" DELETE WHERE "+where); err != nil {
			return res, fmt.Errorf("remove the subject's versions from %s: %w", t.name, err)
		}
		if res.Left, err = count(); err != nil {
			return res, err
		}
	}
	res.Removed = before - min(res.Left, before)
	return res, nil
}

// audit stores the manifest and logs the audit entry.
func (e *Eraser) audit(ctx context.Context, m Manifest) error {
	if err := e.store(ctx, m, StateFinished, m.FinishedAt, ""); err != nil {
		return fmt.Errorf("store the erasure's manifest (the rows are removed; keep the manifest printed): %w", err)
	}
	var removed uint64
	tables := make([]string, len(m.Tables))
	for i, t := range m.Tables {
		tables[i] = t.Table
		removed += t.Removed
	}
	e.log.Info("audit: subject erasure", "erasure_id", m.ID, "requested_by", m.RequestedBy, "tenant", m.Tenant,
		"subject_column", m.Column, "subject_hmac", m.SubjectHMAC, "tables", tables, "versions_removed", removed,
		"as_of_lsn", m.AsOfLSN, "verified", m.Verified)
	return nil
}

// store writes one row of m's erasure to ManifestTable: its start, its
// end (the signed manifest) or its failure (errText).
func (e *Eraser) store(ctx context.Context, m Manifest, state string, at time.Time, errText string) error {
	body, err := json.Marshal(m)
	if err != nil {
		return err
	}
	verified := "0"
	if m.Verified && state == StateFinished {
		verified = "1"
	}
	stmt := fmt.Sprintf("INSERT INTO %s.%s (erasure_id, tenant, verified, finished_at, manifest, state, error) VALUES ({id:String}, {tenant:String}, %s, {at:DateTime64(6, 'UTC')}, {m:String}, {state:String}, {err:String})",
		schema.QuoteIdent(e.database), schema.QuoteIdent(ManifestTable), verified)
	params := map[string]string{"id": m.ID, "tenant": m.Tenant, "at": at.UTC().Format("2006-01-02 15:04:05.999999"), "m": string(body), "state": state, "err": errText}
	if err := e.conn.Exec(chParams(ctx, params), stmt); err != nil {
		return fmt.Errorf("record the erasure's %s in %s: %w", state, ManifestTable, err)
	}
	return nil
}

// Begin plans req and records its start (Plan, Start), and returns the
// erasure's id and the function that runs it (Run): the API answers with
// the id once the start is on record, and runs the rest detached, with a
// deadline of its own.
//
// Begin refuses with *RateError a tenant that started StartsPerMinute
// erasures in the last minute, counted in ManifestTable (every serve's).
func (e *Eraser) Begin(ctx context.Context, req Request) (string, func(context.Context) (Manifest, error), error) {
	if err := ensureTables(ctx, e.conn, e.database); err != nil {
		return "", nil, err
	}
	var n uint64
	q := fmt.Sprintf("SELECT count() FROM %s.%s WHERE tenant = {tenant:String} AND state = 'started' AND finished_at > now64(6) - INTERVAL 1 MINUTE",
		schema.QuoteIdent(e.database), schema.QuoteIdent(ManifestTable))
	if err := queryOne(chParams(ctx, map[string]string{"tenant": req.Tenant}), e.conn, q, &n); err != nil {
		return "", nil, fmt.Errorf("count the tenant's recent erasures: %w", err)
	}
	if n >= uint64(e.starts) {
		return "", nil, &RateError{Max: e.starts}
	}
	p, err := e.Plan(ctx, req)
	if err != nil {
		return "", nil, err
	}
	if err := e.Start(ctx, p); err != nil {
		return "", nil, err
	}
	return p.ID(), func(ctx context.Context) (Manifest, error) { return e.Run(ctx, p) }, nil
}
