package record

import "fmt"

// DecodeBatch parses one row batch (a record value that came with the
// HeaderRows header) and returns its rows as records, each validated as
// Decode validates a record. The fields a batch leaves out are derived from
// each row: tenantId from the tenant column (or the batch's tenantId when
// the table has none), the partition key, and the eventId, which is
// SnapshotEventID of the source id, commitLsn, "<schema>.<table>", the key
// values and occurredAt: exactly what capture gives the same row sent as a
// record of its own.
//
// Errors wrap ErrInvalid or ErrUnknownSchema as Decode's do; a batch with a
// bad row is invalid as a whole. The records share nothing with data.
func DecodeBatch(data []byte, schemas Schemas) ([]*Record, error) {
	var d Decoder
	return d.DecodeBatch(data, schemas)
}

// DecodeBatch decodes one row batch; see the package-level DecodeBatch.
func (d *Decoder) DecodeBatch(data []byte, schemas Schemas) ([]*Record, error) {
	rs, err := d.d.decodeBatch(data, schemas)
	if len(data) > maxKeptRecord {
		d.d = decoder{}
	}
	return rs, err
}

// The fields a row batch must not have: each row has its own.
var perRowFields = [...]int{fieldEventID, fieldPartitionKey, fieldKey, fieldPayload, fieldUnchanged, fieldColumns}

func (d *decoder) decodeBatch(data []byte, schemas Schemas) ([]*Record, error) {
	var e envelope
	if err := d.read(data, &e); err != nil {
		return nil, err
	}
	if !e.hasRows {
		return nil, fmt.Errorf("%w: a row batch needs the field rows; a value without it is a single record (decode it with Decode)", ErrInvalid)
	}
	for _, f := range perRowFields {
		if e.given.has(f) {
			return nil, fmt.Errorf("%w: a row batch has no field %s: it is derived for each row", ErrInvalid, recordFields[f])
		}
	}
	if e.eventVersion != 2 {
		return nil, fmt.Errorf("%w: a row batch has eventVersion 2, not %d", ErrInvalid, e.eventVersion)
	}
	text := string(d.keep)
	schemaID := e.schemaID.of(text)
	tenantColumn := e.tenantColumn.of(text)
	cols, err := d.schemaColumns(&e, schemaID, tenantColumn, schemas)
	if err != nil {
		return nil, err
	}
	op, err := ParseOp(transient(e.op))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if op != Read || e.ordinal != 0 {
		return nil, fmt.Errorf("%w: a row batch carries snapshot rows (op r, ordinal 0), not op %s ordinal %d", ErrInvalid, op, e.ordinal)
	}
	lsn, err := ParseLSN(transient(e.lsn))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	commitLSN, err := ParseLSN(transient(e.commitLSN))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	src := Source{ID: e.source[sourceID].of(text), Schema: e.source[sourceSchema].of(text), Table: e.source[sourceTable].of(text)}
	if eventType := e.eventType; !isEventType(eventType, src, Read) {
		return nil, fmt.Errorf("%w: eventType %q does not match source and op (want %q)", ErrInvalid, eventType, src.Schema+"."+src.Table+"."+Read.verb())
	}
	tenantIdx := -1
	d.keyIdx = d.keyIdx[:0]
	for i, c := range cols {
		if c.Name == tenantColumn && tenantColumn != "" {
			tenantIdx = i
		}
		if c.Key {
			d.keyIdx = append(d.keyIdx, i)
		}
	}
	tenant := e.tenantID.of(text)
	if tenantColumn != "" && tenant != "" {
		return nil, fmt.Errorf("%w: a row batch of a table with tenant column %q takes each row's tenant from it and has no tenantId", ErrInvalid, tenantColumn)
	}

	n := len(d.rowEnds)
	// Every row's width before allocating for n rows of len(cols) values:
	// a hostile batch of many empty rows against a wide schema would
	// otherwise allocate far more than its own size before the first row
	// is found short.
	start := 0
	for i, end := range d.rowEnds {
		if end-start != len(cols) {
			return nil, fmt.Errorf("%w: rows[%d] has %d values for %d columns", ErrInvalid, i, end-start, len(cols))
		}
		start = end
	}
	recs := make([]Record, n)
	out := make([]*Record, n)
	vals := make([]Value, n*len(cols))
	table := src.Schema + "." + src.Table
	ids := make([]byte, 0, n*36)
	if cap(d.keyVals) < len(d.keyIdx) {
		d.keyVals = make([]string, len(d.keyIdx))
	}
	keys := d.keyVals[:len(d.keyIdx)]
	start = 0
	for i, end := range d.rowEnds {
		cells := d.cells[start:end]
		start = end
		v := vals[i*len(cols) : (i+1)*len(cols) : (i+1)*len(cols)]
		for j, c := range cells {
			if c.null {
				v[j].Null = true
			} else {
				v[j].Text = c.text.of(text)
			}
		}
		for j, k := range d.keyIdx {
			keys[j] = v[k].Text
		}
		from := len(ids)
		ids = AppendSnapshotEventID(ids, src.ID, commitLSN, table, keys, e.occurredAt)
		r := &recs[i]
		*r = Record{
			EventID:      transient(ids[from:]), // replaced by the final string below
			OccurredAt:   e.occurredAt,
			IngestedAt:   e.ingestedAt,
			TenantID:     tenant,
			TenantColumn: tenantColumn,
			Source:       src,
			LSN:          lsn,
			CommitLSN:    commitLSN,
			Version:      e.version,
			Op:           Read,
			Columns:      cols,
			SchemaID:     schemaID,
			Values:       v,
		}
		if tenantIdx >= 0 && !v[tenantIdx].Null {
			r.TenantID = v[tenantIdx].Text
		}
		if err := r.ValidateRow(); err != nil {
			return nil, fmt.Errorf("rows[%d]: %w", i, err)
		}
		out[i] = r
	}
	// Every eventId in one allocation.
	idText := string(ids)
	for i := range recs {
		recs[i].EventID = idText[i*36 : (i+1)*36]
	}
	return out, nil
}

// readRows reads the rows of a row batch into d.cells (one member per
// value, its name unused), and the end of each row there into d.rowEnds.
// It reports whether rows was given (not null). Each value is a string,
// unescaped into keep, or null.
func (d *decoder) readRows(s *scanner) (bool, error) {
	if given, err := s.open('[', "rows", "an array"); !given {
		return false, err
	}
	for first := true; ; first = false {
		more, err := s.more(first, ']')
		if err != nil {
			return true, err
		}
		if !more {
			break
		}
		row := len(d.rowEnds)
		if row == MaxBatchRows {
			return true, fmt.Errorf("%w: a row batch has more than %d rows", ErrOverBudget, MaxBatchRows)
		}
		if s.peek() != '[' {
			return true, fmt.Errorf("%w: rows[%d] is %s, want an array", ErrInvalid, row, s.kind())
		}
		s.pos++
		if err := d.readRow(s, row); err != nil {
			return true, err
		}
		d.rowEnds = append(d.rowEnds, len(d.cells))
	}
	if len(d.rowEnds) == 0 {
		return true, fmt.Errorf("%w: a row batch has no rows", ErrInvalid)
	}
	return true, nil
}

// readRow reads the values of row, whose '[' has been read, into d.cells.
func (d *decoder) readRow(s *scanner, row int) error {
	rowStart := len(d.cells)
	for first := true; ; first = false {
		more, err := s.more(first, ']')
		if err != nil || !more {
			return err
		}
		switch {
		case len(d.cells) == MaxBatchCells:
			return fmt.Errorf("%w: a row batch has more than %d values", ErrOverBudget, MaxBatchCells)
		case len(d.cells)-rowStart == MaxColumns:
			return fmt.Errorf("%w: rows[%d] has more than %d values", ErrOverBudget, row, MaxColumns)
		}
		var m member
		m.text.start = len(d.keep)
		var ok bool
		if d.keep, m.null, ok = s.appendString(d.keep); !ok {
			return s.valueError(fmt.Sprintf("a value of rows[%d]", row), "a string or null")
		}
		m.text.end = len(d.keep)
		d.cells = append(d.cells, m)
	}
}
