package main

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/jackc/pgx/v5"

	"github.com/walhouse/walhouse/internal/pgslot"
	"github.com/walhouse/walhouse/schema"
)

// ClickHouse's own CDC, the MaterializedPostgreSQL database engine, is the
// peer walhouse is measured against: a database of that engine copies its
// tables from PostgreSQL (a COPY of a snapshot), then applies their changes
// from a logical replication slot it reads with
// pg_logical_slot_peek_binary_changes over a plain connection (no
// walsender), polling with a backoff of up to 10 s when it finds nothing
// (its default settings, kept as a user gets them).
//
// The engine names its slot after the ClickHouse database's UUID (with
// materialized_postgresql_use_unique_replication_consumer_identifier, so
// that it never takes a slot named after the PostgreSQL database, which is
// walhouse capture's default slot name) and its publication
// <PostgreSQL database>_ch_publication, one per PostgreSQL database: the
// benchmark runs one such ClickHouse database at a time and drops it (the
// engine then drops its slot and publication) before the next.

// runMaterialized is the name of the MaterializedPostgreSQL load run.
const runMaterialized = "ClickHouse MaterializedPostgreSQL"

// materializedSettings are the request settings CREATE DATABASE needs:
// the engine is experimental. The HTTP front passes every unknown URL
// parameter as a setting of that request (harness/chdb).
func materializedSettings(ctx context.Context) context.Context {
	return ch.Context(ctx, ch.WithSettings(ch.Settings{"allow_experimental_database_materialized_postgresql": 1}))
}

// uuidSlotRE matches the slot names the engine makes from a database UUID.
var uuidSlotRE = regexp.MustCompile(`^[0-9a-f]{8}_[0-9a-f]{4}_[0-9a-f]{4}_[0-9a-f]{4}_[0-9a-f]{12}$`)

// materialized is one MaterializedPostgreSQL database replicating tables.
type materialized struct {
	db   string // the ClickHouse database
	slot string // the engine's slot in PostgreSQL
}

// table returns the quoted ClickHouse name of table (of schema public).
func (m *materialized) table(table string) string {
	return schema.QuoteIdent(m.db) + "." + schema.QuoteIdent(table)
}

// startMaterialized creates a MaterializedPostgreSQL database <base>_mpg_<role>
// replicating tables (of schema public). It returns as soon as ClickHouse
// accepted the database; the initial copy runs in the background. The
// database, its slot and its publication are removed at the end of the run
// (b.stopMaterialized removes them earlier).
func (b *bench) startMaterialized(ctx context.Context, role string, tables []string) (*materialized, error) {
	cfg, err := pgx.ParseConfig(b.o.env.PG)
	if err != nil {
		return nil, fmt.Errorf("parse WALHOUSE_PG_URL: %w", err)
	}
	m := &materialized{db: b.base + "_mpg_" + role}
	pub := cfg.Database + "_ch_publication"
	var taken bool
	if err := b.pg.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_publication WHERE pubname = $1)", pub).Scan(&taken); err != nil {
		return nil, fmt.Errorf("look for publication %s: %w", pub, err)
	}
	if taken {
		return nil, fmt.Errorf("publication %s exists: another MaterializedPostgreSQL database replicates from %s (the engine makes one publication per PostgreSQL database); drop it, or drop the publication if none runs", pub, cfg.Database)
	}
	create := fmt.Sprintf("CREATE DATABASE %s ENGINE = MaterializedPostgreSQL(%s, %s, %s, %s) SETTINGS materialized_postgresql_tables_list = %s, materialized_postgresql_use_unique_replication_consumer_identifier = 1",
		schema.QuoteIdent(m.db), chString(fmt.Sprintf("%s:%d", cfg.Host, cfg.Port)), chString(cfg.Database), chString(cfg.User), chString(cfg.Password), chString(strings.Join(tables, ",")))
	b.undo.Push("drop MaterializedPostgreSQL database "+m.db, func(ctx context.Context) error { return b.stopMaterialized(ctx, m) })
	if err := b.ch.Exec(materializedSettings(ctx), create); err != nil {
		return nil, fmt.Errorf("create a MaterializedPostgreSQL database (does this ClickHouse have the engine?): %w", err)
	}
	var uuid string
	if err := b.ch.QueryRow(ctx, "SELECT toString(uuid) FROM system.databases WHERE name = {db:String}", ch.Named("db", m.db)).Scan(&uuid); err != nil {
		return m, fmt.Errorf("read the UUID of %s: %w", m.db, err)
	}
	m.slot = strings.ReplaceAll(uuid, "-", "_")
	return m, nil
}

// stopMaterialized drops m's database; the engine drops its slot and
// publication with it, and what it left (e.g. when PostgreSQL refused) is
// dropped here.
func (b *bench) stopMaterialized(ctx context.Context, m *materialized) error {
	if m == nil || m.db == "" {
		return nil
	}
	var errs []error
	if err := b.ch.Exec(ctx, "DROP DATABASE IF EXISTS "+schema.QuoteIdent(m.db)+" SYNC"); err != nil {
		errs = append(errs, fmt.Errorf("drop database %s: %w", m.db, err))
	}
	if m.slot != "" {
		if err := pgslot.Drop(ctx, b.pg, m.slot); err != nil {
			errs = append(errs, fmt.Errorf("drop the engine's slot %s: %w", m.slot, err))
		}
	}
	if err := b.dropMaterializedPublication(ctx); err != nil {
		errs = append(errs, err)
	}
	m.db = ""
	return errors.Join(errs...)
}

// dropMaterializedPublication drops the engine's publication of the
// PostgreSQL database when no MaterializedPostgreSQL database is left in
// ClickHouse to use it.
func (b *bench) dropMaterializedPublication(ctx context.Context) error {
	var live uint64
	if err := b.ch.QueryRow(ctx, "SELECT count() FROM system.databases WHERE engine = 'MaterializedPostgreSQL'").Scan(&live); err != nil {
		return fmt.Errorf("count MaterializedPostgreSQL databases: %w", err)
	}
	if live > 0 {
		return nil
	}
	var db string
	if err := b.pg.QueryRow(ctx, "SELECT current_database()").Scan(&db); err != nil {
		return err
	}
	if _, err := b.pg.Exec(ctx, "DROP PUBLICATION IF EXISTS "+pgx.Identifier{db + "_ch_publication"}.Sanitize()); err != nil {
		return fmt.Errorf("drop publication %s_ch_publication: %w", db, err)
	}
	return nil
}

// removeMaterializedLeftovers removes what a run that crashed left of its
// MaterializedPostgreSQL databases: the databases (bench_e2e_*, also those
// of a run going on at the same time, whose figures a second run spoils
// anyway), then the engine's slots whose database is gone and its
// publication when no such database is left.
func (b *bench) removeMaterializedLeftovers(ctx context.Context) error {
	rows, err := b.ch.Query(ctx, "SELECT name FROM system.databases WHERE engine = 'MaterializedPostgreSQL' AND startsWith(name, 'bench_e2e_')")
	if err != nil {
		return fmt.Errorf("list MaterializedPostgreSQL databases: %w", err)
	}
	var dbs []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			rows.Close()
			return err
		}
		dbs = append(dbs, n)
	}
	rows.Close()
	var errs []error
	for _, n := range dbs {
		fmt.Printf("removing a MaterializedPostgreSQL database an earlier run left: %s\n", n)
		if err := b.ch.Exec(ctx, "DROP DATABASE IF EXISTS "+schema.QuoteIdent(n)+" SYNC"); err != nil {
			errs = append(errs, fmt.Errorf("drop database %s: %w", n, err))
		}
	}
	// Slots named after a UUID that no ClickHouse database has any more.
	uuids := map[string]bool{}
	rows, err = b.ch.Query(ctx, "SELECT replaceAll(toString(uuid), '-', '_') FROM system.databases")
	if err != nil {
		return errors.Join(append(errs, fmt.Errorf("list database UUIDs: %w", err))...)
	}
	for rows.Next() {
		var u string
		if err := rows.Scan(&u); err == nil {
			uuids[u] = true
		}
	}
	rows.Close()
	slots, err := b.pg.Query(ctx, "SELECT slot_name FROM pg_replication_slots WHERE NOT active AND database = current_database()")
	if err != nil {
		return errors.Join(append(errs, fmt.Errorf("list replication slots: %w", err))...)
	}
	names, err := pgx.CollectRows(slots, pgx.RowTo[string])
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	for _, s := range names {
		if uuidSlotRE.MatchString(s) && !uuids[s] {
			fmt.Printf("removing a MaterializedPostgreSQL slot an earlier run left: %s\n", s)
			if err := pgslot.Drop(ctx, b.pg, s); err != nil {
				errs = append(errs, fmt.Errorf("drop slot %s: %w", s, err))
			}
		}
	}
	if err := b.dropMaterializedPublication(ctx); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// loadWithMaterialized times ClickHouse's own CDC loading table: from
// CREATE DATABASE until the engine's table holds every row. limit bounds
// the wait (the engine reports a failed copy only in its log). The
// database is dropped afterwards, outside the measurement.
func (b *bench) loadWithMaterialized(ctx context.Context, role, table string, rows int64, limit time.Duration) (loadRun, error) {
	run := loadRun{Name: runMaterialized}
	m := b.startMeter()
	eng := b.startEngineProfile(ctx, "load-"+role+"-materialized")
	began := time.Now()
	mat, err := b.startMaterialized(ctx, role, []string{table})
	if err != nil {
		m.finish()
		eng.finish(ctx)
		return run, err
	}
	defer func() {
		if err := b.stopMaterialized(ctx, mat); err != nil {
			fmt.Printf("  removing %s: %v\n", mat.db, err)
		}
	}()
	target := mat.table(table)
	var loaded uint64
	err = b.waitFor(ctx, nil, limit, loadPollPeriod, func(ctx context.Context) (bool, error) {
		// The engine attaches the table once its copy is complete.
		err := b.ch.QueryRow(ctx, "SELECT count() FROM "+target).Scan(&loaded)
		return loaded >= uint64(rows), err
	})
	took := time.Since(began)
	run.Usage = m.finish()
	run.Engine = eng.finish(ctx)
	if err != nil {
		return run, fmt.Errorf("waiting for %d rows in %s (%d there): %w", rows, target, loaded, err)
	}
	run.Seconds, run.RowsPerSecond = took.Seconds(), float64(rows)/took.Seconds()
	return run, nil
}
