package monitor

import "testing"

func TestLostOffsets(t *testing.T) {
	for _, c := range []struct {
		name                string
		commit, start, want int64
	}{
		{"nothing committed", -1, 40, 0},
		{"committed at the log start", 40, 40, 0},
		{"committed past the log start", 45, 40, 0},
		{"committed below the log start", 10, 40, 30},
	} {
		if got := lostOffsets(c.commit, c.start); got != c.want {
			t.Errorf("%s: lostOffsets(%d, %d) = %d, want %d", c.name, c.commit, c.start, got, c.want)
		}
	}
}
