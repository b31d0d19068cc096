package record

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// labelled returns sample with enum labels on its status column.
func labelled(labels ...string) *Record {
	r := sample()
	r.Columns[5].Labels = labels
	r.SchemaID = SchemaID(r.TenantColumn, r.Columns)
	return r
}

// TestLabelsRoundTrip: an enum column's labels reach the sink in PostgreSQL's
// order, in a version 1 record and through a registry entry, and are part
// of the schema's identity (a label added later is a new schema).
func TestLabelsRoundTrip(t *testing.T) {
	r := labelled("new", `paid "in full"`, "ünïcode", "")
	var schemas SchemaSet
	s, err := DecodeSchema(Schema{TenantColumn: r.TenantColumn, Columns: r.Columns}.AppendJSON(nil))
	if err != nil {
		t.Fatalf("DecodeSchema: %v", err)
	}
	if !reflect.DeepEqual(s.Columns[5].Labels, r.Columns[5].Labels) {
		t.Fatalf("registry entry labels = %q, want %q", s.Columns[5].Labels, r.Columns[5].Labels)
	}
	schemas.Add(s)
	for _, version := range []int{1, 2} {
		got, err := Decode(AppendJSONVersion(nil, r, version), &schemas)
		if err != nil {
			t.Fatalf("version %d: %v", version, err)
		}
		if !reflect.DeepEqual(got.Columns[5].Labels, r.Columns[5].Labels) {
			t.Errorf("version %d: labels = %q, want %q", version, got.Columns[5].Labels, r.Columns[5].Labels)
		}
	}
	unlabelled := sample()
	if SchemaID(r.TenantColumn, r.Columns) == SchemaID(unlabelled.TenantColumn, unlabelled.Columns) {
		t.Error("labels do not change the schema id")
	}
	added := labelled("new", `paid "in full"`, "ünïcode", "", "refunded")
	if SchemaID(r.TenantColumn, r.Columns) == SchemaID(added.TenantColumn, added.Columns) {
		t.Error("an added label does not change the schema id")
	}
}

// TestValidateLabels: labels only on single enum columns, each once.
func TestValidateLabels(t *testing.T) {
	for _, tc := range []struct {
		name string
		col  Column
		ok   bool
	}{
		{"enum", Column{Name: "s", Type: "mood", Enum: true, TypMod: -1, Labels: []string{"a", "b"}}, true},
		{"enum without labels", Column{Name: "s", Type: "mood", Enum: true, TypMod: -1}, true},
		{"text", Column{Name: "s", Type: "text", TypMod: -1, Labels: []string{"a"}}, false},
		{"enum array", Column{Name: "s", Type: "mood", Enum: true, Array: true, TypMod: -1, Labels: []string{"a"}}, false},
		{"a label twice", Column{Name: "s", Type: "mood", Enum: true, TypMod: -1, Labels: []string{"a", "b", "a"}}, false},
		{"too many", Column{Name: "s", Type: "mood", Enum: true, TypMod: -1, Labels: manyLabels(MaxEnumLabels + 1)}, false},
	} {
		err := ValidateColumns("", []Column{{Name: "id", Type: "int8", Key: true, TypMod: -1}, tc.col})
		if (err == nil) != tc.ok {
			t.Errorf("%s: ValidateColumns = %v, want ok %v", tc.name, err, tc.ok)
		}
	}
}

func manyLabels(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprint(i)
	}
	return out
}

// TestLabelsWithinBudget: a registry entry or a version 1 record with more
// enum labels than a column (MaxEnumLabels) or a schema (MaxSchemaLabels)
// may have is refused with ErrOverBudget, before the labels are kept.
func TestLabelsWithinBudget(t *testing.T) {
	enumCol := func(i, n int) Column {
		return Column{Name: fmt.Sprintf("e%d", i), Type: "mood", Enum: true, TypMod: -1, Labels: manyLabels(n)}
	}
	key := Column{Name: "id", Type: "int8", Key: true, TypMod: -1}
	for _, tc := range []struct {
		name string
		cols []Column
		ok   bool
	}{
		{"a full column", []Column{key, enumCol(0, MaxEnumLabels)}, true},
		{"a column over", []Column{key, enumCol(0, MaxEnumLabels+1)}, false},
		{"columns full in all", []Column{key, enumCol(0, MaxEnumLabels), enumCol(1, MaxEnumLabels), enumCol(2, MaxSchemaLabels-2*MaxEnumLabels)}, true},
		{"columns over in all", []Column{key, enumCol(0, MaxEnumLabels), enumCol(1, MaxEnumLabels), enumCol(2, MaxSchemaLabels-2*MaxEnumLabels+1)}, false},
	} {
		entry := Schema{Columns: tc.cols}.AppendJSON(nil)
		_, err := DecodeSchema(entry)
		if tc.ok != (err == nil) || !tc.ok && !errors.Is(err, ErrOverBudget) {
			t.Errorf("%s: DecodeSchema = %v, want ok %v or ErrOverBudget", tc.name, err, tc.ok)
		}
		r := sample()
		r.TenantColumn, r.TenantID = "", "acme"
		r.Columns = tc.cols
		r.Values = make([]Value, len(tc.cols))
		r.OldKey = nil
		r.SchemaID = SchemaID("", tc.cols)
		_, err = Decode(AppendJSONVersion(nil, r, 1), &SchemaSet{})
		if !tc.ok && !errors.Is(err, ErrOverBudget) {
			t.Errorf("%s: Decode of a version 1 record = %v, want ErrOverBudget", tc.name, err)
		}
	}
	// The labels of a forged entry, in any case of the field name, and
	// after fields the schema does not have.
	forged := `{"format":1,"schemaId":"x","columns":[{"name":"e","x":"labels","LaBeLs":[` + strings.Repeat(`"",`, MaxEnumLabels) + `""]}]}`
	if _, err := DecodeSchema([]byte(forged)); !errors.Is(err, ErrOverBudget) {
		t.Errorf("forged entry: DecodeSchema = %v, want ErrOverBudget", err)
	}
}

// FuzzDecodeSchema: a registry entry either decodes to a schema that
// encodes back to an entry decoding to the same schema, or is refused;
// never a panic, and never more labels than the budget.
func FuzzDecodeSchema(f *testing.F) {
	r := labelled("new", `paid "in full"`, "shipped")
	f.Add(Schema{TenantColumn: r.TenantColumn, Columns: r.Columns}.AppendJSON(nil))
	f.Add(Schema{TenantColumn: r.TenantColumn, Columns: sample().Columns}.AppendJSON(nil))
	f.Add([]byte(`{"format":1,"schemaId":"x","columns":[{"name":"e","labels":["a",["b"],{"labels":["c"]}]}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := DecodeSchema(data)
		if err != nil {
			return
		}
		total := 0
		for _, c := range s.Columns {
			total += len(c.Labels)
		}
		if total > MaxSchemaLabels {
			t.Fatalf("decoded %d labels, more than %d", total, MaxSchemaLabels)
		}
		again, err := DecodeSchema(s.AppendJSON(nil))
		if err != nil || !again.Same(s) {
			t.Fatalf("re-encoded entry: %v, same %v", err, again.Same(s))
		}
	})
}
