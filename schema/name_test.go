package schema

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/walhouse/walhouse/record"
)

func src(schema, table string) record.Source { return record.Source{Schema: schema, Table: table} }

func TestTableNameKeepsOrdinaryNames(t *testing.T) {
	tests := []struct {
		src  record.Source
		want string
	}{
		{src("public", "orders"), "orders"},
		{src("public", "Order Items"), "Order Items"},
		{src("public", "a_b"), "a_b"},
		{src("public", "_b"), "_b"},
		{src("public", "b_"), "b_"},
		{src("public", "walhouse_sync"), "walhouse_sync"},
		{src("public", `we"ird`+"`name\\x"), `we"ird` + "`name\\x"},
		{src("public", "заказы"), "заказы"},
		{src("billing", "invoices"), "billing__invoices"},
		{src("billing", "in__voices"), "billing__in__voices"},
		{src("billing", "_x"), "billing___x"},
		{src("_billing", "x"), "_billing__x"},
		{src("b_illing", "x"), "b_illing__x"},
		{src("Public", "x"), "Public__x"},
		{src("s", "events__2024010112345678"), "s__events__2024010112345678"},
		{src("s", "t__wh0123456789ABCDEF"), "s__t__wh0123456789ABCDEF"}, // upper case: not a hash
		{src("s", "t__wh0123456789abcde"), "s__t__wh0123456789abcde"},   // 15 digits: not a hash
	}
	for _, tc := range tests {
		if got := TableName(tc.src); got != tc.want {
			t.Errorf("TableName(%q.%q) = %q, want %q (unchanged)", tc.src.Schema, tc.src.Table, got, tc.want)
		}
	}
}

func TestTableNameHashesTheRest(t *testing.T) {
	tests := []struct {
		src      record.Source
		readable string // the part before "__wh" and the hash
	}{
		{src("public", "a__b"), "a__b"},
		{src("public", "__"), "__"},
		{src("public", "_walhouse_sync"), "walhouse_sync"},
		{src("public", "_walhouse"), "walhouse"},
		{src("_walhouse", "x"), "walhouse__x"},
		{src("a__b", "c"), "a__b__c"},
		{src("a_", "_b"), "a____b"},
		{src("public", "tab\there"), "tab_here"},
		{src("public", "new\nline"), "new_line"},
		{src("s", "del\x7f"), "s__del_"},
		{src("public", "bad\xffutf8"), "bad_utf8"},
		{src("s", "t__wh0123456789abcdef"), "s__t__wh0123456789abcdef"},
		{src("public", ""), ""},
		{src("", "t"), "__t"},
	}
	for _, tc := range tests {
		got := TableName(tc.src)
		if !hashedLike(got) || got[:len(got)-len(hashMark)-hashDigits] != tc.readable {
			t.Errorf("TableName(%q.%q) = %q, want %q + %q + 16 hex digits", tc.src.Schema, tc.src.Table, got, tc.readable, hashMark)
		}
		if strings.HasPrefix(got, ReservedPrefix) {
			t.Errorf("TableName(%q.%q) = %q starts with the reserved prefix", tc.src.Schema, tc.src.Table, got)
		}
	}
}

// Pairs that collided, or would collide under a careless rule: each pair
// must get two names.
func TestTableNameAdversarialPairs(t *testing.T) {
	pairs := [][2]record.Source{
		{src("public", "a__b"), src("a", "b")},
		{src("a__b", "c"), src("a", "b__c")},
		{src("a_", "_b"), src("a", "__b")},
		{src("a_", "b"), src("a", "_b")},
		{src("public", "_walhouse_sync"), src("public", "walhouse_sync")},
		{src("public", "_walhouse_sync"), src("_walhouse", "sync")},
		{src("public", "tab\tx"), src("public", "tab_x")},
		{src("public", "x"), src("Public", "x")},
		{src("public", "a__b"), src("public", "a__b__wh"+TableName(src("public", "a__b"))[len("a__b__wh"):])},
		{src("s", "t"), src("public", "s__t")},
		// A table named exactly like another table's hashed name.
		{src("public", "a__b"), src("a", "b__wh"+TableName(src("public", "a__b"))[len("a__b__wh"):])},
	}
	for _, p := range pairs {
		a, b := TableName(p[0]), TableName(p[1])
		if a == b {
			t.Errorf("%q.%q and %q.%q both map to %q", p[0].Schema, p[0].Table, p[1].Schema, p[1].Table, a)
		}
	}
}

// Every pair of names built from a small alphabet that is rich in the
// characters the rules turn on gets two names.
func TestTableNameInjectiveOnSmallNames(t *testing.T) {
	alphabet := []string{"", "a", "_", "__", "b_", "_walhouse", "public", "\t", "__wh0123456789abcdef"}
	seen := map[string]record.Source{}
	for _, s1 := range alphabet {
		for _, s2 := range alphabet {
			for _, t1 := range alphabet {
				for _, t2 := range alphabet {
					s := src(s1+s2, t1+t2)
					if s.Schema == "" || s.Table == "" {
						continue // PostgreSQL has no empty names
					}
					name := TableName(s)
					if other, ok := seen[name]; ok && other != s {
						t.Fatalf("%q.%q and %q.%q both map to %q", other.Schema, other.Table, s.Schema, s.Table, name)
					}
					seen[name] = s
				}
			}
		}
	}
}

func TestTableNameFitsClickHouse(t *testing.T) {
	long := strings.Repeat("é", 31) // 62 bytes, the most a PostgreSQL name holds
	for _, s := range []record.Source{
		src("public", long),
		src(long, long),
		src(strings.Repeat("x", 63), strings.Repeat("y", 63)),
		src(strings.Repeat("-", 63), strings.Repeat("-", 63)),
	} {
		name := TableName(s)
		if escapedLen(name) > MaxNameBytes || !utf8.ValidString(name) {
			t.Errorf("TableName(%q.%q) = %q: %d bytes escaped (at most %d), valid UTF-8 %v", s.Schema, s.Table, name, escapedLen(name), MaxNameBytes, utf8.ValidString(name))
		}
	}
	// The longest ASCII names still fit as they are.
	s := src(strings.Repeat("x", 63), strings.Repeat("y", 63))
	if got, want := TableName(s), LegacyTableName(s); got != want {
		t.Errorf("TableName of a 128-byte ASCII name = %q, want it unchanged", got)
	}
}

func TestSourceComment(t *testing.T) {
	tests := []struct {
		src  record.Source
		want string
	}{
		{src("public", "orders"), `walhouse:source="public"."orders"`},
		{src(`a"b`, "c.d"), `walhouse:source="a""b"."c.d"`},
		{src("a.b", "c"), `walhouse:source="a.b"."c"`},
	}
	for _, tc := range tests {
		got := SourceComment(tc.src)
		if got != tc.want {
			t.Errorf("SourceComment(%q.%q) = %q, want %q", tc.src.Schema, tc.src.Table, got, tc.want)
		}
		if owner, ok := CommentOwner(got); !ok || sourceCommentPrefix+owner != got {
			t.Errorf("CommentOwner(%q) = %q, %v", got, owner, ok)
		}
	}
	if SourceComment(src("a.b", "c")) == SourceComment(src("a", "b.c")) {
		t.Error("the comments of a.b.c split two ways are equal")
	}
	if _, ok := CommentOwner("walhouse:attnum=3,lsn=0/1"); ok {
		t.Error("a column comment read as a source comment")
	}
}
