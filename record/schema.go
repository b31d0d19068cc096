package record

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
)

// Schema is the shape of a relation's records: its columns and tenant
// column. A version 2 record names its schema by schemaId instead of
// carrying the column list, which for a typical table is more than a third
// of a version 1 record; capture publishes each schema to the schema
// registry (a compacted Kafka topic, see package registry) before the first
// record that refers to it.
type Schema struct {
	// TenantColumn is the source column holding the tenant, empty when the
	// tenant is a configured constant.
	TenantColumn string
	// Columns are the relation's columns, in order (see Column).
	Columns []Column
}

// ID returns the schema's content hash, the schemaId of its records (see
// SchemaID).
func (s Schema) ID() string { return SchemaID(s.TenantColumn, s.Columns) }

// Same reports whether s and o are the same schema: equal in everything
// their ID hashes, compared whole. An ID is 64 bits of SHA-256, so two
// schemas with one ID are different schemas only by a collision, which a
// registry reader must tell apart rather than trust the first.
func (s Schema) Same(o Schema) bool {
	return bytes.Equal(s.identity(), o.identity())
}

// identity is the text ID hashes.
func (s Schema) identity() []byte {
	b := appendTenantIdentity(nil, s.TenantColumn)
	for _, c := range s.Columns {
		b = appendColumnIdentity(b, c)
	}
	return b
}

// SchemaFormatVersion is the version of the registry entry format written by
// AppendJSON.
const SchemaFormatVersion = 1

// schemaWire is the JSON shape of a registry entry.
type schemaWire struct {
	Format       int      `json:"format"`
	SchemaID     string   `json:"schemaId"`
	TenantColumn string   `json:"tenantColumn,omitempty"`
	Columns      []Column `json:"columns"`
}

// AppendJSON appends the registry entry of s to dst:
//
//	{"format":1,"schemaId":"…","columns":[…],"tenantColumn":"…"}
//
// The columns are encoded exactly as in a version 1 record.
func (s Schema) AppendJSON(dst []byte) []byte {
	dst = append(dst, `{"format":`...)
	dst = strconv.AppendInt(dst, SchemaFormatVersion, 10)
	dst = appendSchemaColumns(dst, s.ID(), s.Columns)
	dst = appendTenantColumn(dst, s.TenantColumn)
	return append(dst, '}')
}

// ErrSchemaIDConflict is wrapped by a schema registry's error for a schema
// whose id another schema holds: an id is 64 bits of SHA-256, so two
// schemas share one only by a collision (or a forged one), and records of
// neither may be decoded with the other's columns.
var ErrSchemaIDConflict = errors.New("two different schemas have the same schemaId")

// ErrUnknownSchema is wrapped by Decode's error when a version 2 record
// refers to a schema its Schemas do not hold. Unlike ErrInvalid it does not
// by itself make the record poison: the caller may read more of the
// registry and decode again.
var ErrUnknownSchema = errors.New("unknown schemaId")

// DecodeSchema parses a registry entry written by Schema.AppendJSON and
// checks it: a known format, valid columns and a schemaId that is the hash
// of its content, so an entry can never be mistaken for another schema's.
// Errors wrap ErrInvalid, and ErrOverBudget for more than MaxColumns
// columns or more enum labels than MaxEnumLabels (for a column) or
// MaxSchemaLabels (in all).
func DecodeSchema(data []byte) (Schema, error) {
	if err := checkLabelBudget(data); err != nil {
		return Schema{}, err
	}
	var w schemaWire
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&w); err != nil {
		return Schema{}, fmt.Errorf("%w: schema registry entry: %v", ErrInvalid, err)
	}
	if w.Format != SchemaFormatVersion {
		return Schema{}, fmt.Errorf("%w: schema registry entry format %d is not supported (this build reads %d)", ErrInvalid, w.Format, SchemaFormatVersion)
	}
	if len(w.Columns) > MaxColumns {
		// Every record naming the id would be decoded into one value per
		// column: a forged entry must not size that.
		return Schema{}, fmt.Errorf("%w: schema registry entry %s has %d columns, more than the %d a table may have", ErrOverBudget, w.SchemaID, len(w.Columns), MaxColumns)
	}
	s := Schema{TenantColumn: w.TenantColumn, Columns: w.Columns}
	if err := ValidateColumns(s.TenantColumn, s.Columns); err != nil {
		return Schema{}, fmt.Errorf("schema registry entry %s: %w", w.SchemaID, err)
	}
	if id := s.ID(); id != w.SchemaID {
		return Schema{}, fmt.Errorf("%w: schema registry entry %s hashes to %s: it was altered", ErrInvalid, w.SchemaID, id)
	}
	return s, nil
}

// Schemas finds the schema a version 2 record refers to.
type Schemas interface {
	// Schema returns the schema with the given id, false when it is not
	// known (yet).
	Schema(id string) (Schema, bool)
}

// SchemaSet is an in-memory Schemas, safe for concurrent use. The zero
// value is empty and ready to use.
type SchemaSet struct {
	mu sync.RWMutex
	m  map[string]Schema
}

// Add stores s under its id and reports whether it was new.
func (ss *SchemaSet) Add(s Schema) bool {
	id := s.ID()
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if _, ok := ss.m[id]; ok {
		return false
	}
	if ss.m == nil {
		ss.m = make(map[string]Schema)
	}
	ss.m[id] = s
	return true
}

// Schema implements Schemas.
func (ss *SchemaSet) Schema(id string) (Schema, bool) {
	ss.mu.RLock()
	defer ss.mu.RUnlock()
	s, ok := ss.m[id]
	return s, ok
}

// Len returns the number of schemas held.
func (ss *SchemaSet) Len() int {
	ss.mu.RLock()
	defer ss.mu.RUnlock()
	return len(ss.m)
}

// checkLabelBudget counts the enum labels of a registry entry before it is
// decoded, one token at a time, so that a forged entry with a huge list is
// refused rather than held in memory as strings (a label of two bytes
// would be a string header of 16). Malformed JSON is left to the decoder.
func checkLabelBudget(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	type level struct {
		object, wantKey bool   // an object, whose next token is a key
		key             string // an object's key whose value comes next
		labels          bool   // an array that is some object's labels
	}
	var (
		stack         []level
		column, total int
	)
	for {
		tok, err := dec.Token()
		if err != nil {
			return nil // the end, or malformed: DecodeSchema's decoder says which
		}
		var parentKey string
		if n := len(stack); n > 0 {
			top := &stack[n-1]
			if top.object {
				if top.wantKey {
					if k, ok := tok.(string); ok {
						top.key, top.wantKey = k, false
						continue
					}
				} else if d, ok := tok.(json.Delim); !ok || d == '{' || d == '[' {
					parentKey, top.key, top.wantKey = top.key, "", true // a value
				}
			} else if top.labels {
				if _, ok := tok.(json.Delim); !ok {
					column++
					total++
					switch {
					case column > MaxEnumLabels:
						return fmt.Errorf("%w: schema registry entry has a column of more than %d enum labels", ErrOverBudget, MaxEnumLabels)
					case total > MaxSchemaLabels:
						return fmt.Errorf("%w: schema registry entry has more than %d enum labels", ErrOverBudget, MaxSchemaLabels)
					}
				}
			}
		}
		if d, ok := tok.(json.Delim); ok {
			switch d {
			case '{':
				stack = append(stack, level{object: true, wantKey: true})
			case '[':
				// encoding/json matches field names in any case.
				labels := strings.EqualFold(parentKey, "labels")
				if labels {
					column = 0
				}
				stack = append(stack, level{labels: labels})
			default:
				stack = stack[:len(stack)-1]
			}
		}
	}
}
