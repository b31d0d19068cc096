package chdb

import (
	"fmt"
	"net/url"
	"sort"
	"strconv"
	"strings"
)

// requestParams is what a request's URL parameters ask for, sorted into the
// parts of ClickHouse's HTTP interface that this front implements.
type requestParams struct {
	query          string            // "query": statement text, before the body
	database       string            // "database": current database
	format         string            // "default_format": output format without a FORMAT clause
	params         map[string]string // "param_<name>": server-side query parameters
	settings       map[string]string // every other parameter: ClickHouse settings
	waitEndOfQuery bool              // "wait_end_of_query=1": buffer the whole result before answering
	clientRevision uint64            // "client_protocol_version": Native revision of the hello block
}

// clientOnlyParams are URL parameters the ClickHouse HTTP interface defines
// for the connection rather than the query. They are accepted and ignored:
// there are no users, sessions, quotas or roles in the embedded engine, and
// the front never compresses or buffers differently on request.
var clientOnlyParams = map[string]bool{
	"query_id":                true, // echoed back in X-ClickHouse-Query-Id
	"quota_key":               true,
	"session_id":              true,
	"session_timeout":         true,
	"session_check":           true,
	"close_session":           true,
	"user":                    true,
	"password":                true,
	"role":                    true,
	"stacktrace":              true,
	"buffer_size":             true,
	"enable_http_compression": true, // responses are never compressed
	"http_native_compression_disable_checksumming_on_decompress": true,
}

// unsupportedParams are parameters whose meaning this front cannot honour;
// a request with one is refused rather than silently answered differently.
var unsupportedParams = map[string]string{
	"compress":   "ClickHouse native (LZ4/ZSTD) response compression is not supported by the embedded-engine front; use no compression or clickhouse.CompressionGZIP",
	"decompress": "ClickHouse native (LZ4/ZSTD) request compression is not supported by the embedded-engine front; use no compression or clickhouse.CompressionGZIP",
	// readonly cannot be undone by the same session once set, and the engine
	// has one session shared by all requests.
	"readonly": "the readonly setting cannot be applied per request by the embedded-engine front (its one session is shared)",
}

// parseParams sorts URL parameters. A parameter given twice takes its last
// value, as in ClickHouse.
func parseParams(v url.Values) (requestParams, error) {
	p := requestParams{params: map[string]string{}, settings: map[string]string{}}
	var problems []string
	names := make([]string, 0, len(v))
	for name := range v {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		vals := v[name]
		val := vals[len(vals)-1]
		switch {
		case name == "query":
			p.query = val
		case name == "database":
			p.database = val
		case name == "default_format":
			p.format = val
		case name == "client_protocol_version":
			rev, err := strconv.ParseUint(val, 10, 64)
			if err != nil {
				problems = append(problems, fmt.Sprintf("URL parameter client_protocol_version=%q is not a revision number", val))
				continue
			}
			p.clientRevision = rev
		case name == "wait_end_of_query":
			p.waitEndOfQuery = val == "1" || strings.EqualFold(val, "true")
		case strings.HasPrefix(name, "param_"):
			if len(name) == len("param_") {
				problems = append(problems, "empty query parameter name in URL parameter \"param_\"")
				continue
			}
			p.params[strings.TrimPrefix(name, "param_")] = val
		case clientOnlyParams[name]:
		case unsupportedParams[name] != "":
			if (name == "compress" || name == "decompress") && (val == "0" || strings.EqualFold(val, "false")) {
				continue
			}
			problems = append(problems, fmt.Sprintf("URL parameter %s=%s: %s", name, val, unsupportedParams[name]))
		case !validSettingName(name):
			problems = append(problems, fmt.Sprintf("URL parameter %q is neither a setting nor a known parameter of the HTTP interface", name))
		default:
			p.settings[name] = val
		}
	}
	if len(problems) > 0 {
		return requestParams{}, errorf(CodeBadArguments, strings.Join(problems, "; "))
	}
	return p, nil
}
