package clickhouse

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/walhouse/walhouse/schema"
)

// serverVersion is a ClickHouse release by its major and minor numbers,
// which decide the settings and types a server knows.
type serverVersion struct{ major, minor int }

// minServerVersion is the oldest ClickHouse a Writer loads into: every
// insert sets input_format_native_allow_types_conversion (23.3), which an
// older server refuses on every insert (UNKNOWN_SETTING) with an error
// that does not say why. This is the one place the code says it;
// docs/limits.md says it to users.
var minServerVersion = serverVersion{23, 3}

// minJSONVersion is the first ClickHouse release whose JSON type is
// generally available (25.3: no experimental setting to create a column
// of it, and Nullable(JSON), which every column outside the key is, since
// 25.1).
var minJSONVersion = serverVersion{25, 3}

func (v serverVersion) String() string { return fmt.Sprintf("%d.%d", v.major, v.minor) }

// before reports whether v is an older release than o.
func (v serverVersion) before(o serverVersion) bool {
	return v.major < o.major || v.major == o.major && v.minor < o.minor
}

// parseVersion reads the major and minor numbers of version()'s text
// ("26.7.2.1", "23.8.16.42.altinitystable"); the rest is left alone.
func parseVersion(text string) (serverVersion, bool) {
	parts := strings.SplitN(strings.TrimSpace(text), ".", 3)
	if len(parts) < 2 {
		return serverVersion{}, false
	}
	major, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(parts[1])
	if err1 != nil || err2 != nil || major < 0 || minor < 0 {
		return serverVersion{}, false
	}
	return serverVersion{major, minor}, true
}

// checkServer refuses, at a Writer's start, a server of version (version()'s
// text) the Writer cannot load into: one older than minServerVersion, or
// older than minJSONVersion when a layout overrides a column as JSON (each
// table's CREATE would fail later, one by one). A version that is not
// MAJOR.MINOR… is refused too: nothing says the server is recent enough.
func checkServer(version string, layouts map[string]schema.Layout) error {
	v, ok := parseVersion(version)
	if !ok {
		return fmt.Errorf("ClickHouse's version() is %q, not MAJOR.MINOR…, so walhouse cannot tell whether it is %s or later, which the sink's inserts need: run a ClickHouse release of %s or later", version, minServerVersion, minServerVersion)
	}
	if v.before(minServerVersion) {
		return fmt.Errorf("ClickHouse %s is older than %s, which walhouse needs (every insert sets input_format_native_allow_types_conversion, which older servers refuse): upgrade ClickHouse to %s or later", version, minServerVersion, minServerVersion)
	}
	if uses := jsonColumns(layouts); len(uses) > 0 && v.before(minJSONVersion) {
		return fmt.Errorf("ClickHouse %s has no generally available JSON type, which the layout overrides of %s need: upgrade ClickHouse to %s or later, or override these columns as String (or remove the overrides: json and jsonb are then stored as their text)",
			version, strings.Join(uses, ", "), minJSONVersion)
	}
	return nil
}

// checkServerVersion reads the server's version once and refuses, with
// the fix, a server the Writer cannot load into (checkServer).
func checkServerVersion(ctx context.Context, conn driver.Conn, layouts map[string]schema.Layout) error {
	var version string
	if err := conn.QueryRow(ctx, "SELECT version()").Scan(&version); err != nil {
		return fmt.Errorf("read ClickHouse's version, which decides whether the sink can load into it: %w", err)
	}
	return checkServer(version, layouts)
}
