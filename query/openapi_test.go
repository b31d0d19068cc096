package query

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestOpenAPIDescribesEverything: every error code the server can answer
// is in /openapi.json with an example; every parameter, request body and
// success answer has an example; and the example reads are valid requests
// that BuildSelect accepts.
func TestOpenAPIDescribesEverything(t *testing.T) {
	type media struct {
		Example  any                            `json:"example"`
		Examples map[string]struct{ Value any } `json:"examples"`
	}
	type operation struct {
		Parameters []struct {
			Name    string `json:"name"`
			Example any    `json:"example"`
		} `json:"parameters"`
		RequestBody *struct {
			Content map[string]media `json:"content"`
		} `json:"requestBody"`
		Responses map[string]struct {
			Content map[string]media `json:"content"`
		} `json:"responses"`
	}
	var doc struct {
		Paths      map[string]map[string]operation `json:"paths"`
		Components struct {
			Schemas struct {
				Error struct {
					Properties struct {
						Error struct {
							Properties struct {
								Code struct {
									Enum []string `json:"enum"`
								} `json:"code"`
							} `json:"properties"`
						} `json:"error"`
					} `json:"properties"`
				} `json:"Error"`
			} `json:"schemas"`
			Responses struct {
				Error struct {
					Content map[string]media `json:"content"`
				} `json:"Error"`
			} `json:"responses"`
		} `json:"components"`
	}
	if err := json.Unmarshal(openAPIJSON, &doc); err != nil {
		t.Fatal(err)
	}

	// Error codes: those the code writes, found in its source.
	enum := map[string]bool{}
	for _, c := range doc.Components.Schemas.Error.Properties.Error.Properties.Code.Enum {
		enum[c] = true
	}
	examples := doc.Components.Responses.Error.Content["application/json"].Examples
	files, _ := filepath.Glob("*.go")
	codeRe := regexp.MustCompile(`Code: +"([a-z_]+)"|"code":"([a-z_]+)"`)
	found := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range codeRe.FindAllStringSubmatch(string(src), -1) {
			code := m[1] + m[2]
			found++
			if !enum[code] {
				t.Errorf("error code %q (%s) is not in openapi.json's Error.code enum", code, f)
			}
		}
	}
	if found < 20 {
		t.Fatalf("found %d error codes in the source; the pattern no longer matches how codes are written", found)
	}
	for c := range enum {
		ex, ok := examples[c]
		if !ok {
			t.Errorf("error code %q has no example", c)
			continue
		}
		if b, _ := json.Marshal(ex.Value); !strings.Contains(string(b), `"code":"`+c+`"`) {
			t.Errorf("the example of %q is %s", c, b)
		}
	}

	// Every operation: parameters, bodies and success answers have examples.
	for path, ops := range doc.Paths {
		for method, op := range ops {
			for _, p := range op.Parameters {
				if p.Example == nil {
					t.Errorf("%s %s: parameter %s has no example", method, path, p.Name)
				}
			}
			if op.RequestBody != nil {
				for ct, m := range op.RequestBody.Content {
					if m.Example == nil && len(m.Examples) == 0 {
						t.Errorf("%s %s: request body %s has no example", method, path, ct)
					}
				}
			}
			for code, r := range op.Responses {
				if !strings.HasPrefix(code, "2") {
					continue
				}
				for ct, m := range r.Content {
					if m.Example == nil && len(m.Examples) == 0 {
						t.Errorf("%s %s: answer %s %s has no example", method, path, code, ct)
					}
				}
			}
		}
	}

	// The example reads are requests the server takes.
	reads := doc.Paths["/v1/tables/{table}/query"]["post"].RequestBody.Content["application/json"].Examples
	if len(reads) < 3 {
		t.Fatalf("%d example reads, want at least 3", len(reads))
	}
	for name, ex := range reads {
		b, _ := json.Marshal(ex.Value)
		req := decodeRequest(t, string(b))
		if _, err := BuildSelect(SelectInput{Table: ordersTable(), Tenant: "acme", Req: req, TimeZones: testZones}); err != nil {
			t.Errorf("example %s: %v", name, err)
		}
	}
}
