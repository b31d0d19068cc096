package chdb

import (
	"net/url"
	"reflect"
	"strings"
	"testing"
)

func TestLeadingKeyword(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"SELECT 1", "SELECT"},
		{"  \n\tselect 1", "SELECT"},
		{"-- comment\nINSERT INTO t VALUES (1)", "INSERT"},
		{"# hash comment\nset x = 1", "SET"},
		{"/* a */ /* b */ use db", "USE"},
		{"(SELECT 1)", ""},
		{"", ""},
		{"-- only a comment", ""},
		{"/* unterminated", ""},
		{"SETTINGS", "SETTINGS"},
	} {
		if got := leadingKeyword(tc.in); got != tc.want {
			t.Errorf("leadingKeyword(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestStreamable(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want bool
	}{
		{"SELECT 1", true},
		{"with 1 as x select x", true},
		{" (SELECT 1) UNION ALL (SELECT 2)", true},
		{"INSERT INTO t VALUES (1)", false},
		{"CREATE TABLE t (a UInt8) ENGINE = Memory", false},
		{"SHOW TABLES", false},
		{"DESCRIBE TABLE t", false},
	} {
		if got := streamable(tc.in); got != tc.want {
			t.Errorf("streamable(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func TestSplitInsert(t *testing.T) {
	for _, tc := range []struct {
		name, head         string
		ok                 bool
		stmt, format, data string
	}{
		{name: "clickhouse-go batch", head: "INSERT INTO db.t (a, b) FORMAT Native\n\x01\x02\x00\n\nrest",
			ok: true, stmt: "INSERT INTO db.t (a, b)", format: "Native", data: "\x01\x02\x00\n\nrest"},
		{name: "query parameter alone", head: "INSERT INTO t FORMAT RowBinary",
			ok: true, stmt: "INSERT INTO t", format: "RowBinary", data: ""},
		{name: "lower case, CRLF and trailing spaces", head: "insert into t format CSV  \r\n1,2\n",
			ok: true, stmt: "insert into t", format: "CSV", data: "1,2\n"},
		{name: "data on the same line", head: "INSERT INTO t FORMAT JSONEachRow {\"a\":1}",
			ok: true, stmt: "INSERT INTO t", format: "JSONEachRow", data: "{\"a\":1}"},
		{name: "settings clause kept", head: "INSERT INTO t SETTINGS async_insert=1 FORMAT TSV\n1\n",
			ok: true, stmt: "INSERT INTO t SETTINGS async_insert=1", format: "TSV", data: "1\n"},
		{name: "data mentioning FORMAT", head: "INSERT INTO t FORMAT TSV\nFORMAT Native\n",
			ok: true, stmt: "INSERT INTO t", format: "TSV", data: "FORMAT Native\n"},
		{name: "comment before", head: "-- load\nINSERT INTO t FORMAT CSV\n1\n",
			ok: true, stmt: "INSERT INTO t", format: "CSV", data: "1\n"},
		{name: "values", head: "INSERT INTO t VALUES ('x FORMAT CSV\n')", ok: false},
		{name: "select", head: "SELECT 1 FORMAT CSV\n", ok: false},
		{name: "insert select", head: "INSERT INTO t SELECT 1", ok: false},
		{name: "data right after the name", head: "INSERT INTO t FORMAT CSV,1", ok: true, stmt: "INSERT INTO t", format: "CSV", data: ",1"},
		{name: "no format", head: "INSERT INTO t (a, b)\n", ok: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stmt, format, at, ok := splitInsert(tc.head)
			if ok != tc.ok {
				t.Fatalf("ok = %v, want %v", ok, tc.ok)
			}
			if !ok {
				return
			}
			if stmt != tc.stmt || format != tc.format || tc.head[at:] != tc.data {
				t.Errorf("got (%q, %q, data %q), want (%q, %q, data %q)", stmt, format, tc.head[at:], tc.stmt, tc.format, tc.data)
			}
		})
	}
}

func TestSetStatement(t *testing.T) {
	got := setStatement([]settingChange{{"max_threads", "2"}, {"insert_deduplication_token", `it's \ here`}})
	want := `SET insert_deduplication_token = 'it\'s \\ here', max_threads = '2'`
	if got != want {
		t.Errorf("setStatement = %s, want %s", got, want)
	}
}

func TestQuoting(t *testing.T) {
	if got, want := quoteIdent("we`ird\\db"), "`we\\`ird\\\\db`"; got != want {
		t.Errorf("quoteIdent = %s, want %s", got, want)
	}
	if got, want := quoteString(`a'b\c`), `'a\'b\\c'`; got != want {
		t.Errorf("quoteString = %s, want %s", got, want)
	}
	for name, want := range map[string]bool{"max_threads": true, "custom_x.y": true, "1abc": false, "a;DROP": false, "a b": false, "": false} {
		if got := validSettingName(name); got != want {
			t.Errorf("validSettingName(%q) = %v, want %v", name, got, want)
		}
	}
}

func TestParseError(t *testing.T) {
	for _, tc := range []struct {
		msg  string
		code int
	}{
		{"Code: 60. DB::Exception: Unknown table expression identifier 'nope'. (UNKNOWN_TABLE)", 60},
		{"Code: 395. DB::Exception: boom\n", 395},
		{"while loading: Code: 81. DB::Exception: Database x does not exist. (UNKNOWN_DATABASE)", 81},
		{"something without a code", CodeUnknownException},
		{"Code: 0. odd", CodeUnknownException},
	} {
		e := parseError(tc.msg)
		if e.Code != tc.code {
			t.Errorf("parseError(%q).Code = %d, want %d", tc.msg, e.Code, tc.code)
		}
		if !strings.Contains(e.Error(), "Code: ") || !strings.Contains(e.Error(), strings.TrimSpace(tc.msg)) {
			t.Errorf("parseError(%q).Error() = %q, want the message with a code prefix", tc.msg, e.Error())
		}
	}
	if got, want := errorf(CodeBadArguments, "bad").Error(), "Code: 36. DB::Exception: bad"; got != want {
		t.Errorf("errorf = %q, want %q", got, want)
	}
}

func TestParseParams(t *testing.T) {
	for _, tc := range []struct {
		name    string
		query   string
		want    requestParams
		wantErr string
	}{
		{
			name:  "clickhouse-go defaults",
			query: "database=cdc&default_format=Native&client_protocol_version=54460&query_id=abc",
			want:  requestParams{database: "cdc", format: "Native", clientRevision: 54460, params: map[string]string{}, settings: map[string]string{}},
		},
		{
			name:  "settings and parameters",
			query: "query=INSERT+INTO+t+FORMAT+Native&param_tenant=t1&param_x=%5C%27&insert_deduplication_token=b-1&max_execution_time=30&do_not_merge_across_partitions_select_final=1&async_insert=0",
			want: requestParams{
				query:  "INSERT INTO t FORMAT Native",
				params: map[string]string{"tenant": "t1", "x": `\'`},
				settings: map[string]string{
					"insert_deduplication_token": "b-1", "max_execution_time": "30",
					"do_not_merge_across_partitions_select_final": "1", "async_insert": "0",
				},
			},
		},
		{
			name:  "client-only parameters are ignored",
			query: "user=default&password=x&session_id=s&session_timeout=60&quota_key=q&enable_http_compression=1&compress=0&decompress=false&stacktrace=1&role=r&buffer_size=1",
			want:  requestParams{params: map[string]string{}, settings: map[string]string{}},
		},
		{
			name:  "wait_end_of_query is the front's",
			query: "wait_end_of_query=1&max_result_rows=10",
			want:  requestParams{waitEndOfQuery: true, params: map[string]string{}, settings: map[string]string{"max_result_rows": "10"}},
		},
		{
			name:  "last value wins",
			query: "max_threads=1&max_threads=2",
			want:  requestParams{params: map[string]string{}, settings: map[string]string{"max_threads": "2"}},
		},
		{name: "native compression refused", query: "compress=1", wantErr: "compress=1"},
		{name: "readonly refused", query: "readonly=1", wantErr: "readonly"},
		{name: "bad revision", query: "client_protocol_version=x", wantErr: "client_protocol_version"},
		{name: "bad name", query: "max%3Bthreads=1", wantErr: "neither a setting"},
		{name: "empty parameter name", query: "param_=1", wantErr: "empty query parameter name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, err := url.ParseQuery(tc.query)
			if err != nil {
				t.Fatal(err)
			}
			got, err := parseParams(v)
			if tc.wantErr != "" {
				var ce *Error
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one mentioning %q", err, tc.wantErr)
				}
				if !asError(err, &ce) || ce.Code != CodeBadArguments {
					t.Errorf("err = %#v, want *Error with code %d", err, CodeBadArguments)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("parseParams = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func asError(err error, target **Error) bool {
	e, ok := err.(*Error)
	if ok {
		*target = e
	}
	return ok
}
