package capture

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walhouse/walhouse/record"
)

// maxPollInterval bounds how long a table added to the publication waits to
// be noticed when none of its changes has come through the stream yet.
const maxPollInterval = 10 * time.Second

// pollTables follows the publication while streaming: a table added to it
// joins the stream (with an online snapshot), a table removed from it leaves
// (its heartbeats stop, so its freshness stops advancing, truthfully).
func (s *stream) pollTables(ctx context.Context) error {
	interval := maxPollInterval
	if hb := s.c.cfg.heartbeat; hb > 0 && hb < interval {
		interval = hb
	}
	if time.Since(s.polledAt) < interval {
		return nil
	}
	s.polledAt = time.Now()
	published, err := publishedTables(ctx, s.cat.conn, s.c.cfg.publication)
	if err != nil {
		return err
	}
	for _, t := range published {
		if !s.c.cfg.excluded(t) && !slices.Contains(s.tables, t) {
			if err := s.addTable(ctx, t); err != nil {
				return err
			}
		}
	}
	s.tables = slices.DeleteFunc(s.tables, func(t string) bool {
		if slices.Contains(published, t) {
			return false
		}
		s.c.log.Warn("table left the publication: its changes are no longer captured", "table", t, "publication", s.c.cfg.publication)
		return true
	})
	return nil
}

// publishedTables lists a publication's tables as "schema.table".
func publishedTables(ctx context.Context, conn *pgx.Conn, pub string) ([]string, error) {
	rows, err := conn.Query(ctx, `SELECT schemaname, tablename FROM pg_catalog.pg_publication_tables WHERE pubname = $1 ORDER BY 1, 2`, pub)
	if err != nil {
		return nil, fmt.Errorf("list the tables of publication %s: %w", pub, err)
	}
	var (
		out           []string
		schema, table string
	)
	_, err = pgx.ForEachRow(rows, []any{&schema, &table}, func() error {
		if strings.Contains(schema, ".") {
			return fmt.Errorf("table %q.%q: schema names with dots are not supported; leave it out of publication %s or rename the schema", schema, table, pub)
		}
		out = append(out, schema+"."+table)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list the tables of publication %s: %w", pub, err)
	}
	return out, nil
}

// addTable takes a table that joined the publication into the stream and
// queues its online snapshot.
func (s *stream) addTable(ctx context.Context, table string) error {
	cfg := &s.c.cfg
	if err := checkTable(ctx, s.cat.conn, cfg, table); err != nil {
		return fmt.Errorf("table %s joined publication %s but cannot be captured: %w; fix the table, or leave it out with --exclude-tables %s, then restart capture", table, cfg.publication, err, table)
	}
	if tc := cfg.topics; tc != nil {
		topic := cfg.topicOf(table)
		if err := tc.CreateTopic(ctx, topic, cfg.partitions, cfg.replication); err != nil {
			return err
		}
		s.topics[topic] = true
	}
	s.tables = append(s.tables, table)
	s.c.log.Info("table joined the stream", "table", table, "publication", cfg.publication, "lsn", s.received, "snapshot", cfg.snapshot)
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
