package capture

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unsafe"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walhouse/walhouse/internal/failpoint"
	"github.com/walhouse/walhouse/record"
)

// readChunk reads one chunk in its own repeatable-read transaction and
// produces its rows, returning once Kafka acknowledged all of them. bound
// is conn's reader, which replaces rows over the bound (or nil).
func (s *snapshotter) readChunk(ctx context.Context, conn *pgx.Conn, bound *boundedReader, p *snapshotPlan, chunk int) error {
	rel, filter, err := snapshotRelation(ctx, conn, s.c, s.sourceID, p.Table)
	if err != nil {
		return err
	}
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return fmt.Errorf("snapshot %s: begin: %w", p.Table, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if s.name != "" {
		if _, err := tx.Exec(ctx, "SET TRANSACTION SNAPSHOT '"+strings.ReplaceAll(s.name, "'", "''")+"'"); err != nil {
			return fmt.Errorf("snapshot %s: import the slot's snapshot: %w", p.Table, err)
		}
	}
	if err := snapshotLabels(ctx, tx, rel, &s.c.cfg); err != nil {
		return fmt.Errorf("snapshot %s: %w", p.Table, err)
	}
	// No ::text casts: in the text result format every value is its type's
	// output function, exactly what pgoutput sends for streamed rows, while
	// a cast to text differs for some types (char(n) loses its padding,
	// inet shows /32, xml keeps its declaration).
	cols := make([]string, len(rel.columns))
	for i, c := range rel.columns {
		cols[i] = pgx.Identifier{c.Name}.Sanitize()
	}
	q := p.chunkQuery(chunk, strings.Join(cols, ", "), filter)
	rows, err := tx.Query(ctx, q, pgx.QueryResultFormats{pgx.TextFormatCode})
	if err != nil {
		return fmt.Errorf("snapshot %s chunk %d: %w", p.Table, chunk, err)
	}
	defer rows.Close()
	cp, err := record.ParseLSN(p.CP)
	if err != nil {
		return fmt.Errorf("snapshot state of %s: %w", p.Table, err)
	}
	parts, err := s.batchPartitions(ctx, rel.topic)
	if err != nil {
		return fmt.Errorf("snapshot %s chunk %d: %w", p.Table, chunk, err)
	}
	var (
		prod    *slabProducer  // rows as records of their own
		batches *batchProducer // rows in row batches (parts > 0)
		place   kgo.TopicPartitioner
		keyRec  kgo.Record // only its key is set: what place reads
		keyBuf  []byte
		enc     = rel.enc
		values  = make([]record.Value, len(rel.columns))
		keys    = make([]string, len(rel.keyIdx))
		id      [36]byte
		r       record.Record
	)
	shared := record.Record{
		OccurredAt: p.At, TenantID: s.c.cfg.defaultTenant, TenantColumn: rel.tenantColumn, Source: rel.source,
		LSN: cp, CommitLSN: cp, Version: p.version(cp), Op: record.Read, Columns: rel.columns, SchemaID: rel.schemaID,
	}
	if parts > 0 {
		batches = newBatchProducer(ctx, s.c.producer, rel.topic, parts, s.c.cfg.snapshotBatchRows, s.c.cfg.maxRecordBytes)
		place = Partitioner().ForTopic(rel.topic)
	} else {
		prod = newSlabProducer(ctx, s.c.producer, s.c.cfg.maxRecordBytes)
	}
	dead := &chunkDeadLetters{c: s.c}
	wait := func(abandon bool) error {
		derr := dead.wait()
		var err error
		if batches != nil {
			err = batches.wait(abandon)
		} else {
			err = prod.wait()
		}
		if err == nil {
			err = derr
		}
		return err
	}
	// setEventID sets r's eventId and ingestion time. The id is written
	// into a buffer reused for every row: the record is encoded before the
	// next one.
	setEventID := func() {
		for i, k := range rel.keyIdx {
			keys[i] = values[k].Text
		}
		r.IngestedAt = time.Now().UTC()
		eid := record.AppendSnapshotEventID(id[:0], s.sourceID, cp, p.Table, keys, p.At)
		r.EventID = unsafe.String(unsafe.SliceData(eid), len(eid))
	}
	n := int64(0)
	for rows.Next() {
		if bound != nil && bound.takeCut() {
			// Its values were dropped unread: neither its key nor its
			// eventId is known.
			s.c.ignored.oversized.copiedRow()
			err := dead.send(ctx, badRow{table: p.Table, topic: rel.topic, commit: cp, reason: record.ReasonTooLarge, err: fmt.Errorf(
				"%w: PostgreSQL sent the copied row as a message over the %d bytes capture reads (--max-record-bytes + 1 MiB), so its record would be over the bound too; capture dropped it unread, so its key is not known; raise --max-record-bytes and change or re-copy the row to load it",
				ErrRowTooLarge, s.c.cfg.maxRecordBytes+receiveSlack)})
			if err != nil {
				_ = wait(true)
				return fmt.Errorf("snapshot %s chunk %d: %w", p.Table, chunk, err)
			}
			continue
		}
		raw := rows.RawValues()
		for i, b := range raw {
			if b == nil {
				values[i] = record.Value{Null: true}
			} else {
				// Aliases pgx's buffer: encoded before the next row.
				values[i] = record.Value{Text: unsafe.String(unsafe.SliceData(b), len(b))}
			}
		}
		r = shared
		r.Values = values
		var bad error
		reason := record.ReasonInvalid
		if rel.tenantIdx >= 0 {
			if values[rel.tenantIdx].Null {
				reason, bad = record.ReasonNoTenant, fmt.Errorf("the tenant column %s is NULL, so the row belongs to no tenant; make the column NOT NULL, or give such rows a tenant", rel.tenantColumn)
			}
			r.TenantID = values[rel.tenantIdx].Text
		}
		if bad == nil && batches != nil {
			// The batch's decoder derives the eventId and validates the
			// row at the sink; what only the row can get wrong is checked
			// here.
			for _, k := range rel.keyIdx {
				if values[k].Null {
					bad = fmt.Errorf("the snapshot row does not form a valid record: %w: key column %q has no value", record.ErrInvalid, rel.columns[k].Name)
				}
			}
		}
		if bad == nil && batches == nil {
			setEventID()
			if err := r.ValidateRow(); err != nil {
				bad = fmt.Errorf("the snapshot row does not form a valid record: %w", err)
			}
		}
		if bad != nil {
			if r.EventID == "" {
				setEventID()
			}
			b := badRow{table: p.Table, topic: rel.topic, commit: cp, rec: &r, key: primaryKeyJSON(rel.columns, rel.keyIdx, values), reason: reason, err: bad}
			if err := dead.send(ctx, b); err != nil {
				_ = wait(true)
				return fmt.Errorf("snapshot %s chunk %d: %w", p.Table, chunk, err)
			}
			continue
		}
		var err error
		if batches != nil {
			keyBuf = r.AppendPartitionKey(keyBuf[:0])
			keyRec.Key = keyBuf
			err = batches.add(enc, place.Partition(&keyRec, parts), &shared, values)
		} else {
			err = prod.produce(enc, rel.topic, &r)
		}
		if errors.Is(err, ErrRowTooLarge) {
			// Only this row was left out; the producer goes on.
			if r.EventID == "" {
				setEventID()
			}
			err = dead.send(ctx, badRow{table: p.Table, topic: rel.topic, commit: cp, rec: &r, key: primaryKeyJSON(rel.columns, rel.keyIdx, values), reason: record.ReasonTooLarge, err: err})
		}
		if err != nil {
			_ = wait(true)
			return fmt.Errorf("snapshot %s chunk %d: %w", p.Table, chunk, err)
		}
		n++
		if n%10_000 == 0 {
			s.rows.Add(10_000)
			s.c.rows.Add(10_000)
		}
	}
	if err := rows.Err(); err != nil {
		_ = wait(true)
		return fmt.Errorf("snapshot %s chunk %d: %w", p.Table, chunk, err)
	}
	s.rows.Add(n % 10_000)
	s.c.rows.Add(n % 10_000)
	if err := wait(false); err != nil {
		return fmt.Errorf("kafka did not accept a snapshot row of %s: %w", p.Table, err)
	}
	s.c.cfg.failpoints.At(failpoint.CaptureCopied)
	return nil
}

// batchPartitions returns the partition count of topic when snapshot rows
// go in row batches, and 0 when each row is a record of its own: with
// envelope version 1, with batches of one row, or without a topic creator
// to ask for the count (then the rows are placed by the producer's
// partitioner).
func (s *snapshotter) batchPartitions(ctx context.Context, topic string) (int, error) {
	cfg := &s.c.cfg
	if cfg.envelope != 2 || cfg.snapshotBatchRows <= 1 || cfg.topics == nil {
		return 0, nil
	}
	n, err := cfg.topics.Partitions(ctx, topic)
	if err != nil {
		return 0, err
	}
	return int(n), nil
}

// snapshotRelation builds the relation of a table from the catalog, in the
// shape a pgoutput Relation message would give, so snapshot and stream
// records are identical: only the columns of the publication's column
// list, if it has one. It also returns the publication's row filter of
// the table ("" for none), which the copy applies as pgoutput applies it
// to the stream. A column list that leaves out what walhouse needs is
// refused (errUncapturable), as the stream refuses it.
func snapshotRelation(ctx context.Context, conn *pgx.Conn, c *Capturer, sourceID, table string) (*relation, string, error) {
	schema, name, _ := strings.Cut(table, ".")
	rows, err := conn.Query(ctx, `
		SELECT c.oid, c.relreplident::text, a.attname, a.atttypid, a.atttypmod,
		       c.relreplident = 'f' OR coalesce(a.attnum = ANY(ri.indkey), false)
		FROM pg_catalog.pg_class c
		JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
		JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = ''
		LEFT JOIN pg_catalog.pg_index ri ON ri.indrelid = c.oid
		     AND (ri.indisreplident OR (c.relreplident = 'd' AND ri.indisprimary))
		WHERE n.nspname = $1 AND c.relname = $2
		ORDER BY a.attnum`, schema, name)
	if err != nil {
		return nil, "", fmt.Errorf("read the columns of %s: %w", table, err)
	}
	m := &pglogrepl.RelationMessage{Namespace: schema, RelationName: name}
	for rows.Next() {
		var (
			ident  string
			col    pglogrepl.RelationMessageColumn
			inKey  bool
			typmod int32
		)
		if err := rows.Scan(&m.RelationID, &ident, &col.Name, &col.DataType, &typmod, &inKey); err != nil {
			rows.Close()
			return nil, "", fmt.Errorf("read the columns of %s: %w", table, err)
		}
		col.TypeModifier = typmod
		if inKey {
			col.Flags = 1
		}
		m.ReplicaIdentity = ident[0]
		m.Columns = append(m.Columns, &col)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, "", fmt.Errorf("read the columns of %s: %w", table, err)
	}
	if len(m.Columns) == 0 {
		return nil, "", errors.New("table " + table + " has no columns or does not exist")
	}
	version, err := readServerVersion(ctx, conn)
	if err != nil {
		return nil, "", err
	}
	entry, err := readEntry(ctx, conn, &c.cfg, version, m.RelationID, schema, name)
	if err != nil {
		return nil, "", err
	}
	if err := entry.refusal(&c.cfg, pgx.Identifier{schema, name}.Sanitize()); err != nil {
		return nil, "", err
	}
	if entry.columns != nil {
		// pgoutput describes only the listed columns and sends only
		// their values: the copy reads those.
		m.Columns = slices.DeleteFunc(m.Columns, func(col *pglogrepl.RelationMessageColumn) bool { return !slices.Contains(entry.columns, col.Name) })
	}
	m.ColumnNum = uint16(len(m.Columns))
	rel, err := buildRelation(ctx, newCatalog(conn), &c.cfg, sourceID, m)
	return rel, entry.filter, err
}
