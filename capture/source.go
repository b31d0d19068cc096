package capture

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
)

// source is what prepare learned about the database.
type source struct {
	id      string
	tables  []string
	version serverVersion
}

// connect opens a connection with the session settings that make
// PostgreSQL's text output of values stable and lossless.
func connect(ctx context.Context, connString string, replication bool) (*pgx.Conn, error) {
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
	if replication {
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
// publication and validates every published table.
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
	published, err := publishedTables(ctx, conn, cfg.publication)
	if err != nil {
		return source{}, err
	}
	for _, t := range published {
		if !cfg.excluded(t) {
			src.tables = append(src.tables, t)
		}
	}
	if len(src.tables) == 0 {
		if len(published) > 0 {
			return source{}, fmt.Errorf("every table of publication %s is excluded by --exclude-tables: nothing to capture", cfg.publication)
		}
		return source{}, fmt.Errorf("publication %s has no tables: name them with --tables", cfg.publication)
	}
	for t := range cfg.resnapshot {
		if !slices.Contains(src.tables, t) {
			return source{}, fmt.Errorf("--resnapshot %s: the table is not captured from publication %s", t, cfg.publication)
		}
	}
	errs := []error{cfg.checkNames(src.tables)}
	for _, t := range src.tables {
		if err := checkTable(ctx, conn, cfg, version, t); err != nil {
			errs = append(errs, err)
		}
	}
	return src, errors.Join(errs...)
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

// checkTable refuses tables that capture could not map, before any row
// flows: no primary key, no tenant column and no default tenant, or
// published filtered.
func checkTable(ctx context.Context, conn *pgx.Conn, cfg *config, version serverVersion, qt string) error {
	schema, table, _ := strings.Cut(qt, ".")
	var (
		hasKey    bool
		hasTenant bool
		identity  string
	)
	tenantCol := cfg.relationTenant(schema, table)
	err := conn.QueryRow(ctx, `
		SELECT
		  EXISTS (SELECT 1 FROM pg_catalog.pg_index i WHERE i.indrelid = c.oid AND (i.indisprimary OR i.indisreplident)),
		  EXISTS (SELECT 1 FROM pg_catalog.pg_attribute a WHERE a.attrelid = c.oid AND a.attname = $3 AND a.attnum > 0 AND NOT a.attisdropped),
		  c.relreplident::text
		FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relname = $2`, schema, table, tenantCol).Scan(&hasKey, &hasTenant, &identity)
	if err != nil {
		return fmt.Errorf("inspect table %s: %w", qt, err)
	}
	var errs []error
	if !hasKey {
		errs = append(errs, fmt.Errorf("table %s has no primary key: walhouse needs one to identify rows in ClickHouse; add a PRIMARY KEY, or exclude the table from publication %s", qt, cfg.publication))
	}
	if identity == "n" {
		errs = append(errs, fmt.Errorf("table %s has REPLICA IDENTITY NOTHING, so updates and deletes cannot be captured: run ALTER TABLE %s REPLICA IDENTITY DEFAULT", qt, qt))
	}
	if !hasTenant && cfg.defaultTenant == "" {
		errs = append(errs, fmt.Errorf("table %s has no tenant column %q: add one, name another with --tenant-column-for %s=COLUMN, or map the table to a fixed tenant with --default-tenant", qt, tenantCol, qt))
	}
	refusal := uncapturable(errors.Join(errs...))
	if version.publicationFilters() {
		return errors.Join(refusal, checkPublishedWhole(ctx, conn, version, cfg.publication, schema, table))
	}
	return refusal
}

// readd is the statement that publishes table qt of publication qp again
// without a row filter or column list; ALTER PUBLICATION ... SET TABLE
// would also drop the publication's other tables.
func readd(qp, qt string) string {
	return fmt.Sprintf("BEGIN; ALTER PUBLICATION %s DROP TABLE %s; ALTER PUBLICATION %s ADD TABLE %s; COMMIT", qp, qt, qp, qt)
}

// checkPublishedWhole refuses a table that the publication sends filtered:
// with a row filter or a column list (PostgreSQL 15+), or with generated
// columns (18+: publish_generated_columns, or named in a column list). The
// copy reads every row and every column but the generated ones, so
// ClickHouse would keep rows the stream never updates or deletes, and
// columns one of them never sends (docs/postgres-versions.md says how to
// filter instead). PostgreSQL 15 lists stored generated columns in
// attnames without publishing them, so before 18 they are not counted.
func checkPublishedWhole(ctx context.Context, conn *pgx.Conn, version serverVersion, pub, schema, table string) error {
	rows, err := conn.Query(ctx, `
		SELECT t.rowfilter,
		       (SELECT array_agg(a.attname ORDER BY a.attnum) FROM pg_catalog.pg_attribute a
		        WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = '' AND a.attname = ANY (t.attnames))
		       IS DISTINCT FROM
		       (SELECT array_agg(a.attname ORDER BY a.attnum) FROM pg_catalog.pg_attribute a
		        WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = ''),
		       EXISTS (SELECT 1 FROM pg_catalog.pg_attribute a
		        WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated <> '' AND a.attname = ANY (t.attnames))
		FROM pg_catalog.pg_publication_tables t
		JOIN pg_catalog.pg_namespace n ON n.nspname = t.schemaname
		JOIN pg_catalog.pg_class c ON c.relnamespace = n.oid AND c.relname = t.tablename
		WHERE t.pubname = $1 AND t.schemaname = $2 AND t.tablename = $3`, pub, schema, table)
	if err != nil {
		return fmt.Errorf("read how publication %s publishes %s.%s: %w", pub, schema, table, err)
	}
	var (
		errs               []error
		filter             *string
		columns, generated bool
	)
	qt, qp := pgx.Identifier{schema, table}.Sanitize(), pgx.Identifier{pub}.Sanitize()
	_, err = pgx.ForEachRow(rows, []any{&filter, &columns, &generated}, func() error {
		if filter != nil {
			errs = append(errs, fmt.Errorf("publication %s publishes %s with a row filter (WHERE %s), but walhouse copies and streams whole tables: publish it whole with %s (filter in ClickHouse or in the query API instead)",
				pub, qt, *filter, readd(qp, qt)))
		}
		if columns {
			errs = append(errs, fmt.Errorf("publication %s publishes %s with a column list, but walhouse copies every column: publish it whole with %s",
				pub, qt, readd(qp, qt)))
		}
		if generated && version.publishesGenerated() {
			errs = append(errs, fmt.Errorf("publication %s publishes generated columns of %s, which walhouse does not copy: run ALTER PUBLICATION %s SET (publish_generated_columns = none), and name no generated column in a column list (compute them in ClickHouse instead)",
				pub, qt, qp))
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("read how publication %s publishes %s: %w", pub, qt, err)
	}
	return uncapturable(errors.Join(errs...))
}
