package capture

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"

	"github.com/walhouse/walhouse/record"
)

// mapState is a StateStore in a map.
type mapState map[string][]byte

func (s mapState) Load(_ context.Context, key string) ([]byte, error) { return s[key], nil }
func (s mapState) Save(_ context.Context, key string, v []byte) error {
	s[key] = append([]byte(nil), v...)
	return nil
}

// TestRewriteSavedState holds the saved snapshot plan to what a rewrite
// promises across restarts: a pending copy is saved as a whole-table plan
// at the rewrite's position, keeping the table's publication entry and its
// inexact mark; a rewrite not copied marks the table inexact in its plan
// (a complete one when it had none, or when the pending copy is given up),
// and the rows of a rewrite's plan carry its position as their version.
func TestRewriteSavedState(t *testing.T) {
	ctx := context.Background()
	const table = "public.t"
	newCapturer := func(state mapState) *Capturer {
		cfg := defaults()
		cfg.slot, cfg.state = "s", state
		return &Capturer{cfg: cfg, log: slog.New(slog.DiscardHandler), refused: newRefusedTables(slog.New(slog.DiscardHandler))}
	}
	load := func(t *testing.T, state mapState) *snapshotPlan {
		t.Helper()
		p := &snapshotPlan{}
		if err := json.Unmarshal(state[stateKey("s", table)], p); err != nil {
			t.Fatalf("saved plan: %v", err)
		}
		return p
	}
	inexact := func(c *Capturer) float64 { return series(t, c.refused.inexact)[table] }

	t.Run("pending copy", func(t *testing.T) {
		state := mapState{}
		c := newCapturer(state)
		old := &snapshotPlan{Table: table, CP: "0/10", Complete: true, Membership: 7, LeftOut: "0/20", Chunks: 3, Done: []int{0, 1, 2}}
		if err := c.savePlan(ctx, old); err != nil {
			t.Fatal(err)
		}
		if err := c.saveRewritePending(ctx, rewrite{table: table, at: 0x500}); err != nil {
			t.Fatal(err)
		}
		p := load(t, state)
		if !p.Rewrite || p.Complete || p.CP != "0/500" || p.Chunks != 1 || len(p.Done) != 0 || p.Membership != 7 || !p.Inexact {
			t.Errorf("pending plan %+v: want an unfinished whole-table rewrite copy at 0/500, membership 7, inexact (left out before)", p)
		}
		if v := p.version(0x500); v != record.RewriteCopyVersion(0x500) {
			t.Errorf("a rewrite plan's rows have version %d, want %d", v, record.RewriteCopyVersion(0x500))
		}
		if v := old.version(0x10); v != record.SnapshotVersion {
			t.Errorf("a plain plan's rows have version %d, want 0", v)
		}
		if err := c.rewriteNotCopied(ctx, rewrite{table: table, at: 0x500}, "too large"); err != nil {
			t.Fatal(err)
		}
		if p := load(t, state); !p.Complete || !p.Inexact {
			t.Errorf("plan after the copy was given up %+v: want complete (no copy after a restart) and inexact", p)
		}
		if v := inexact(c); v != 1 {
			t.Errorf("walhouse_capture_tables_inexact = %v, want 1", v)
		}
	})
	t.Run("re-copy", func(t *testing.T) {
		state := mapState{}
		c := newCapturer(state)
		if err := c.saveRewritePending(ctx, rewrite{table: table, at: 0x500, recopy: "r1"}); err != nil {
			t.Fatal(err)
		}
		if p := load(t, state); !p.Rewrite || p.Recopy != "r1" || p.CP != "0/500" {
			t.Errorf("pending plan %+v: want a rewrite copy at 0/500 for re-copy r1", p)
		}
		// A rewrite before the copy is done copies at its own, later,
		// position: that copy answers the request too.
		if err := c.saveRewritePending(ctx, rewrite{table: table, at: 0x600}); err != nil {
			t.Fatal(err)
		}
		if p := load(t, state); p.Recopy != "r1" || p.CP != "0/600" {
			t.Errorf("plan after a rewrite %+v: want the copy at 0/600 to answer re-copy r1", p)
		}
		// A copy given up sends no done marker: the request is marked
		// refused, not answered.
		if err := c.rewriteNotCopied(ctx, rewrite{table: table, at: 0x600}, "too large"); err != nil {
			t.Fatal(err)
		}
		if p := load(t, state); p.Recopy != "" || p.RecopyRefused != "r1" || !p.Complete {
			t.Errorf("plan after the copy was given up %+v: want re-copy r1 refused", p)
		}
	})
	t.Run("not copied, no plan before", func(t *testing.T) {
		state := mapState{}
		c := newCapturer(state)
		if err := c.rewriteNotCopied(ctx, rewrite{table: table, at: 0x600}, "--rewrite-copy is off"); err != nil {
			t.Fatal(err)
		}
		if p := load(t, state); !p.Complete || !p.Inexact || p.Rewrite {
			t.Errorf("saved plan %+v: want a complete, inexact plan that copies nothing", p)
		}
		if v := inexact(c); v != 1 {
			t.Errorf("walhouse_capture_tables_inexact = %v, want 1", v)
		}
	})
}
