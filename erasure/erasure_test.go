package erasure

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/walhouse/walhouse/record"
)

func testKeys(t *testing.T, secret string) Keys {
	t.Helper()
	k, err := NewKeys([]byte(secret))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestNewKeysRefusesShortSecrets(t *testing.T) {
	if _, err := NewKeys([]byte("short")); err == nil {
		t.Fatal("a 5-byte secret was accepted")
	}
}

func TestHashSeparatesFields(t *testing.T) {
	k := testKeys(t, "0123456789abcdef0123")
	base := Subject{Tenant: "acme", Schema: "public", Table: "orders", Column: "customer_id", Value: "42"}
	seen := map[Hash]string{k.Hash(base): "base"}
	for name, s := range map[string]Subject{
		"tenant":          {Tenant: "acme2", Schema: "public", Table: "orders", Column: "customer_id", Value: "42"},
		"shifted":         {Tenant: "acm", Schema: "epublic", Table: "orders", Column: "customer_id", Value: "42"},
		"table":           {Tenant: "acme", Schema: "public", Table: "orders2", Column: "customer_id", Value: "42"},
		"value":           {Tenant: "acme", Schema: "public", Table: "orders", Column: "customer_id", Value: "43"},
		"column":          {Tenant: "acme", Schema: "public", Table: "orders", Column: "customer", Value: "_id42"},
		"empty tenant":    {Schema: "public", Table: "orders", Column: "customer_id", Value: "42"},
		"value in tenant": {Tenant: "acme42", Schema: "public", Table: "orders", Column: "customer_id"},
	} {
		h := k.Hash(s)
		if prev, dup := seen[h]; dup {
			t.Errorf("%s hashes like %s", name, prev)
		}
		seen[h] = name
	}
	if h1, h2 := k.Hash(base), k.Hash(base); h1 != h2 {
		t.Error("the hash is not deterministic")
	}
	if testKeys(t, "another secret of 20b").Hash(base) == k.Hash(base) {
		t.Error("two keys give the same hash")
	}
	if h, err := ParseHash(k.Hash(base).String()); err != nil || h != k.Hash(base) {
		t.Errorf("ParseHash(String()) = %v, %v", h, err)
	}
}

func TestManifestSignAndVerify(t *testing.T) {
	k := testKeys(t, "0123456789abcdef0123")
	m := Manifest{ID: "era_1", Tenant: "acme", Column: "customer_id", SubjectHMAC: "ab",
		Tables: []TableResult{{Table: "orders", Source: "public.orders", Removed: 3}}, AsOfLSN: 0x16B374D848, Verified: true,
		RequestedBy: "cli", StartedAt: time.Unix(1, 0).UTC(), FinishedAt: time.Unix(2, 0).UTC()}
	if err := k.Sign(&m); err != nil {
		t.Fatal(err)
	}
	good, _ := json.MarshalIndent(m, "", "  ")
	if got, err := VerifyManifest(good, k.PublicKey()); err != nil || got.Tables[0].Removed != 3 || got.AsOfLSN != m.AsOfLSN {
		t.Fatalf("VerifyManifest(signed) = %+v, %v", got, err)
	}
	other := testKeys(t, "another secret of 20b")
	for name, tc := range map[string]struct {
		data []byte
		key  []byte
	}{
		"altered count":  {bytes.Replace(good, []byte(`"versionsRemoved": 3`), []byte(`"versionsRemoved": 4`), 1), k.PublicKey()},
		"altered tenant": {bytes.Replace(good, []byte(`"acme"`), []byte(`"acmf"`), 1), k.PublicKey()},
		"extra field":    {bytes.Replace(good, []byte(`{`), []byte(`{"note": "x",`), 1), k.PublicKey()},
		"other key":      {good, other.PublicKey()},
	} {
		if _, err := VerifyManifest(tc.data, tc.key); err == nil {
			t.Errorf("%s: verified", name)
		}
	}
	// Re-signed by another key, it names that key: refused for ours.
	m2 := m
	if err := other.Sign(&m2); err != nil {
		t.Fatal(err)
	}
	resigned, _ := json.Marshal(m2)
	if _, err := VerifyManifest(resigned, k.PublicKey()); !errors.Is(err, ErrBadSignature) {
		t.Errorf("a manifest signed by another key: err %v, want ErrBadSignature", err)
	}
}

func TestLedgerErased(t *testing.T) {
	k := testKeys(t, "0123456789abcdef0123")
	l, err := NewLedger(LedgerConfig{Conn: nopConn{}, Database: "db", Keys: &k})
	if err != nil {
		t.Fatal(err)
	}
	sub := Subject{Tenant: "acme", Schema: "public", Table: "orders", Column: "customer_id", Value: "42"}
	l.snap.Store(&snapshot{entries: 1, tables: map[sourceKey][]columnEntries{
		{"public", "orders"}: {{column: "customer_id", subjects: map[Hash]record.LSN{k.Hash(sub): 1000}}},
	}})
	cols := []record.Column{{Name: "tenant_id", Type: "text", Key: true}, {Name: "id", Type: "int8", Key: true}, {Name: "customer_id", Type: "int8"}}
	rec := func(tenant, table, customer string, commit record.LSN, null bool) *record.Record {
		return &record.Record{TenantID: tenant, Source: record.Source{Schema: "public", Table: table}, CommitLSN: commit, Columns: cols,
			Values: []record.Value{{Text: tenant}, {Text: "1"}, {Text: customer, Null: null}}}
	}
	for _, tc := range []struct {
		name string
		r    *record.Record
		want bool
	}{
		{"the subject, before the erasure", rec("acme", "orders", "42", 999, false), true},
		{"the subject, at the as-of LSN", rec("acme", "orders", "42", 1000, false), true},
		{"the subject, committed after the erasure", rec("acme", "orders", "42", 1001, false), false},
		{"another subject", rec("acme", "orders", "43", 10, false), false},
		{"the same value in another tenant", rec("globex", "orders", "42", 10, false), false},
		{"another table", rec("acme", "invoices", "42", 10, false), false},
		{"a null subject column", rec("acme", "orders", "42", 10, true), false},
		{"a snapshot row (copied before the erasure)", rec("acme", "orders", "42", 0, false), true},
		{"another row of the erased row's key", rec("acme", "orders", "43", 999, false), false},
	} {
		if got := l.Erased(tc.r); got != tc.want {
			t.Errorf("%s: Erased = %v, want %v", tc.name, got, tc.want)
		}
	}
	del := func(id string, commit record.LSN) *record.Record {
		return &record.Record{TenantID: "acme", TenantColumn: "tenant_id", Source: record.Source{Schema: "public", Table: "orders"}, CommitLSN: commit, Columns: cols[:2], Values: []record.Value{{Text: "acme"}, {Text: id}}}
	}
	if l.Erased(del("1", 5)) {
		t.Error("a delete of a row whose key is not in the ledger was taken for the subject's")
	}
	// The row with id 1 was the subject's: its delete, which carries only
	// the key, is recognised by the key.
	rowKey := Subject{Tenant: "acme", Schema: "public", Table: "orders", Column: RowKey, Value: KeyValue([]string{"1"})}
	s := l.snap.Load()
	s.tables[sourceKey{"public", "orders"}] = append(s.tables[sourceKey{"public", "orders"}], columnEntries{column: RowKey, subjects: map[Hash]record.LSN{k.Hash(rowKey): 1000}})
	if !l.Erased(del("1", 5)) {
		t.Error("the delete of an erased row was not recognised by its key")
	}
	if l.Erased(del("1", 1001)) || l.Erased(del("2", 5)) {
		t.Error("a later delete of the key, or another key, was taken for the erased row's")
	}
	if KeyValue([]string{"1", "23"}) == KeyValue([]string{"12", "3"}) {
		t.Error("KeyValue does not separate the values")
	}
	empty, _ := NewLedger(LedgerConfig{Conn: nopConn{}, Database: "db"})
	if empty.Erased(rec("acme", "orders", "42", 1, false)) {
		t.Error("a ledger never read erased a record")
	}
}

func TestParseOwnerAndKey(t *testing.T) {
	for in, want := range map[string]sourceKey{
		`"public"."orders"`:    {"public", "orders"},
		`"odd"".s"."t.x"`:      {`odd".s`, "t.x"},
		`"public"."orders"x`:   {},
		`public.orders`:        {},
		`"public"."unfinished`: {},
	} {
		got, ok := parseOwner(in)
		if got != want || ok != (want != sourceKey{}) {
			t.Errorf("parseOwner(%s) = %v, %v; want %v", in, got, ok, want)
		}
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
