package capture

import "testing"

// Tables whose names collided under earlier rules are all captured, each
// under names of its own.
func TestCheckNamesAcceptsFormerCollisions(t *testing.T) {
	cfg := &config{topicPrefix: "wh", publication: "walhouse"}
	tables := []string{
		"public.a__b", "a.b",
		"a__b.c", "a.b__c",
		"a_._b", "a.__b",
		"public._walhouse_sync", "public.walhouse_sync",
		"public.tab\tx", "public.tab_x", "public.tab x",
		"public.new\nline", "public.back\\slash",
	}
	if refused := cfg.checkNames(tables); len(refused) > 0 {
		t.Fatal(refused)
	}
	for _, table := range tables {
		if other, where, clash := cfg.nameClash(table, tables); clash {
			t.Errorf("%q clashes with %q in %s", table, other, where)
		}
	}
}
