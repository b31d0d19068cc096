package record

import "testing"

// TestSchemaSame: schemas are the same exactly when everything their ID
// hashes is equal, field by field.
func TestSchemaSame(t *testing.T) {
	missing, other := "0", "1"
	base := func() Schema {
		return Schema{TenantColumn: "tenant_id", Columns: []Column{
			{Name: "tenant_id", Type: "text", TypMod: -1, Key: true, Attnum: 1},
			{Name: "n", Type: "numeric", TypMod: 655366, Attnum: 2, Missing: &missing},
		}}
	}
	if !base().Same(base()) {
		t.Fatal("a schema is not the same as its copy")
	}
	for name, change := range map[string]func(*Schema){
		"tenant column": func(s *Schema) { s.TenantColumn = "org" },
		"name":          func(s *Schema) { s.Columns[1].Name = "m" },
		"type":          func(s *Schema) { s.Columns[1].Type = "int8" },
		"enum":          func(s *Schema) { s.Columns[1].Enum = true },
		"array":         func(s *Schema) { s.Columns[1].Array = true },
		"typmod":        func(s *Schema) { s.Columns[1].TypMod = 1 },
		"key":           func(s *Schema) { s.Columns[1].Key = true },
		"attnum":        func(s *Schema) { s.Columns[1].Attnum = 3 },
		"missing value": func(s *Schema) { s.Columns[1].Missing = &other },
		"no missing":    func(s *Schema) { s.Columns[1].Missing = nil },
		"fewer columns": func(s *Schema) { s.Columns = s.Columns[:1] },
		"labels":        func(s *Schema) { s.Columns[1].Labels = []string{"a"} },
	} {
		s := base()
		change(&s)
		if s.Same(base()) || base().Same(s) {
			t.Errorf("%s changed: still the same schema", name)
		}
	}
}
