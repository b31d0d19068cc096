package testenv

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// HA is the local primary and physical standby of deploy/local/ha.sh
// (docs/ha.md), as its .local/ha.env describes them.
type HA struct {
	Major   int    // PostgreSQL major of both servers
	Primary string // URL of the primary
	Standby string // URL of the standby
	// Either names both servers with target_session_attrs=read-write:
	// whichever is the primary, as capture is given it to follow a failover.
	Either   string
	script   string
	settings []string // ha.sh's settings (ports, major), for Run
}

// RequireHA returns the local primary/standby pair, or skips t, saying
// what to run. The HA tests kill and promote servers and take minutes, so
// they run only when asked with WALHOUSE_HA=1 (make test-ha), never as
// part of make test; then a missing or broken pair fails t, and a pair of
// a major below minMajor skips it.
func RequireHA(t testing.TB, minMajor int) HA {
	t.Helper()
	if os.Getenv("WALHOUSE_HA") != "1" {
		t.Skip("the primary/standby tests run with make test-ha (or WALHOUSE_HA=1 and deploy/local/ha.sh start)")
	}
	vals := map[string]string{}
	if root, err := repoRoot(); err == nil {
		readEnvFile(filepath.Join(root, ".local", "ha.env"), vals)
	}
	get := func(name string) string {
		if v := os.Getenv(name); v != "" {
			return v
		}
		return vals[name]
	}
	absent := t.Fatalf
	ha := HA{Primary: get("WALHOUSE_HA_PRIMARY_URL"), Standby: get("WALHOUSE_HA_STANDBY_URL"), Either: get("WALHOUSE_HA_URL"), script: get("WALHOUSE_HA_SCRIPT")}
	ha.Major, _ = strconv.Atoi(get("WALHOUSE_HA_PG_MAJOR"))
	ha.settings = strings.Fields(get("WALHOUSE_HA_SETTINGS"))
	if ha.Primary == "" || ha.Standby == "" || ha.Either == "" || ha.script == "" {
		absent("no PostgreSQL primary/standby pair: start it with deploy/local/ha.sh start (make test-ha does)")
		return ha
	}
	if ha.Major < minMajor {
		t.Skipf("needs PostgreSQL %d or later, and the pair of deploy/local/ha.sh runs %d: PG_HA_MAJOR=%d deploy/local/ha.sh start", minMajor, ha.Major, max(minMajor, 17))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, s := range []struct {
		url     string
		standby bool
	}{{ha.Primary, false}, {ha.Standby, true}} {
		conn, err := pgx.Connect(ctx, s.url)
		if err != nil {
			absent("the primary/standby pair is not running (%v): deploy/local/ha.sh start", err)
			return ha
		}
		var recovering bool
		err = conn.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&recovering)
		conn.Close(ctx)
		if err != nil || recovering != s.standby {
			absent("the primary/standby pair is not as deploy/local/ha.sh makes it (%s: in recovery %v, %v), e.g. after a failover: deploy/local/ha.sh start restores it", s.url, recovering, err)
			return ha
		}
	}
	return ha
}

// Run runs deploy/local/ha.sh with args (kill-primary, promote, start) and
// fails t when it fails.
func (ha HA) Run(t testing.TB, args ...string) {
	t.Helper()
	cmd := exec.Command(ha.script, args...)
	cmd.Env = append(os.Environ(), ha.settings...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("ha.sh %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}
