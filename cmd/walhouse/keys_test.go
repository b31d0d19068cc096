package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/walhouse/walhouse/capture"
	"github.com/walhouse/walhouse/cli"
	"github.com/walhouse/walhouse/harness/testenv"
	"github.com/walhouse/walhouse/idempotency"
)

// TestKeyTableNamesAgree: capture leaves out the table the idempotency
// package writes (capture may not import it, so each names it).
func TestKeyTableNamesAgree(t *testing.T) {
	if capture.IdempotencyKeyTable != idempotency.KeyTable {
		t.Errorf("capture leaves out %s, Layer 1 writes %s", capture.IdempotencyKeyTable, idempotency.KeyTable)
	}
}

func TestParseTimeOfDay(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"03:00", 3 * time.Hour, true},
		{"00:00", 0, true},
		{"23:59", 23*time.Hour + 59*time.Minute, true},
		{"3:00", 3 * time.Hour, true},
		{"24:00", 0, false},
		{"03:60", 0, false},
		{"0300", 0, false},
		{"", 0, false},
	} {
		got, err := parseTimeOfDay(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("parseTimeOfDay(%q) = %s, %v; want %s, ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

// TestIntegrationKeysPrune runs walhouse keys prune over expired keys:
// exit 0, they are gone, the young ones stay; and its usage errors.
func TestIntegrationKeysPrune(t *testing.T) {
	env := testenv.Require(t, "pg")
	ctx := context.Background()
	pg := testenv.Layer1PG(t, env.PG)
	tenant := testenv.Name("prune")
	if _, err := pg.Exec(ctx, `INSERT INTO `+idempotency.KeyTable+` (tenant_id, idempotency_key, fingerprint, created_at)
		SELECT $1, gen_random_uuid(), sha256(i::text::bytea), now() - make_interval(days => CASE WHEN i <= 30 THEN 8 ELSE 6 END)
		FROM generate_series(1, 40) i`, tenant); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = pg.Exec(ctx, `DELETE FROM `+idempotency.KeyTable+` WHERE tenant_id = $1`, tenant) })
	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		output string
	}{
		{"no subcommand", []string{"keys", "--pg", env.PG}, cli.ExitUsage, "want a subcommand: prune"},
		{"bad time", []string{"keys", "prune", "--pg", env.PG, "--daily-at", "3am"}, cli.ExitUsage, "--daily-at"},
		{"zero days", []string{"keys", "prune", "--pg", env.PG, "--retention-days", "0"}, cli.ExitUsage, "at least 1"},
		{"prune", []string{"keys", "prune", "--pg", env.PG, "--retention-days", "7", "--batch-size", "7"}, cli.ExitOK, "deleted "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := run(tc.args, &stdout, &stderr); code != tc.code || !strings.Contains(stdout.String()+stderr.String(), tc.output) {
				t.Errorf("walhouse %q: exit %d, want %d; output lacks %q:\n%s%s", tc.args, code, tc.code, tc.output, stdout.String(), stderr.String())
			}
		})
	}
	var left, young int
	if err := pg.QueryRow(ctx, `SELECT count(*) FILTER (WHERE created_at < now() - interval '7 days'), count(*) FROM `+idempotency.KeyTable+` WHERE tenant_id = $1`, tenant).Scan(&left, &young); err != nil {
		t.Fatal(err)
	}
	if left != 0 || young != 10 {
		t.Errorf("after prune: %d expired keys left, %d keys in all; want 0 and the 10 young ones", left, young)
	}
}
