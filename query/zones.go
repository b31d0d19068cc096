package query

import (
	"context"
	"fmt"
)

// TimeZones returns the time zones the ClickHouse server knows
// (system.time_zones), read once.
func (c *Catalog) TimeZones(ctx context.Context) (map[string]bool, error) {
	c.zonesMu.Lock()
	defer c.zonesMu.Unlock()
	if c.zones != nil {
		return c.zones, nil
	}
	rows, err := c.conn.Query(ctx, "SELECT time_zone FROM system.time_zones")
	if err != nil {
		return nil, fmt.Errorf("list the time zones of ClickHouse: %w", err)
	}
	defer rows.Close()
	zones := map[string]bool{}
	for rows.Next() {
		var z string
		if err := rows.Scan(&z); err != nil {
			return nil, fmt.Errorf("list the time zones of ClickHouse: %w", err)
		}
		zones[z] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list the time zones of ClickHouse: %w", err)
	}
	c.zones = zones
	return zones, nil
}

// zonesFor returns the server's time zones when req has a bucket in a
// zone other than UTC, else nil: most reads cost no look-up.
func (s *Server) zonesFor(ctx context.Context, req Request) (map[string]bool, error) {
	for _, bk := range req.Buckets {
		if bk.TimeZone != "" && bk.TimeZone != "UTC" {
			return s.catalog.TimeZones(ctx)
		}
	}
	return nil, nil
}
