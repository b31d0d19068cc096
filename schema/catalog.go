package schema

import (
	"context"
	"fmt"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// The one reader of ClickHouse's catalog (system.tables and
// system.columns) for the loader, the query API, erasure and verify: what
// a table looks like in ClickHouse, as the functions of this package that
// compare it with a record's columns (PlanEvolution, IsSourceColumn,
// SplitSortingKey) read it.

// Querier is the part of a ClickHouse connection (driver.Conn) the
// catalog is read through.
type Querier interface {
	Query(ctx context.Context, query string, args ...any) (driver.Rows, error)
}

// TableInfo is a table as system.tables shows it.
type TableInfo struct {
	Engine       string
	SortingKey   string // as ClickHouse writes it; SplitSortingKey splits it
	PartitionKey string
	Comment      string // walhouse's note of the source table (see TableComment)
}

// catalogParams returns ctx with the query parameters {db:String} and, if
// table is not empty, {tbl:String}.
func catalogParams(ctx context.Context, database, table string) context.Context {
	p := ch.Parameters{"db": EscapeParam(database)}
	if table != "" {
		p["tbl"] = EscapeParam(table)
	}
	return ch.Context(ctx, ch.WithParameters(p))
}

// ReadTableInfo reads table of database from system.tables; ok is false
// when there is no such table.
func ReadTableInfo(ctx context.Context, conn Querier, database, table string) (info TableInfo, ok bool, err error) {
	rows, err := conn.Query(catalogParams(ctx, database, table),
		"SELECT engine, sorting_key, partition_key, comment FROM system.tables WHERE database = {db:String} AND name = {tbl:String}")
	if err != nil {
		return info, false, fmt.Errorf("look up ClickHouse table %s.%s: %w", database, table, err)
	}
	defer rows.Close()
	for rows.Next() {
		if err := rows.Scan(&info.Engine, &info.SortingKey, &info.PartitionKey, &info.Comment); err != nil {
			return info, false, fmt.Errorf("look up ClickHouse table %s.%s: %w", database, table, err)
		}
		ok = true
	}
	if err := rows.Err(); err != nil {
		return info, false, fmt.Errorf("look up ClickHouse table %s.%s: %w", database, table, err)
	}
	return info, ok, nil
}

// ReadColumns reads the columns of table of database from system.columns,
// in order; none when there is no such table.
func ReadColumns(ctx context.Context, conn Querier, database, table string) ([]ExistingColumn, error) {
	byTable, err := readColumns(catalogParams(ctx, database, table), conn,
		"SELECT table, name, type, is_in_sorting_key, is_in_partition_key, comment FROM system.columns WHERE database = {db:String} AND table = {tbl:String} ORDER BY position")
	if err != nil {
		return nil, fmt.Errorf("read the columns of ClickHouse table %s.%s: %w", database, table, err)
	}
	return byTable[table], nil
}

// ReadDatabaseColumns reads the columns of every table of database from
// system.columns, each table's in order, in one query.
func ReadDatabaseColumns(ctx context.Context, conn Querier, database string) (map[string][]ExistingColumn, error) {
	byTable, err := readColumns(catalogParams(ctx, database, ""), conn,
		"SELECT table, name, type, is_in_sorting_key, is_in_partition_key, comment FROM system.columns WHERE database = {db:String} ORDER BY table, position")
	if err != nil {
		return nil, fmt.Errorf("read the columns of ClickHouse database %s: %w", database, err)
	}
	return byTable, nil
}

func readColumns(ctx context.Context, conn Querier, query string) (map[string][]ExistingColumn, error) {
	rows, err := conn.Query(ctx, query)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string][]ExistingColumn{}
	for rows.Next() {
		var table string
		var inKey, inPartition uint8
		var c ExistingColumn
		if err := rows.Scan(&table, &c.Name, &c.Type, &inKey, &inPartition, &c.Comment); err != nil {
			return nil, err
		}
		c.InSortingKey, c.InPartitionKey = inKey == 1, inPartition == 1
		out[table] = append(out[table], c)
	}
	return out, rows.Err()
}
