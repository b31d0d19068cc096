package capture

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walhouse/walhouse/record"
	"github.com/walhouse/walhouse/schema"
)

// maxPollInterval bounds how long a table added to the publication waits to
// be noticed when none of its changes has come through the stream yet.
const maxPollInterval = 10 * time.Second

// pollTables follows the publication while streaming: a table added to it
// joins the stream (with an online snapshot), a table removed from it leaves
// (its heartbeats stop, so its freshness stops advancing, truthfully), and
// a captured table that became uncapturable is left out (recheck).
func (s *stream) pollTables(ctx context.Context) error {
	interval := maxPollInterval
	if hb := s.c.cfg.heartbeat; hb > 0 && hb < interval {
		interval = hb
	}
	if time.Since(s.polledAt) < interval {
		return nil
	}
	s.polledAt = time.Now()
	published, invalid, err := publishedTables(ctx, s.cat.conn, s.c.cfg.publication)
	if err != nil {
		return err
	}
	for _, t := range slices.Sorted(maps.Keys(invalid)) {
		_ = s.refuse(t, invalid[t])
	}
	captured := make(map[string]bool, len(s.tables)) // before any joins: see followEntries
	for _, t := range s.tables {
		captured[t] = true
	}
	var joining []string
	for _, t := range published {
		if !s.c.cfg.excluded(t) && !slices.Contains(s.tables, t) {
			joining = append(joining, t)
		}
	}
	if len(joining) > 0 {
		// One query for all of them: tables left out are looked at
		// again with every poll, and there may be many.
		refused, err := checkTables(ctx, s.cat.conn, &s.c.cfg, s.version, joining, true)
		if err != nil {
			return err
		}
		for _, t := range joining {
			if err := s.admit(ctx, t, refused[t]); err != nil && !errors.Is(err, errTableRefused) {
				return err
			}
		}
	}
	var gone []string
	s.tables = slices.DeleteFunc(s.tables, func(t string) bool {
		if slices.Contains(published, t) {
			return false
		}
		s.c.log.Warn("table left the publication: its changes are no longer captured", "table", t, "publication", s.c.cfg.publication)
		gone = append(gone, t)
		return true
	})
	for _, t := range gone {
		s.online.drop(t)
		if err := s.c.markLeftOut(ctx, t, s.received); err != nil {
			return err
		}
	}
	s.c.refused.retain(func(t string) bool { return slices.Contains(published, t) || invalid[t] != nil })
	if err := s.recheck(ctx); err != nil {
		return err
	}
	if err := s.followEntries(ctx, captured); err != nil {
		return err
	}
	return s.followPartitions(ctx)
}

// followEntries copies again a captured table whose entry in the
// publication (its pg_publication_rel row) is another than at the last
// poll: it was dropped from the publication and added again between two
// polls, maybe with a row filter or a column list in between, or given
// another filter or column list (ALTER PUBLICATION ... SET TABLE, which
// makes a new entry), so changes of it may be missing, and rows and columns
// the new entry publishes were never copied. The stream cannot tell (pgoutput says nothing of
// it), so the table is treated as left out and joining again: copied, and
// marked inexact (markLeftOut). The entries seen first are those of the
// tables' saved snapshot plans (seedLeaves), which plan compared at start. Only tables captured since before
// this poll are looked at: one that joined in it was copied for that.
func (s *stream) followEntries(ctx context.Context, before map[string]bool) error {
	rows, err := s.cat.conn.Query(ctx, `SELECT n.nspname || '.' || c.relname, r.oid
		FROM pg_catalog.pg_publication_rel r JOIN pg_catalog.pg_publication p ON p.oid = r.prpubid
		JOIN pg_catalog.pg_class c ON c.oid = r.prrelid JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
		WHERE p.pubname = $1`, s.c.cfg.publication)
	if err != nil {
		return fmt.Errorf("list the entries of publication %s: %w", s.c.cfg.publication, err)
	}
	now := map[string]uint32{}
	var (
		table string
		oid   uint32
	)
	if _, err := pgx.ForEachRow(rows, []any{&table, &oid}, func() error { now[table] = oid; return nil }); err != nil {
		return fmt.Errorf("list the entries of publication %s: %w", s.c.cfg.publication, err)
	}
	seen := s.entries
	s.entries = now
	if seen == nil {
		return nil
	}
	for _, t := range s.tables {
		if was, ok := seen[t]; !before[t] || !ok || now[t] == 0 || now[t] == was {
			continue
		}
		s.c.log.Warn("table was dropped from the publication and added again since the last look, or given another row filter or column list (ALTER PUBLICATION ... SET TABLE makes a new entry): "+rejoinedFix, "table", t, "publication", s.c.cfg.publication)
		s.online.drop(t)
		if err := s.c.markLeftOut(ctx, t, s.received); err != nil {
			return err
		}
		if s.c.cfg.snapshot {
			s.online.add(t, s.received, nil)
		}
	}
	return nil
}

// recheck looks at the shape of every captured table again, in one catalog
// query, and leaves out those capture can no longer capture whole: a
// column list that leaves out a key, tenant or sorting column, which
// described finds at once unless the entry changed without a change of
// the table since, and a narrowed publish. Polling with the publication's
// tables bounds how long that goes unnoticed to the same ≤10 s, at the
// same cost. (A changed row filter or column list that keeps those is
// honoured: its new entry makes followEntries copy the table again.)
func (s *stream) recheck(ctx context.Context) error {
	if len(s.tables) == 0 {
		return nil
	}
	refused, err := checkTables(ctx, s.cat.conn, &s.c.cfg, s.version, s.tables, false)
	if err != nil {
		return err
	}
	for _, t := range slices.Sorted(maps.Keys(refused)) {
		if err := s.leave(ctx, t, refused[t]); err != nil {
			return err
		}
	}
	return nil
}

// followPartitions copies the partitions attached to a captured
// partitioned table. ATTACH PARTITION writes no row changes, so without a
// copy ClickHouse would never see the rows an attached table brings. A
// partition created empty (CREATE TABLE … PARTITION OF) is copied too,
// harmlessly: its rows, if any yet, are also in the stream, with higher
// versions. The leaves known when streaming began are those the table's
// saved snapshot plan lists (see seedLeaves), so partitions attached while
// capture was stopped are copied too; a table without such a list takes
// the leaves it has at its first look as copied. A table whose copy is
// queued or running is looked at after it.
func (s *stream) followPartitions(ctx context.Context) error {
	var roots []string
	for _, t := range s.tables {
		if !s.online.copying(t) {
			roots = append(roots, t)
		}
	}
	if len(roots) == 0 {
		return nil
	}
	leaves, err := partitionLeaves(ctx, s.cat.conn, roots)
	if err != nil {
		return err
	}
	if s.leaves == nil {
		s.leaves = map[string]map[string]bool{}
	}
	for _, root := range roots {
		known, seen := s.leaves[root]
		now := map[string]bool{}
		var attached []partPlan
		for _, part := range leaves[root] {
			name := part.Schema + "." + part.Name
			now[name] = true
			if seen && !known[name] {
				attached = append(attached, part)
			}
		}
		s.leaves[root] = now // detached leaves are forgotten
		if len(attached) == 0 || !s.c.cfg.snapshot {
			continue
		}
		plan := &snapshotPlan{Table: root, CP: s.received.String(), At: time.Now().UTC(), ChunkPages: s.c.cfg.chunkPages}
		plan.setParts(attached)
		plan.Leaves = leafNames(leaves[root])
		if plan.Membership, err = membership(ctx, s.cat.conn, s.c.cfg.publication, root); err != nil {
			return err
		}
		if st := s.c.cfg.state; st != nil {
			// Saved before the copy starts, so a crash resumes it; the
			// table's earlier plan is complete, or it would be copying.
			raw, err := json.Marshal(plan)
			if err != nil {
				return err
			}
			if err := st.Save(ctx, stateKey(s.c.cfg.slot, root), raw); err != nil {
				return err
			}
		}
		names := make([]string, len(attached))
		for i, p := range attached {
			names[i] = p.Schema + "." + p.Name
		}
		s.c.log.Info("partition attached: copying its rows next to the stream", "table", root, "partitions", names, "lsn", s.received)
		s.online.add(root, s.received, plan)
	}
	return nil
}

// partitionLeaves lists the leaf partitions of those of tables that are
// partitioned, by table, in one query.
func partitionLeaves(ctx context.Context, conn *pgx.Conn, tables []string) (map[string][]partPlan, error) {
	rows, err := conn.Query(ctx, `SELECT rn.nspname || '.' || r.relname, n.nspname, c.relname, c.relkind::text,
			pg_relation_size(c.oid) / current_setting('block_size')::bigint
		FROM pg_class r JOIN pg_namespace rn ON rn.oid = r.relnamespace
		CROSS JOIN LATERAL pg_partition_tree(r.oid) t
		JOIN pg_class c ON c.oid = t.relid JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE r.relkind = 'p' AND rn.nspname || '.' || r.relname = ANY($1) AND t.isleaf
		ORDER BY 1, 2, 3`, tables)
	if err != nil {
		return nil, fmt.Errorf("list the partitions of the captured tables: %w", err)
	}
	out := map[string][]partPlan{}
	var root, kind string
	var part partPlan
	_, err = pgx.ForEachRow(rows, []any{&root, &part.Schema, &part.Name, &kind, &part.Pages}, func() error {
		part.Whole = kind != "r"
		out[root] = append(out[root], part)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list the partitions of the captured tables: %w", err)
	}
	return out, nil
}

// publishedTables lists a publication's tables as "schema.table", and,
// by that name, why capture leaves out those whose schema name holds a
// dot ("schema.table" would not say where the schema ends).
func publishedTables(ctx context.Context, conn *pgx.Conn, pub string) ([]string, map[string]error, error) {
	rows, err := conn.Query(ctx, `SELECT schemaname, tablename FROM pg_catalog.pg_publication_tables WHERE pubname = $1 ORDER BY 1, 2`, pub)
	if err != nil {
		return nil, nil, fmt.Errorf("list the tables of publication %s: %w", pub, err)
	}
	var (
		out           []string
		invalid       = map[string]error{}
		schema, table string
	)
	_, err = pgx.ForEachRow(rows, []any{&schema, &table}, func() error {
		if strings.Contains(schema, ".") {
			invalid[schema+"."+table] = refusal(reasonInvalidName, "table %s: schema names with dots are not supported; rename the schema, or leave the table out of publication %s",
				pgx.Identifier{schema, table}.Sanitize(), pub)
			return nil
		}
		out = append(out, schema+"."+table)
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("list the tables of publication %s: %w", pub, err)
	}
	return out, invalid, nil
}

// addTable takes a table that joined the publication into the stream and
// queues its online snapshot, or leaves it out (errTableRefused).
func (s *stream) addTable(ctx context.Context, table string) error {
	err := checkTable(ctx, s.cat.conn, &s.c.cfg, s.version, table)
	if err != nil && !errors.Is(err, errUncapturable) {
		return fmt.Errorf("table %s joined publication %s but could not be inspected: %w", table, s.c.cfg.publication, err)
	}
	return s.admit(ctx, table, err)
}

// admit is addTable for a table whose shape was looked at: refused is why
// it cannot be captured, nil when it can.
func (s *stream) admit(ctx context.Context, table string, refused error) error {
	cfg := &s.c.cfg
	if other, where, clash := cfg.nameClash(table, s.tables); clash {
		refused = errors.Join(refused, clashRefusal(table, other, where, cfg.publication))
	}
	if refused != nil {
		return s.refuse(table, refused)
	}
	wasRefused := s.c.refused.rejoin(table)
	if tc := cfg.topics; tc != nil {
		topic := cfg.topicOf(table)
		if err := tc.CreateTopic(ctx, topic, cfg.partitions, cfg.replication); err != nil {
			return err
		}
		s.topics[topic] = true
	}
	s.tables = append(s.tables, table)
	s.c.log.Info("table joined the stream", "table", table, "publication", cfg.publication, "lsn", s.received, "snapshot", cfg.snapshot)
	if st := cfg.state; st != nil {
		// A table with a saved copy was captured before: it left the
		// publication and joined it again.
		raw, err := st.Load(ctx, stateKey(cfg.slot, table))
		if err != nil {
			return fmt.Errorf("read the snapshot state of %s: %w", table, err)
		}
		switch {
		case raw != nil && wasRefused:
			s.c.log.Warn("table was left out of the stream and is captured again: "+rejoinedFix, "table", table, "publication", cfg.publication)
		case raw != nil:
			s.c.log.Warn("table left the publication and joined it again: "+rejoinedFix, "table", table, "publication", cfg.publication)
		}
	}
	if cfg.snapshot {
		s.online.add(table, s.received, nil)
	}
	return nil
}

// hasUnchanged reports whether a row has unchanged TOAST markers.
func hasUnchanged(values []record.Value) bool {
	for _, v := range values {
		if v.Unchanged {
			return true
		}
	}
	return false
}

// partitionsAsTables returns (up to ten of) the partitions that publication
// pub sends as tables of their own: it does not publish via the partition
// root (walhouse creates its publications with publish_via_partition_root;
// one made by hand may lack it).
func partitionsAsTables(ctx context.Context, conn *pgx.Conn, pub string) ([]string, error) {
	rows, err := conn.Query(ctx, `
		SELECT t.schemaname || '.' || t.tablename
		FROM pg_catalog.pg_publication p
		JOIN pg_catalog.pg_publication_tables t ON t.pubname = p.pubname
		JOIN pg_catalog.pg_namespace n ON n.nspname = t.schemaname
		JOIN pg_catalog.pg_class c ON c.relnamespace = n.oid AND c.relname = t.tablename
		WHERE p.pubname = $1 AND NOT p.pubviaroot AND c.relispartition
		ORDER BY 1 LIMIT 10`, pub)
	if err != nil {
		return nil, fmt.Errorf("read how publication %s sends partitions: %w", pub, err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("read how publication %s sends partitions: %w", pub, err)
	}
	return out, nil
}

// leafNames returns the "schema.name" of each leaf, never nil: a plan's
// Leaves are nil only for plain tables.
func leafNames(parts []partPlan) []string {
	out := make([]string, 0, len(parts))
	for _, p := range parts {
		out = append(out, p.Schema+"."+p.Name)
	}
	return out
}

// seedLeaves takes the leaves each captured table's saved snapshot plan
// lists as the leaves known when streaming begins (see followPartitions),
// and its publication entry as the one last seen (see followEntries).
func (s *stream) seedLeaves(ctx context.Context) error {
	st := s.c.cfg.state
	if st == nil {
		return nil
	}
	for _, table := range s.tables {
		raw, err := st.Load(ctx, stateKey(s.c.cfg.slot, table))
		if err != nil {
			return fmt.Errorf("read the snapshot state of %s: %w", table, err)
		}
		if raw == nil {
			continue
		}
		var p snapshotPlan
		if err := json.Unmarshal(raw, &p); err != nil {
			return fmt.Errorf("snapshot state of %s is unreadable: %w; delete it from the state topic to snapshot the table again", table, err)
		}
		if p.Membership != 0 {
			if s.entries == nil {
				s.entries = map[string]uint32{}
			}
			s.entries[table] = p.Membership
		}
		if p.Leaves == nil {
			continue
		}
		if s.leaves == nil {
			s.leaves = map[string]map[string]bool{}
		}
		known := make(map[string]bool, len(p.Leaves))
		for _, l := range p.Leaves {
			known[l] = true
		}
		s.leaves[table] = known
	}
	return nil
}

// membership returns the oid of table's entry in publication pub (its
// pg_publication_rel row), 0 when it is published without one (FOR ALL
// TABLES, or FOR TABLES IN SCHEMA).
func membership(ctx context.Context, conn *pgx.Conn, pub, table string) (uint32, error) {
	var oid uint32
	err := conn.QueryRow(ctx, `SELECT r.oid FROM pg_catalog.pg_publication_rel r JOIN pg_catalog.pg_publication p ON p.oid = r.prpubid
		WHERE p.pubname = $1 AND r.prrelid = $2::regclass`, pub, quoteTable(table)).Scan(&oid)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("look up table %s in publication %s: %w", table, pub, err)
	}
	return oid, nil
}

// refuse leaves table, which is not captured, out of the stream because
// of why (see refused.go) and returns errTableRefused.
func (s *stream) refuse(table string, why error) error {
	s.c.refused.leave(table, s.c.cfg.publication, why)
	return errTableRefused
}

// leave takes table, captured until now, out of the stream because of why
// (see refused.go): its changes are no longer produced, its heartbeats
// stop, its copy, if one runs, stops, and its saved snapshot plan says
// that it needs a copy when it is captured again (markLeftOut).
func (s *stream) leave(ctx context.Context, table string, why error) error {
	s.tables = slices.DeleteFunc(s.tables, func(t string) bool { return t == table })
	s.tr.leaveOut(table)
	s.online.drop(table)
	s.c.refused.leave(table, s.c.cfg.publication, fmt.Errorf("%w; it was captured until %s. Once fixed it joins the stream again, but %s", why, s.received, rejoinedFix))
	return s.c.markLeftOut(ctx, table, s.received)
}

// nameClash returns the first of tables ("schema.table") that table would
// share a ClickHouse table (schema.TableName) or a Kafka topic (TopicName)
// with, and which of them; ok is false when it shares neither.
// schema.TableName and TopicName give every table its own name except when
// two tables' truncated SHA-256 hashes meet; this check turns even that
// into a clear refusal instead of two tables' rows in one place.
func (c *config) nameClash(table string, tables []string) (other, where string, ok bool) {
	src := sourceOf(table)
	name, topic := schema.TableName(src), c.topicOf(table)
	for _, o := range tables {
		if o == table {
			continue
		}
		switch {
		case schema.TableName(sourceOf(o)) == name:
			return o, "ClickHouse table " + schema.QuoteIdent(name), true
		case c.topicOf(o) == topic:
			return o, "Kafka topic " + topic, true
		}
	}
	return "", "", false
}

// checkNames returns, by table, a refusal of each of tables that would
// share a ClickHouse table or a Kafka topic with one before it in tables
// (see nameClash), naming both.
func (c *config) checkNames(tables []string) map[string]error {
	out := map[string]error{}
	for i, t := range tables {
		if other, where, clash := c.nameClash(t, tables[:i]); clash {
			out[t] = clashRefusal(t, other, where, c.publication)
		}
	}
	return out
}

// clashRefusal is why table is refused: it would load into where, as other
// does.
func clashRefusal(table, other, where, pub string) error {
	return refusal(reasonNameClash, "tables %s and %s would both load into %s: rename one of them in PostgreSQL, or leave %s out with --exclude-tables (or of publication %s)",
		quoteTable(other), quoteTable(table), where, quoteTable(table), pub)
}

// sourceOf returns the source of a "schema.table" name (schema names hold
// no dots, see publishedTables).
func sourceOf(table string) record.Source {
	sch, name, _ := strings.Cut(table, ".")
	return record.Source{Schema: sch, Table: name}
}
