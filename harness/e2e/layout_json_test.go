package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/walhouse/walhouse/harness/testenv"
	"github.com/walhouse/walhouse/schema"
)

// TestIntegrationLayoutJSON loads a table whose layout stores a jsonb and
// a json column as ClickHouse's JSON type, through the copy and the
// stream. Their values equal PostgreSQL's, compared by value as the JSON
// type holds them (keys with null values are no path, so they are left
// out of both sides). A value the type cannot take as it is (a jsonb
// array at the top level, a json object with a key twice) goes to the
// dead letters, and the stream goes on; an unchanged TOASTed payload is
// read back from ClickHouse. The json column then becomes
// jsonb in PostgreSQL: the override stays, and later changes load (and the
// row whose json had a key twice, copied again as jsonb). The
// query API reads the paths in columns, filters and groupBy.
func TestIntegrationLayoutJSON(t *testing.T) {
	p := newPipeline(t)
	table, qt := p.table("jsontype", `(tenant_id text, id int, payload jsonb, doc json, PRIMARY KEY (tenant_id, id))`)
	p.exec(fmt.Sprintf(`INSERT INTO %s SELECT 't' || (i %% 2), i,
		CASE WHEN i %% 10 = 0 THEN NULL ELSE jsonb_build_object('customer', jsonb_build_object('id', i %% 7, 'name', 'c' || (i %% 7)), 'status', (ARRAY['new', 'paid', 'sent'])[1 + i %% 3], 'tags', jsonb_build_array('a', i), 'note', NULL, 'amount', i * 0.5) END,
		json_build_object('n', i, 'deep', json_build_object('x', json_build_object('y', i * 2)))
		FROM generate_series(1, 60) i`, qt))

	capture, sink := p.startJSONLayout(table)

	p.exec(fmt.Sprintf(`UPDATE %s SET payload = jsonb_set(payload, '{status}', '"refunded"') WHERE id %% 4 = 1 AND payload IS NOT NULL`, qt))
	p.exec(fmt.Sprintf(`UPDATE %s SET payload = '{}' WHERE id = 3`, qt))
	p.exec(fmt.Sprintf(`INSERT INTO %s VALUES ('t0', 1000, '[1, 2]', '{}')`, qt))           // not an object: a dead letter
	p.exec(fmt.Sprintf(`INSERT INTO %s VALUES ('t0', 1001, '{}', '{"a": 1, "a": 2}')`, qt)) // json keeps both keys: a dead letter
	p.exec(fmt.Sprintf(`INSERT INTO %s VALUES ('t1', 1002, '{"customer": {"id": 99}, "big": 18446744073709551615}', NULL)`, qt))
	// A payload PostgreSQL keeps out of line (TOAST); once it is loaded, a
	// change of doc alone carries no payload, which the sink reads back
	// from ClickHouse.
	p.exec(fmt.Sprintf(`INSERT INTO %s SELECT 't0', 1003, jsonb_build_object('blob', string_agg(md5(g::text), ''), 'customer', jsonb_build_object('id', 5)), '{"v": 1}' FROM generate_series(1, 400) g`, qt))
	ls := p.waitDeadLetters(p.prefix+"-dlq", 2, capture, sink)
	var keys []string
	for _, l := range ls {
		keys = append(keys, l.Key)
		if !strings.Contains(l.Error, "not an object") && !strings.Contains(l.Error, "path a is given twice") {
			t.Errorf("dead letter %+v; want one whose value the JSON type cannot hold", l)
		}
	}
	slices.Sort(keys)
	if len(keys) != 2 || !strings.Contains(keys[0], `"1000"`) || !strings.Contains(keys[1], `"1001"`) {
		t.Errorf("dead letters of %v; want the rows 1000 and 1001", keys)
	}
	pgQuery := fmt.Sprintf(`SELECT tenant_id, id::text, coalesce(payload::text, 'NULL'), coalesce(doc::text, 'NULL') FROM %s AS t WHERE id NOT IN (1000, 1001) ORDER BY t.tenant_id, t.id`, qt)
	chQuery := fmt.Sprintf("SELECT tenant_id, toString(id), ifNull(toString(payload), 'NULL'), ifNull(toString(doc), 'NULL') FROM `%s`.`%s` FINAL WHERE _is_deleted = 0 ORDER BY tenant_id, id", p.database, table)
	p.convergeBy(90*time.Second, jsonCellsDiffer(2, 3), pgQuery, chQuery, capture, sink)

	want := map[string]string{"payload": "Nullable(JSON)", "doc": "Nullable(JSON)"}
	p.checkColumnTypes(table, want)
	p.exec(fmt.Sprintf(`UPDATE %s SET doc = jsonb_build_object('v', id)::json WHERE tenant_id = 't0' AND id NOT IN (1000, 1001)`, qt)) // 1003 among rows whose payload the update carries
	p.convergeBy(90*time.Second, jsonCellsDiffer(2, 3), pgQuery, chQuery, capture, sink)

	// The json column becomes jsonb: the override holds it still. The
	// rewrite copies the table again, and row 1001's doc, jsonb now, keeps
	// its last key alone: the row loads.
	p.exec(fmt.Sprintf(`ALTER TABLE %s ALTER COLUMN doc TYPE jsonb USING doc::jsonb`, qt))
	p.exec(fmt.Sprintf(`UPDATE %s SET doc = jsonb_build_object('n', id, 'after', true) WHERE id %% 5 = 0`, qt))
	pgQuery = strings.Replace(pgQuery, "NOT IN (1000, 1001)", "<> 1000", 1)
	p.convergeBy(90*time.Second, jsonCellsDiffer(2, 3), pgQuery, chQuery, capture, sink)
	p.checkColumnTypes(table, want)

	p.checkJSONPathReads(table)

	// walhouse verify compares the JSON columns by value: no difference
	// once the row that never loaded is gone from PostgreSQL too.
	p.exec(fmt.Sprintf(`DELETE FROM %s WHERE id = 1000`, qt))
	p.convergeBy(90*time.Second, jsonCellsDiffer(2, 3), strings.Replace(pgQuery, "id <> 1000", "true", 1), chQuery, capture, sink)
	out, err := exec.Command(walhouseBin, "verify", "--pg", p.env.PG, "--clickhouse", p.env.ClickHouse, "--database", p.database,
		"--tables", "public."+table, "--load-wait", "90s").CombinedOutput()
	if err != nil {
		t.Errorf("walhouse verify of the JSON columns: %v\n%s", err, out)
	}
}

// startJSONLayout starts capture and a sink on table with a layout that
// stores its payload and doc columns as ClickHouse's JSON type.
func (p *pipeline) startJSONLayout(table string) (capture, sink *testenv.Proc) {
	p.t.Helper()
	file := filepath.Join(p.t.TempDir(), "walhouse.yaml")
	cfg := fmt.Sprintf("layout:\n  public.%s:\n    columns:\n      payload: {type: JSON}\n      doc: {type: JSON}\n", table)
	if err := os.WriteFile(file, []byte(cfg), 0o600); err != nil {
		p.t.Fatal(err)
	}
	capture = p.runCapture(append([]string{"--config", file}, p.captureArgs([]string{table})...))
	return capture, testenv.Start(p.t, "sink", walhouseBin, append([]string{"--config", file}, p.sinkArgs()...)...)
}

// checkColumnTypes fails the test unless the ClickHouse table's columns
// named in want have those types.
func (p *pipeline) checkColumnTypes(table string, want map[string]string) {
	p.t.Helper()
	for name, typ := range want {
		var got string
		q := fmt.Sprintf("SELECT type FROM system.columns WHERE database = %s AND table = %s AND name = %s", schema.QuoteString(p.database), schema.QuoteString(table), schema.QuoteString(name))
		if err := p.ch.QueryRow(context.Background(), q).Scan(&got); err != nil || got != typ {
			p.t.Errorf("column %s is %q (%v), want %s", name, got, err, typ)
		}
	}
}

// checkJSONPathReads reads the table's paths through the query API, in
// process: a filter on a number and on text, a path among the columns,
// a group by a path, and the whole column as an object.
func (p *pipeline) checkJSONPathReads(table string) {
	t := p.t
	t.Helper()
	url, secret := p.queryAPI("t1", table)
	ask := func(body string) []map[string]any {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader([]byte(body)))
		req.Header.Set("Authorization", "Bearer "+secret)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out struct {
			Data []map[string]any `json:"data"`
		}
		dec := json.NewDecoder(resp.Body)
		dec.UseNumber()
		if err := dec.Decode(&out); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("query %s: %s, %v", body, resp.Status, err)
		}
		return out.Data
	}
	// Rows of t1 (odd ids) whose customer id is 3: ids 3 (payload {}), 17, 31, 45, 59.
	rows := ask(`{"columns":["id","payload.customer.id","payload.customer.name","payload"],"filters":[{"column":"payload.customer.id","op":"=","value":3}]}`)
	var ids []string
	for _, r := range rows {
		ids = append(ids, fmt.Sprint(r["id"]))
		if r["payload.customer.id"] != "3" || r["payload.customer.name"] != "c3" {
			t.Errorf("row %v: paths %v and %v, want \"3\" and \"c3\"", r["id"], r["payload.customer.id"], r["payload.customer.name"])
		}
		if obj, ok := r["payload"].(map[string]any); !ok || obj["customer"] == nil {
			t.Errorf("row %v: payload %#v, want the object", r["id"], r["payload"])
		}
	}
	if got := strings.Join(ids, ","); got != "17,31,45,59" {
		t.Errorf("ids with payload.customer.id = 3: %s, want 17,31,45,59", got)
	}
	groups := ask(`{"groupBy":["payload.status"],"aggregates":[{"fn":"count","as":"n"}],"filters":[{"column":"payload.status","op":"prefix","value":"re"}]}`)
	if len(groups) != 1 || groups[0]["payload.status"] != "refunded" {
		t.Errorf("groups by payload.status starting re: %v, want one, refunded", groups)
	}
	big := ask(`{"columns":["id"],"filters":[{"column":"payload.customer.id","op":">","value":50}]}`)
	if len(big) != 1 || fmt.Sprint(big[0]["id"]) != "1002" {
		t.Errorf("payload.customer.id > 50: %v, want the row 1002", big)
	}
}

// jsonCellsDiffer compares rows cell by cell as convergeBy's describe,
// the cells at cols as JSON values: equal when they hold the same paths
// with the same values, null values and empty objects being no path in
// ClickHouse's JSON type.
func jsonCellsDiffer(cols ...int) func(want, got [][]string) string {
	norm := func(rows [][]string) [][]string {
		out := make([][]string, len(rows))
		for i, r := range rows {
			out[i] = slices.Clone(r)
			for _, c := range cols {
				if c < len(r) && r[c] != "NULL" {
					out[i][c] = canonicalJSON(r[c])
				}
			}
		}
		return out
	}
	return func(want, got [][]string) string { return diff(joinCells(norm(want)), joinCells(norm(got))) }
}

// canonicalJSON writes a JSON text with sorted keys, without null values
// and empty objects, numbers as float64: "!" and the text when it does
// not parse.
func canonicalJSON(s string) string {
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		return "!" + s
	}
	v = dropNulls(v)
	b, _ := json.Marshal(v)
	return string(b)
}

func dropNulls(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			e = dropNulls(e)
			if m, ok := e.(map[string]any); e == nil || ok && len(m) == 0 {
				delete(x, k)
				continue
			}
			x[k] = e
		}
	case []any:
		for i, e := range x {
			x[i] = dropNulls(e)
		}
	}
	return v
}

// TestIntegrationLayoutJSONRefusedValues: values PostgreSQL takes and
// ClickHouse's JSON type refuses — objects nested deeper than it reads,
// arrays as deep, and a json text with half a surrogate pair — go to the
// dead letters with their reason instead of failing every insert of the
// table (which stalled it: the server refuses the whole insert); the rows
// around them load, and each loads once a later change makes it
// readable.
func TestIntegrationLayoutJSONRefusedValues(t *testing.T) {
	p := newPipeline(t)
	table, qt := p.table("jsonrefused", `(tenant_id text, id int, payload jsonb, doc json, PRIMARY KEY (tenant_id, id))`)
	p.exec(fmt.Sprintf(`INSERT INTO %s SELECT 't', i, jsonb_build_object('n', i), json_build_object('n', i) FROM generate_series(1, 20) i`, qt))
	capture, sink := p.startJSONLayout(table)

	p.exec(fmt.Sprintf(`INSERT INTO %s VALUES ('t', 100, (repeat('{"a":', 1500) || '1' || repeat('}', 1500))::jsonb, '{}')`, qt))
	p.exec(fmt.Sprintf(`INSERT INTO %s VALUES ('t', 101, ('{"x":' || repeat('[', 1200) || repeat(']', 1200) || '}')::jsonb, '{}')`, qt))
	p.exec(fmt.Sprintf(`INSERT INTO %s VALUES ('t', 102, '{}', '{"x": "\ud800"}')`, qt))
	p.exec(fmt.Sprintf(`INSERT INTO %s VALUES ('t', 103, '{"after": 1}', '{"after": 1}')`, qt))
	ls := p.waitDeadLetters(p.prefix+"-dlq", 3, capture, sink)
	var got []string
	for _, l := range ls {
		got = append(got, l.Key)
		if !strings.Contains(l.Error, "nest more than 1000 deep") && !strings.Contains(l.Error, "half a surrogate pair") {
			t.Errorf("dead letter %+v; want one whose value ClickHouse's JSON type cannot read", l)
		}
	}
	slices.Sort(got)
	if len(got) != 3 || !strings.Contains(got[0], `"100"`) || !strings.Contains(got[1], `"101"`) || !strings.Contains(got[2], `"102"`) {
		t.Errorf("dead letters of %v; want the rows 100, 101 and 102", got)
	}
	pgQuery := fmt.Sprintf(`SELECT tenant_id, id::text, coalesce(payload::text, 'NULL'), coalesce(doc::text, 'NULL') FROM %s AS t WHERE id NOT IN (100, 101, 102) ORDER BY t.tenant_id, t.id`, qt)
	chQuery := fmt.Sprintf("SELECT tenant_id, toString(id), ifNull(toString(payload), 'NULL'), ifNull(toString(doc), 'NULL') FROM `%s`.`%s` FINAL WHERE _is_deleted = 0 ORDER BY tenant_id, id", p.database, table)
	p.convergeBy(90*time.Second, jsonCellsDiffer(2, 3), pgQuery, chQuery, capture, sink)

	// Their next change loads them.
	p.exec(fmt.Sprintf(`UPDATE %s SET payload = jsonb_build_object('fixed', id), doc = json_build_object('fixed', id) WHERE id IN (100, 101, 102)`, qt))
	p.convergeBy(90*time.Second, jsonCellsDiffer(2, 3), strings.Replace(pgQuery, "id NOT IN (100, 101, 102)", "true", 1), chQuery, capture, sink)
}
