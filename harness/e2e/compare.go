package e2e

import (
	"context"
	"fmt"
	"strings"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/jackc/pgx/v5"
)

// pgRows runs q (every column cast to text) and returns its rows, each
// row's cells joined by " | ".
func pgRows(ctx context.Context, conn *pgx.Conn, q string, args ...any) ([]string, error) {
	cells, err := pgCells(ctx, conn, q, args...)
	return joinCells(cells), err
}

// pgCells runs q and returns its rows cell by cell, each value as text.
func pgCells(ctx context.Context, conn *pgx.Conn, q string, args ...any) ([][]string, error) {
	rows, err := conn.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) ([]string, error) {
		vals, err := r.Values()
		if err != nil {
			return nil, err
		}
		out := make([]string, len(vals))
		for i, v := range vals {
			out[i] = fmt.Sprint(v)
		}
		return out, nil
	})
}

// chRows runs q (every column a String) and returns its rows, each row's
// cells joined by " | ".
func chRows(ctx context.Context, conn driver.Conn, q string, params ch.Parameters) ([]string, error) {
	cells, err := chCells(ctx, conn, q, params)
	return joinCells(cells), err
}

// chCells runs q (every column a String) and returns its rows cell by cell.
func chCells(ctx context.Context, conn driver.Conn, q string, params ch.Parameters) ([][]string, error) {
	rows, err := conn.Query(ch.Context(ctx, ch.WithParameters(params)), q)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out [][]string
	for rows.Next() {
		vals := make([]string, len(rows.Columns()))
		ptrs := make([]any, len(vals))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return nil, err
		}
		out = append(out, vals)
	}
	return out, rows.Err()
}

// joinCells joins each row's cells by " | ", the form diff compares.
func joinCells(cells [][]string) []string {
	if cells == nil {
		return nil
	}
	out := make([]string, len(cells))
	for i, row := range cells {
		out[i] = strings.Join(row, " | ")
	}
	return out
}

// diff describes how got differs from want, or returns "" when equal.
func diff(want, got []string) string {
	if strings.Join(want, "\n") == strings.Join(got, "\n") {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "PostgreSQL has %d rows, ClickHouse %d\n", len(want), len(got))
	for i := 0; i < max(len(want), len(got)); i++ {
		var w, g string
		if i < len(want) {
			w = want[i]
		}
		if i < len(got) {
			g = got[i]
		}
		if w != g {
			fmt.Fprintf(&b, "row %d:\n  pg: %s\n  ch: %s\n", i, w, g)
			if b.Len() > 4000 {
				break
			}
		}
	}
	return b.String()
}
