package capture

import "testing"

// TestSweepPending: only a rewrite plan whose copy was made in full, and
// that answers no re-copy request, sends its done markers; a plan whose
// copy was given up (rewriteNotCopied marks it complete) must not, as
// the sweep would then remove every row.
func TestSweepPending(t *testing.T) {
	copied := func(mod func(p *snapshotPlan)) *snapshotPlan {
		p := &snapshotPlan{Table: "public.a", CP: "0/10", Rewrite: true, Sweep: true, Chunks: 2, Done: []int{0, 1}, Complete: true}
		mod(p)
		return p
	}
	for _, c := range []struct {
		name string
		plan *snapshotPlan
		want bool
	}{
		{"copied in full", copied(func(*snapshotPlan) {}), true},
		{"markers sent", copied(func(p *snapshotPlan) { p.Sweep = false }), false},
		{"copy under way", copied(func(p *snapshotPlan) { p.Done, p.Complete = []int{0}, false }), false},
		{"copy given up", copied(func(p *snapshotPlan) { p.Done = nil }), false},
		{"pending, never planned", copied(func(p *snapshotPlan) { p.Chunks, p.Done = 0, nil }), false},
		{"answers a re-copy request", copied(func(p *snapshotPlan) { p.Recopy = "wh.public.a/0/1-2" }), false},
		{"no rewrite", copied(func(p *snapshotPlan) { p.Rewrite = false }), false},
	} {
		if got := c.plan.sweepPending(); got != c.want {
			t.Errorf("%s: sweepPending() = %v, want %v", c.name, got, c.want)
		}
	}
}
