package record

// This file keeps Decode as it was before it moved to fastjson (commit
// 4f5944c, encoding/json with DisallowUnknownFields), as the reference the
// new decoder must agree with: on success or failure, on the error class and
// on the Record (see TestDecodeMatchesReference). It is test code only.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"
)

// refWire is the JSON shape of a record, used for decoding.
type refWire struct {
	EventID      string             `json:"eventId"`
	EventType    string             `json:"eventType"`
	EventVersion int                `json:"eventVersion"`
	OccurredAt   time.Time          `json:"occurredAt"`
	IngestedAt   time.Time          `json:"ingestedAt"`
	TenantID     string             `json:"tenantId"`
	TenantColumn string             `json:"tenantColumn"`
	PartitionKey string             `json:"partitionKey"`
	Source       Source             `json:"source"`
	LSN          string             `json:"lsn"`
	CommitLSN    string             `json:"commitLsn"`
	Ordinal      uint32             `json:"ordinal"`
	Version      uint64             `json:"version"`
	Op           string             `json:"op"`
	SchemaID     string             `json:"schemaId"`
	Columns      []Column           `json:"columns"`
	Key          map[string]*string `json:"key"`
	Payload      map[string]*string `json:"payload"`
	Unchanged    []string           `json:"unchanged"`
}

// refDecode parses one wire-encoded record and validates it. A version 1
// record carries its columns; a version 2 record names its schema, which
// Decode finds in schemas (nil is allowed when only version 1 records are
// expected).
//
// Every error wraps ErrInvalid, except a version 2 record whose schema is
// not in schemas: that error wraps ErrUnknownSchema, and the caller may read
// more of the registry and try again. A record that fails with ErrInvalid
// can never be loaded and belongs in the dead-letter topic.
func refDecode(data []byte, schemas Schemas) (*Record, error) {
	var w refWire
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&w); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	switch w.EventVersion {
	case 1:
		if w.Columns == nil {
			return nil, fmt.Errorf("%w: a version 1 record must carry its columns", ErrInvalid)
		}
	case 2:
		if w.Columns != nil {
			return nil, fmt.Errorf("%w: a version 2 record refers to its columns by schemaId and must not carry them", ErrInvalid)
		}
		if w.SchemaID == "" {
			return nil, fmt.Errorf("%w: schemaId is missing", ErrInvalid)
		}
		var s Schema
		ok := false
		if schemas != nil {
			s, ok = schemas.Schema(w.SchemaID)
		}
		if !ok {
			return nil, fmt.Errorf("%w %q: it is not in the schema registry", ErrUnknownSchema, w.SchemaID)
		}
		if s.TenantColumn != w.TenantColumn {
			return nil, fmt.Errorf("%w: tenantColumn %q differs from schema %s's %q", ErrInvalid, w.TenantColumn, w.SchemaID, s.TenantColumn)
		}
		w.Columns = s.Columns
	default:
		return nil, fmt.Errorf("%w: eventVersion %d is not supported (this build reads 1 and 2)", ErrInvalid, w.EventVersion)
	}
	r := &Record{
		EventID:      w.EventID,
		OccurredAt:   w.OccurredAt,
		IngestedAt:   w.IngestedAt,
		TenantID:     w.TenantID,
		TenantColumn: w.TenantColumn,
		Source:       w.Source,
		Ordinal:      w.Ordinal,
		Version:      w.Version,
		Columns:      w.Columns,
		SchemaID:     w.SchemaID,
	}
	var err error
	if r.Values, err = refValuesOf(w.Columns, w.Payload, w.Unchanged, false); err != nil {
		return nil, err
	}
	if w.Key != nil {
		if r.OldKey, err = refValuesOf(w.Columns, w.Key, nil, true); err != nil {
			return nil, err
		}
	}
	if r.Op, err = ParseOp(w.Op); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if r.LSN, err = ParseLSN(w.LSN); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if r.CommitLSN, err = ParseLSN(w.CommitLSN); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	// A version 2 record's columns come from a registry entry whose hash
	// was checked when it was read; they need no second check.
	if w.EventVersion == 1 {
		err = r.Validate()
	} else {
		err = r.ValidateRow()
	}
	if err != nil {
		return nil, err
	}
	if w.EventType != r.EventType() {
		return nil, fmt.Errorf("%w: eventType %q does not match source and op (want %q)", ErrInvalid, w.EventType, r.EventType())
	}
	if w.PartitionKey != r.PartitionKey() {
		return nil, fmt.Errorf("%w: partitionKey %q does not match tenant and key (want %q)", ErrInvalid, w.PartitionKey, r.PartitionKey())
	}
	if w.EventVersion == 1 && w.SchemaID != SchemaID(r.TenantColumn, r.Columns) {
		return nil, fmt.Errorf("%w: schemaId %q does not match the columns", ErrInvalid, w.SchemaID)
	}
	return r, nil
}

// refValuesOf aligns a decoded payload object with the columns. Every column
// must be present or listed as unchanged; with keysOnly, absent non-key
// columns are null.
func refValuesOf(cols []Column, vals map[string]*string, unchanged []string, keysOnly bool) ([]Value, error) {
	out := make([]Value, len(cols))
	index := make(map[string]int, len(cols))
	for i, c := range cols {
		index[c.Name] = i
	}
	for name, v := range vals {
		i, ok := index[name]
		if !ok {
			return nil, fmt.Errorf("%w: payload column %q is not among the columns", ErrInvalid, name)
		}
		if v == nil {
			out[i].Null = true
		} else {
			out[i].Text = *v
		}
	}
	for _, name := range unchanged {
		i, ok := index[name]
		if !ok {
			return nil, fmt.Errorf("%w: unchanged column %q is not among the columns", ErrInvalid, name)
		}
		if _, dup := vals[name]; dup {
			return nil, fmt.Errorf("%w: column %q is both in payload and unchanged", ErrInvalid, name)
		}
		out[i].Unchanged = true
	}
	for i, c := range cols {
		if _, ok := vals[c.Name]; ok || out[i].Unchanged {
			continue
		}
		if keysOnly && !c.Key {
			out[i].Null = true
			continue
		}
		return nil, fmt.Errorf("%w: column %q is missing from the payload", ErrInvalid, c.Name)
	}
	return out, nil
}
