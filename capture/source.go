package capture

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"
)

// source is what prepare learned about the database.
type source struct {
	id      string
	tables  []string         // captured
	refused map[string]error // published but left out, and why (refused.go)
	version serverVersion
}

// connOptions says what kind of connection connect opens.
type connOptions struct {
	// replication opens a replication connection (replication=database).
	replication bool
	// maxCopyData, when above 0, replaces every CopyData message larger
	// than it by a stand-in before it is read into memory
	// (receive_bound.go).
	maxCopyData int
	// maxRow, when above 0, replaces every DataRow larger than it (and
	// every CopyData) by one of NULLs; the reader is handed to bounded.
	maxRow  int
	bounded func(*boundedReader)
}

// connect opens a connection with the session settings that make
// PostgreSQL's text output of values stable and lossless.
func connect(ctx context.Context, connString string, opts connOptions) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(connString)
	if err != nil {
		return nil, fmt.Errorf("parse PostgreSQL connection string: %w", err)
	}
	for k, v := range map[string]string{
		"DateStyle":          "ISO, YMD",
		"TimeZone":           "UTC",
		"IntervalStyle":      "postgres",
		"extra_float_digits": "3",
		"bytea_output":       "hex",
		"application_name":   "walhouse",
	} {
		cfg.RuntimeParams[k] = v
	}
	switch {
	case opts.maxRow > 0:
		cfg.BuildFrontend = func(r io.Reader, w io.Writer) *pgproto3.Frontend {
			br := newRowBoundedReader(r, opts.maxRow)
			opts.bounded(br)
			return pgproto3.NewFrontend(br, w)
		}
	case opts.maxCopyData > 0:
		cfg.BuildFrontend = func(r io.Reader, w io.Writer) *pgproto3.Frontend {
			return pgproto3.NewFrontend(newBoundedReader(r, opts.maxCopyData), w)
		}
	}
	if opts.replication {
		cfg.RuntimeParams["replication"] = "database"
		// The replication protocol speaks only the simple query protocol.
		cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to PostgreSQL at %s:%d: %w; check that it is running and that the URL, user and pg_hba.conf allow walhouse in", cfg.Host, cfg.Port, err)
	}
	return conn, nil
}

// prepare checks that the database can be captured, creates or extends the
// publication and validates every published table: it refuses to start on
// a table it cannot capture while the slot does not exist yet, and leaves
// such a table out once it does (refused.go).
func prepare(ctx context.Context, conn *pgx.Conn, cfg *config) (source, error) {
	var walLevel string
	if err := conn.QueryRow(ctx, "SHOW wal_level").Scan(&walLevel); err != nil {
		return source{}, fmt.Errorf("read wal_level: %w", err)
	}
	if walLevel != "logical" {
		return source{}, fmt.Errorf("PostgreSQL has wal_level=%s but logical replication needs wal_level=logical: set it in postgresql.conf (or ALTER SYSTEM SET wal_level = logical) and restart PostgreSQL", walLevel)
	}
	var sysID, db string
	if err := conn.QueryRow(ctx, "SELECT system_identifier::text, current_database() FROM pg_control_system()").Scan(&sysID, &db); err != nil {
		return source{}, fmt.Errorf("read the system identifier: %w", err)
	}
	version, err := readServerVersion(ctx, conn)
	if err != nil {
		return source{}, err
	}
	src := source{id: cfg.sourceID, version: version}
	if src.id == "" {
		src.id = sysID + "/" + db
	}
	if err := ensurePublication(ctx, conn, cfg); err != nil {
		return source{}, err
	}
	published, invalid, err := publishedTables(ctx, conn, cfg.publication)
	if err != nil {
		return source{}, err
	}
	for _, t := range published {
		if !cfg.excluded(t) {
			src.tables = append(src.tables, t)
		}
	}
	if len(src.tables) == 0 && len(invalid) == 0 {
		if len(published) > 0 {
			return source{}, fmt.Errorf("every table of publication %s is excluded by --exclude-tables: nothing to capture", cfg.publication)
		}
		return source{}, fmt.Errorf("publication %s has no tables: name them with --tables", cfg.publication)
	}
	var slotExists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_replication_slots WHERE slot_name = $1)", cfg.slot).Scan(&slotExists); err != nil {
		return source{}, fmt.Errorf("look up replication slot %s: %w", cfg.slot, err)
	}
	// Once the slot exists, the stream starts from WAL written before
	// today's catalog: a table's key, identity and tenant column then are
	// what its first Relation message says (checkTables).
	refused, err := refusals(ctx, conn, cfg, version, src.tables, !slotExists)
	if err != nil {
		return source{}, err
	}
	for t, why := range invalid {
		if !cfg.excluded(t) {
			refused[t] = why
		}
	}
	if len(refused) > 0 {
		names := slices.Sorted(maps.Keys(refused))
		if !slotExists {
			// No slot pins WAL yet: a clear refusal harms nothing, and
			// leaving a table out silently from the first start is not
			// what whoever published it meant.
			errs := make([]error, len(names))
			for i, t := range names {
				errs[i] = refused[t]
			}
			return source{}, fmt.Errorf("%w\nslot %s does not exist, so no WAL waits for capture, and it refuses to start rather than leave these tables out: fix them, or leave them out with --exclude-tables %s",
				errors.Join(errs...), cfg.slot, strings.Join(names, ","))
		}
		// The slot pins WAL from now on: a table that cannot be captured
		// is left out, as while streaming (refused.go).
		src.tables = slices.DeleteFunc(src.tables, func(t string) bool { return refused[t] != nil })
		src.refused = refused
	}
	for t := range cfg.resnapshot {
		if refused[t] != nil {
			return source{}, fmt.Errorf("--resnapshot %s: the table is left out of the stream, fix it first: %w", t, refused[t])
		}
		if !slices.Contains(src.tables, t) {
			return source{}, fmt.Errorf("--resnapshot %s: the table is not captured from publication %s", t, cfg.publication)
		}
	}
	return src, nil
}

// refusals returns, by table, why capture cannot capture those of tables it
// cannot (checkTables), and which of two tables that would share a
// ClickHouse table or a Kafka topic it leaves out: one without saved
// snapshot state (not captured before, as a table that joins the
// publication under a captured table's name while streaming is refused),
// else the later one.
func refusals(ctx context.Context, conn *pgx.Conn, cfg *config, version serverVersion, tables []string, shape bool) (map[string]error, error) {
	refused, err := checkTables(ctx, conn, cfg, version, tables, shape)
	if err != nil {
		return nil, err
	}
	order := tables
	if clashes := cfg.checkNames(tables); len(clashes) > 0 {
		if order, err = capturedFirst(ctx, cfg, tables); err != nil {
			return nil, err
		}
	}
	for t, err := range cfg.checkNames(order) {
		refused[t] = errors.Join(refused[t], err)
	}
	return refused, nil
}

// capturedFirst returns tables with those captured before (with saved
// snapshot state) first, each part in its order.
func capturedFirst(ctx context.Context, cfg *config, tables []string) ([]string, error) {
	if cfg.state == nil {
		return tables, nil
	}
	var before, after []string
	for _, t := range tables {
		raw, err := cfg.state.Load(ctx, stateKey(cfg.slot, t))
		if err != nil {
			return nil, fmt.Errorf("read the snapshot state of %s: %w", t, err)
		}
		if raw != nil {
			before = append(before, t)
		} else {
			after = append(after, t)
		}
	}
	return append(before, after...), nil
}

func ensurePublication(ctx context.Context, conn *pgx.Conn, cfg *config) error {
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_publication WHERE pubname = $1)", cfg.publication).Scan(&exists); err != nil {
		return fmt.Errorf("look up publication %s: %w", cfg.publication, err)
	}
	var missing []string
	for _, t := range cfg.tables {
		qt := qualify(t)
		var oid uint32
		schema, table, _ := strings.Cut(qt, ".")
		err := conn.QueryRow(ctx, `SELECT c.oid FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind IN ('r', 'p')`, schema, table).Scan(&oid)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("table %s does not exist in the source database", qt)
		}
		if err != nil {
			return fmt.Errorf("look up table %s: %w", qt, err)
		}
		var published bool
		if exists {
			// pg_publication_tables lists a partitioned table's partitions
			// instead of the table when the publication does not publish via
			// the root; pg_publication_rel holds the table as it was added.
			if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_publication_tables WHERE pubname = $1 AND schemaname = $2 AND tablename = $3)
				OR EXISTS (SELECT 1 FROM pg_catalog.pg_publication_rel r JOIN pg_catalog.pg_publication p ON p.oid = r.prpubid WHERE p.pubname = $1 AND r.prrelid = $4)`, cfg.publication, schema, table, oid).Scan(&published); err != nil {
				return fmt.Errorf("look up publication %s: %w", cfg.publication, err)
			}
		}
		if !published {
			missing = append(missing, pgx.Identifier{schema, table}.Sanitize())
		}
	}
	pub := pgx.Identifier{cfg.publication}.Sanitize()
	switch {
	case !exists && len(missing) == 0:
		return fmt.Errorf("publication %s does not exist: name the tables to capture with --tables, or create it with CREATE PUBLICATION", cfg.publication)
	case !exists:
		_, err := conn.Exec(ctx, fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s WITH (publish_via_partition_root = true)", pub, strings.Join(missing, ", ")))
		if err != nil {
			return fmt.Errorf("create publication %s: %w (the user needs CREATE on the database and ownership of the tables)", cfg.publication, err)
		}
	case len(missing) > 0:
		if _, err := conn.Exec(ctx, fmt.Sprintf("ALTER PUBLICATION %s ADD TABLE %s", pub, strings.Join(missing, ", "))); err != nil {
			return fmt.Errorf("add tables to publication %s: %w", cfg.publication, err)
		}
	}
	return nil
}

// checkTable refuses a table that capture could not map, before any row
// flows (see checkTables).
func checkTable(ctx context.Context, conn *pgx.Conn, cfg *config, version serverVersion, qt string) error {
	refused, err := checkTables(ctx, conn, cfg, version, []string{qt}, true)
	if err != nil {
		return err
	}
	return refused[qt]
}

// checkTables looks at the shape of tables ("schema.table") in one catalog
// query and returns, by table, why capture could not map those it could
// not (tableRefusals: no primary key, REPLICA IDENTITY NOTHING, no tenant
// column and no default tenant, a layout naming columns the table lacks or
// that are outside its replica identity, or published with a column list
// that leaves out a key, tenant or sorting column, or with generated
// columns; a row filter and a column list that keeps those are honoured,
// see publicationEntry). A table dropped since it was listed is not
// refused: it leaves the publication too. The error is for a failed query.
// One query, so that capture can look at every captured table while it
// streams (pollTables) without stalling the stream.
//
// With shape false it looks only at how the publication sends the tables:
// a captured table's key, identity and tenant column are judged by its
// Relation messages, at their place in the WAL (buildRelation), never by
// today's catalog, which may be ahead of the stream.
func checkTables(ctx context.Context, conn *pgx.Conn, cfg *config, version serverVersion, tables []string, shape bool) (map[string]error, error) {
	what := fmt.Sprintf("%d tables", len(tables))
	if len(tables) == 1 {
		what = "table " + tables[0]
	}
	schemas, names, tenants := make([]string, len(tables)), make([]string, len(tables)), make([]string, len(tables))
	layouts := make([]string, len(tables)) // JSON arrays of the layout's sorting columns
	needed := make([]string, len(tables))  // JSON arrays of neededColumns
	for i, t := range tables {
		schemas[i], names[i], _ = strings.Cut(t, ".")
		tenants[i] = cfg.relationTenant(schemas[i], names[i])
		layouts[i] = "[]"
		if cols := cfg.layouts[schemas[i]+"."+names[i]].OrderBy; len(cols) > 0 {
			b, _ := json.Marshal(cols) // strings: cannot fail
			layouts[i] = string(b)
		}
		b, _ := json.Marshal(cfg.neededColumns(schemas[i], names[i]))
		needed[i] = string(b)
	}
	// How the publication sends the table (15+): its row filter and
	// column list (publicationEntry), and whether it names a generated
	// column (PostgreSQL 15 lists stored generated columns in attnames
	// without publishing them: only 18 counts them).
	published := `NULL::text, NULL::text[], NULL::text[], false`
	if version.publicationFilters() {
		published = `pg_catalog.pg_get_expr(r.prqual, r.prrelid), ` + entryColumnsSQL("r", "ARRAY(SELECT jsonb_array_elements_text(t.needed::jsonb))") + `,
		  EXISTS (SELECT 1 FROM pg_catalog.pg_attribute a
		   WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated <> '' AND a.attname = ANY (p.attnames))`
	}
	actions := publishActions(ctx, conn, cfg.publication)
	if actions != nil && !errors.Is(actions, errUncapturable) {
		return nil, actions
	}
	rows, err := conn.Query(ctx, `
		SELECT t.nsp, t.rel, c.oid IS NOT NULL,
		  EXISTS (SELECT 1 FROM pg_catalog.pg_index i WHERE i.indrelid = c.oid AND (i.indisprimary OR i.indisreplident)),
		  coalesce(c.relreplident::text, ''),
		  EXISTS (SELECT 1 FROM pg_catalog.pg_attribute a WHERE a.attrelid = c.oid AND a.attname = t.tenant AND a.attnum > 0 AND NOT a.attisdropped),
		  `+published+`,
		  (SELECT array_agg(l.col) FROM jsonb_array_elements_text(t.layout::jsonb) AS l(col)
		   WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.pg_attribute a WHERE a.attrelid = c.oid AND a.attname = l.col AND a.attnum > 0 AND NOT a.attisdropped)),
		  (SELECT array_agg(l.col) FROM jsonb_array_elements_text(t.layout::jsonb) AS l(col)
		   JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attname = l.col AND a.attnum > 0 AND NOT a.attisdropped
		   WHERE c.relreplident <> 'f' AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_index i WHERE i.indrelid = c.oid
		     AND ((c.relreplident = 'd' AND i.indisprimary) OR (c.relreplident = 'i' AND i.indisreplident)) AND a.attnum = ANY (i.indkey::int2[]))),
		  (SELECT array_agg(a.attname::text ORDER BY a.attnum) FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_type ty ON ty.oid = a.atttypid
		   WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped AND ty.typcategory = 'A'
		     AND (a.attname = t.tenant OR EXISTS (SELECT 1 FROM pg_catalog.pg_index i WHERE i.indrelid = c.oid AND (i.indisprimary OR i.indisreplident) AND a.attnum = ANY (i.indkey::int2[]))))
		FROM unnest($1::text[], $2::text[], $3::text[], $5::text[], $6::text[]) AS t(nsp, rel, tenant, layout, needed)
		LEFT JOIN pg_catalog.pg_namespace n ON n.nspname = t.nsp
		LEFT JOIN pg_catalog.pg_class c ON c.relnamespace = n.oid AND c.relname = t.rel
		LEFT JOIN pg_catalog.pg_publication_tables p ON p.pubname = $4 AND p.schemaname = t.nsp AND p.tablename = t.rel
		`+entryJoin, schemas, names, tenants, cfg.publication, layouts, needed)
	if err != nil {
		return nil, fmt.Errorf("inspect the shape of %s: %w", what, err)
	}
	var (
		schema, table             string
		exists, hasKey, hasTenant bool
		identity                  string
		entry                     publicationEntry
		filter                    *string
		generated                 bool
		layoutMissing             []string // columns of the layout the table lacks
		layoutOutside             []string // columns of the layout outside the replica identity
		arrayKeys                 []string // key or tenant columns that are arrays
		out                       = map[string]error{}
	)
	qp := pgx.Identifier{cfg.publication}.Sanitize()
	_, err = pgx.ForEachRow(rows, []any{&schema, &table, &exists, &hasKey, &identity, &hasTenant, &filter, &entry.columns, &entry.missing, &generated, &layoutMissing, &layoutOutside, &arrayKeys}, func() error {
		name := schema + "." + table
		if !exists {
			return nil // dropped since it was listed: it leaves the publication too
		}
		qt := pgx.Identifier{schema, table}.Sanitize()
		var errs []error
		if !shape {
			hasKey, identity, hasTenant = true, "", true
		}
		if !hasKey {
			errs = append(errs, refusal(reasonNoKey, "table %s has no primary key: walhouse needs one to identify rows in ClickHouse; add a PRIMARY KEY (or REPLICA IDENTITY USING INDEX on a unique index), or exclude the table from publication %s", name, cfg.publication))
		}
		if identity == "n" {
			errs = append(errs, refusal(reasonIdentity, "table %s has REPLICA IDENTITY NOTHING, so updates and deletes cannot be captured: run ALTER TABLE %s REPLICA IDENTITY DEFAULT", name, name))
		}
		layoutMissing = withoutAddedTenant(layoutMissing, hasTenant)
		if shape && len(layoutMissing) > 0 {
			errs = append(errs, refusal(reasonLayout, "table %s has no column %s, which its layout's order_by names: fix the layout (or add the column)", name, strings.Join(layoutMissing, ", ")))
		}
		if shape && len(layoutOutside) > 0 {
			errs = append(errs, refusal(reasonIdentity, "table %s: its layout sorts by %s, outside the replica identity, so an update of one could not remove the row at its old position (and a delete would miss it); run ALTER TABLE %s REPLICA IDENTITY FULL (or REPLICA IDENTITY USING INDEX on a unique index holding them)", name, strings.Join(layoutOutside, ", "), qt))
		}
		if shape && len(arrayKeys) > 0 {
			// As buildRelation refuses it (catalog.go), or the table would
			// join the stream at every look and be left out at its copy.
			errs = append(errs, refusal(reasonColumns, "table %s: its key or tenant column %s is an array, which walhouse cannot sort a ClickHouse table by: give the table a key (or a tenant column) of single values in PostgreSQL, or leave it out with --exclude-tables", name, strings.Join(arrayKeys, ", ")))
		}
		if !hasTenant && cfg.defaultTenant == "" {
			errs = append(errs, refusal(reasonNoTenant, "table %s has no tenant column %q: add one, name another with --tenant-column-for %s=COLUMN, or map the table to a fixed tenant with --default-tenant", name, cfg.relationTenant(schema, table), name))
		}
		// A row filter and a column list are honoured (the copies read
		// what the stream sends), but only a list that keeps what
		// identifies and places a row in ClickHouse.
		entry.filter = ""
		if filter != nil {
			entry.filter = *filter
		}
		if err := entry.refusal(cfg, qt); err != nil {
			errs = append(errs, err)
		}
		if actions != nil {
			errs = append(errs, actions)
		}
		if generated && version.publishesGenerated() {
			errs = append(errs, refusal(reasonGenerated, "publication %s publishes generated columns of %s, which walhouse does not copy: run ALTER PUBLICATION %s SET (publish_generated_columns = none), and name no generated column in a column list (compute them in ClickHouse instead)",
				cfg.publication, qt, qp))
		}
		if err := errors.Join(errs...); err != nil {
			out[name] = errors.Join(out[name], err)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("inspect the shape of %s: %w", what, err)
	}
	return out, nil
}

// publishActions refuses a publication that does not send every kind of
// change (publish = 'insert, update, delete, truncate'): the changes it
// leaves out would silently never reach ClickHouse.
func publishActions(ctx context.Context, conn *pgx.Conn, pub string) error {
	var ins, upd, del, trunc bool
	err := conn.QueryRow(ctx, `SELECT pubinsert, pubupdate, pubdelete, pubtruncate FROM pg_catalog.pg_publication WHERE pubname = $1`, pub).Scan(&ins, &upd, &del, &trunc)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil // dropped: every table leaves it
	}
	if err != nil {
		return fmt.Errorf("read what publication %s publishes: %w", pub, err)
	}
	var missing []string
	for _, a := range []struct {
		on   bool
		name string
	}{{ins, "insert"}, {upd, "update"}, {del, "delete"}, {trunc, "truncate"}} {
		if !a.on {
			missing = append(missing, a.name)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return refusal(reasonPublish, "publication %s does not publish %s, so those changes would never reach ClickHouse: run ALTER PUBLICATION %s SET (publish = 'insert, update, delete, truncate')",
		pub, strings.Join(missing, ", "), pgx.Identifier{pub}.Sanitize())
}

// publicationEntry is how the publication sends one table (its
// pg_publication_rel row, PostgreSQL 15+): whole, or with a row filter, a
// column list or both. Capture honours both: the stream is filtered by
// pgoutput, and the copies read the same rows and columns (snapshotRelation).
type publicationEntry struct {
	// filter is the row filter as PostgreSQL deparses it; "" for none.
	filter string
	// columns is the column list, without generated columns (which
	// neither the copy nor, before 18, the stream reads); nil for none.
	columns []string
	// missing are the columns the list leaves out that walhouse needs
	// (see neededColumns), in the table's order.
	missing []string
}

// entryJoin joins a query over tables c (pg_class) with their entries r
// in publication $4, if they have one (not FOR ALL TABLES or TABLES IN
// SCHEMA).
const entryJoin = `LEFT JOIN pg_catalog.pg_publication_rel r ON r.prrelid = c.oid
		  AND r.prpubid = (SELECT oid FROM pg_catalog.pg_publication WHERE pubname = $4)`

// entryColumnsSQL returns the two select-list expressions that read, of
// the publication entry rel (a pg_publication_rel row), its column list
// (publicationEntry.columns) and the columns it leaves out that walhouse
// needs (publicationEntry.missing): those of the primary key and of the
// replica identity index, and those named by needed, a text[] expression
// (neededColumns). Both are NULL without a column list.
func entryColumnsSQL(rel, needed string) string {
	return fmt.Sprintf(`(SELECT array_agg(a.attname ORDER BY a.attnum) FROM pg_catalog.pg_attribute a
		   WHERE a.attrelid = %[1]s.prrelid AND a.attnum = ANY (%[1]s.prattrs::int2[]) AND NOT a.attisdropped AND a.attgenerated = ''),
		  (SELECT array_agg(a.attname ORDER BY a.attnum) FROM pg_catalog.pg_attribute a
		   WHERE %[1]s.prattrs IS NOT NULL AND a.attrelid = %[1]s.prrelid AND a.attnum > 0 AND NOT a.attisdropped
		     AND NOT a.attnum = ANY (%[1]s.prattrs::int2[])
		     AND (a.attname = ANY (%[2]s) OR EXISTS (SELECT 1 FROM pg_catalog.pg_index i
		       WHERE i.indrelid = a.attrelid AND (i.indisprimary OR i.indisreplident) AND a.attnum = ANY (i.indkey::int2[]))))`, rel, needed)
}

// neededColumns are the columns of a table, besides its key, that a
// column list must keep: the tenant column, which says whose a row is,
// and the columns of its layout's sorting key and partition expression,
// which say where a row is in ClickHouse.
func (c *config) neededColumns(sch, table string) []string {
	out := []string{c.relationTenant(sch, table)}
	for _, col := range c.layouts[sch+"."+table].SortColumns() {
		if !slices.Contains(out, col) {
			out = append(out, col)
		}
	}
	return out
}

// refusal refuses table qt, published as e says, when its column list
// leaves out columns walhouse needs: without the key or the tenant
// column a row cannot be identified in ClickHouse, without a sorting
// column it cannot be placed. The fix publishes them too, keeping the
// rest of the entry. nil when nothing is missing.
func (e publicationEntry) refusal(cfg *config, qt string) error {
	if len(e.missing) == 0 {
		return nil
	}
	qp := pgx.Identifier{cfg.publication}.Sanitize()
	cols := make([]string, 0, len(e.columns)+len(e.missing))
	for _, c := range append(slices.Clone(e.columns), e.missing...) {
		cols = append(cols, pgx.Identifier{c}.Sanitize())
	}
	add := fmt.Sprintf("%s (%s)", qt, strings.Join(cols, ", "))
	if e.filter != "" {
		add += " WHERE (" + e.filter + ")"
	}
	// ALTER PUBLICATION ... SET TABLE would also drop the publication's
	// other tables.
	fix := fmt.Sprintf("BEGIN; ALTER PUBLICATION %s DROP TABLE %s; ALTER PUBLICATION %s ADD TABLE %s; COMMIT", qp, qt, qp, add)
	return refusal(reasonColumnList, "publication %s publishes %s with a column list that leaves out %s, which walhouse needs to identify and place its rows in ClickHouse (the primary key or replica identity, the tenant column, the layout's sorting columns): publish them too with %s",
		cfg.publication, qt, strings.Join(e.missing, ", "), fix)
}

// readEntry reads the publication's own entry of the relation relID
// (its pg_publication_rel row, by oid: one index lookup, unlike
// pg_publication_tables, which lists the whole publication). A table
// without one (FOR ALL TABLES, TABLES IN SCHEMA, or before 15) is
// published whole.
func readEntry(ctx context.Context, conn *pgx.Conn, cfg *config, version serverVersion, relID uint32, schema, table string) (publicationEntry, error) {
	var e publicationEntry
	if !version.publicationFilters() {
		return e, nil
	}
	err := conn.QueryRow(ctx, `SELECT coalesce(pg_catalog.pg_get_expr(r.prqual, r.prrelid), ''), `+entryColumnsSQL("r", "$3::text[]")+`
		FROM pg_catalog.pg_publication_rel r JOIN pg_catalog.pg_publication p ON p.oid = r.prpubid
		WHERE p.pubname = $1 AND r.prrelid = $2`, cfg.publication, relID, cfg.neededColumns(schema, table)).Scan(&e.filter, &e.columns, &e.missing)
	if errors.Is(err, pgx.ErrNoRows) {
		return publicationEntry{}, nil
	}
	if err != nil {
		return e, fmt.Errorf("look up how publication %s publishes %s.%s: %w", cfg.publication, schema, table, err)
	}
	return e, nil
}

// checkEntry looks at the publication's entry of the relation relID
// (readEntry) and refuses a column list that leaves out what walhouse
// needs. A Relation message follows every change of the entry, so such a
// list is refused before any row of its shape.
func checkEntry(ctx context.Context, conn *pgx.Conn, cfg *config, version serverVersion, relID uint32, schema, table string) error {
	e, err := readEntry(ctx, conn, cfg, version, relID, schema, table)
	if err != nil {
		return err
	}
	return e.refusal(cfg, pgx.Identifier{schema, table}.Sanitize())
}
