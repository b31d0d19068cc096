package capture

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// serverVersion is PostgreSQL's server_version_num (170004 for 17.4),
// read once per session by readServerVersion. What capture does
// differently from one major to another is decided by its methods, here
// and nowhere else (docs/postgres-versions.md says what and why).
type serverVersion int

// The majors walhouse is tested on (make test-pg-matrix).
const (
	oldestMajor = 13 // publish_via_partition_root, wal_status
	newestMajor = 18
)

// readServerVersion returns the version of the server conn is connected
// to, refusing majors older than walhouse supports.
func readServerVersion(ctx context.Context, conn *pgx.Conn) (serverVersion, error) {
	var n int
	if err := conn.QueryRow(ctx, "SELECT current_setting('server_version_num')::int").Scan(&n); err != nil {
		return 0, fmt.Errorf("read the server version: %w", err)
	}
	v := serverVersion(n)
	return v, v.check()
}

// major returns the major version: 17 for 17.4.
func (v serverVersion) major() int { return int(v) / 10000 }

// String returns the version as PostgreSQL writes it, e.g. "17.4".
func (v serverVersion) String() string {
	return fmt.Sprintf("%d.%d", v.major(), int(v)%10000)
}

// check refuses a major older than the oldest walhouse supports: capture
// needs publish_via_partition_root and pg_replication_slots.wal_status,
// both new in 13.
func (v serverVersion) check() error {
	if v.major() < oldestMajor {
		return fmt.Errorf("PostgreSQL %s is not supported: walhouse needs PostgreSQL %d or newer (docs/postgres-versions.md)", v, oldestMajor)
	}
	return nil
}

// tested reports whether the major is one make test-pg-matrix runs; a
// newer one is used as the newest tested is, with a warning.
func (v serverVersion) tested() bool { return v.major() <= newestMajor }

// logicalMessages reports whether pgoutput can stream logical messages
// (its messages option, 14+). Heartbeats and the DDL event trigger's
// notices travel as logical messages; without them capture places
// heartbeats by WAL position (walBeat) and follows schema changes from
// the catalog (docs/limits.md).
func (v serverVersion) logicalMessages() bool { return v.major() >= 14 }

// publicationFilters reports whether publications can filter rows and
// columns (15+), which capture's copies then read through
// (publicationEntry).
func (v serverVersion) publicationFilters() bool { return v.major() >= 15 }

// publishesGenerated reports whether a publication can send generated
// columns (publish_generated_columns, or a column list naming them: 18+).
func (v serverVersion) publishesGenerated() bool { return v.major() >= 18 }

// pluginArgs returns pgoutput's options for publication. Capture speaks
// protocol version 1 on every major: version 2's streaming of large
// in-progress transactions would hand capture changes before it knows
// whether and at which LSN they commit, which its eventIds and versions
// are made of (docs/postgres-versions.md); versions 3 and 4 add two-phase
// commit and parallel streaming on top of it.
func (v serverVersion) pluginArgs(publication string) []string {
	args := []string{"proto_version '1'", "publication_names '" + strings.ReplaceAll(publication, "'", "''") + "'"}
	if v.logicalMessages() {
		args = append(args, "messages 'true'")
	}
	return args
}
