package clickhouse

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/walhouse/walhouse/schema"
)

// minJSONVersion is the first ClickHouse release whose JSON type is
// generally available (25.3: no experimental setting to create a column
// of it, and Nullable(JSON), which every column outside the key is, since
// 25.1).
var minJSONVersion = [2]int{25, 3}

// checkJSONSupport refuses, at the sink's start, layouts that override a
// column as JSON when the server, of version (version()'s text), is
// older than minJSONVersion: each table's CREATE would fail later, one by
// one, with an error that does not say why.
func checkJSONSupport(version string, layouts map[string]schema.Layout) error {
	var uses []string
	for _, table := range slices.Sorted(maps.Keys(layouts)) {
		l := layouts[table]
		for _, col := range slices.Sorted(maps.Keys(l.Columns)) {
			if l.Columns[col].Type == "JSON" {
				uses = append(uses, table+"."+col)
			}
		}
	}
	if len(uses) == 0 {
		return nil
	}
	major, minor, ok := parseVersion(version)
	if !ok {
		return fmt.Errorf("ClickHouse's version %q is not MAJOR.MINOR…; the JSON overrides of %s need ClickHouse %d.%d or later", version, strings.Join(uses, ", "), minJSONVersion[0], minJSONVersion[1])
	}
	if major < minJSONVersion[0] || major == minJSONVersion[0] && minor < minJSONVersion[1] {
		return fmt.Errorf("ClickHouse %s has no generally available JSON type, which the layout overrides of %s need: upgrade ClickHouse to %d.%d or later, or override these columns as String (or remove the overrides: json and jsonb are then stored as their text)",
			version, strings.Join(uses, ", "), minJSONVersion[0], minJSONVersion[1])
	}
	return nil
}

// parseVersion reads the major and minor numbers of version()'s text
// ("26.7.2.1").
func parseVersion(v string) (major, minor int, ok bool) {
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return 0, 0, false
	}
	major, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(parts[1])
	return major, minor, err1 == nil && err2 == nil
}

// checkServerForLayouts reads the server's version when a layout needs a
// feature of some versions only (the JSON type), and refuses what the
// server cannot hold.
func checkServerForLayouts(ctx context.Context, conn driver.Conn, layouts map[string]schema.Layout) error {
	if !usesJSON(layouts) {
		return nil // no query: most sinks have no JSON override
	}
	var version string
	if err := conn.QueryRow(ctx, "SELECT version()").Scan(&version); err != nil {
		return fmt.Errorf("read ClickHouse's version, which the layouts' JSON overrides depend on: %w", err)
	}
	return checkJSONSupport(version, layouts)
}

func usesJSON(layouts map[string]schema.Layout) bool {
	for _, l := range layouts {
		for _, c := range l.Columns {
			if c.Type == "JSON" {
				return true
			}
		}
	}
	return false
}
