package monitor

import (
	"math"
	"testing"
	"time"
)

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

func TestBytesAtRisk(t *testing.T) {
	// A log of 1,000 records of 100 bytes (offsets 0 to 999), the sink at
	// offset 600: 400 records, 40,000 bytes unread.
	base := byteRetention{limit: 100_000, size: 100_000, start: 0, end: 1000, unread: 600}
	with := func(f func(*byteRetention)) byteRetention { r := base; f(&r); return r }
	for _, c := range []struct {
		name string
		r    byteRetention
		want int64
	}{
		{"unread bytes within the limit, no pace yet", base, 0},
		{"unread bytes past the limit, no pace yet: the oldest excess", with(func(r *byteRetention) { r.limit = 25_000 }), 150},
		{"no retention.bytes", with(func(r *byteRetention) { r.limit = 0 }), 0},
		{"nothing unread", with(func(r *byteRetention) { r.unread = 1000; r.limit = 1 }), 0},
		{"an empty log", with(func(r *byteRetention) { r.start, r.size = 1000, 0 }), 0},
		// 400 records at 40 a second: 10 s, while 500 a second are
		// produced: 5,000 records, 500,000 bytes more before the last is read.
		{"produced faster than read: the excess", with(func(r *byteRetention) { r.produced, r.read, r.paceKnown = 500, 40, true }), 400},
		{"produced and read at a pace within the limit", with(func(r *byteRetention) { r.produced, r.read, r.paceKnown = 10, 400, true }), 0},
		// 40,000 unread + 10/s × 100 bytes × 400/8 s = 50,000 more: 90,000
		// bytes against 60,000, 300 records over.
		{"unread and produced together past the limit", with(func(r *byteRetention) {
			r.limit, r.produced, r.read, r.paceKnown = 60_000, 10, 8, true
		}), 300},
		{"a sink that reads nothing while records are produced", with(func(r *byteRetention) { r.produced, r.read, r.paceKnown = 1, 0, true }), 400},
		{"a sink that reads nothing, nothing produced", with(func(r *byteRetention) { r.produced, r.read, r.paceKnown = 0, 0, true }), 0},
		{"pace not measured yet is not weighed", with(func(r *byteRetention) { r.produced, r.read, r.paceKnown = 1, 0, false }), 0},
	} {
		if got := bytesAtRisk(c.r); got != c.want {
			t.Errorf("%s: bytesAtRisk(%+v) = %d, want %d", c.name, c.r, got, c.want)
		}
	}
}

func TestPaceWindow(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	type step struct {
		sec            int
		end, read      int64
		produced, rate float64 // the rates expected, when known
		known          bool
		kept           int // samples kept after it
	}
	for _, c := range []struct {
		name  string
		steps []step
	}{
		{"a pace is known once a minute is spanned, then over the last minute or so", []step{
			{sec: 0, end: 100, read: 0, kept: 1},
			{sec: 30, end: 400, read: 0, kept: 2},
			{sec: 60, end: 700, read: 600, produced: 10, rate: 10, known: true, kept: 3},
			// The sample at 0 goes: 30 s is more than a minute back from 91.
			{sec: 91, end: 1010, read: 610, produced: 10, rate: 10, known: true, kept: 3},
		}},
		{"probes a second apart keep a sample every 2 s", []step{
			{sec: 0, end: 0, kept: 1}, {sec: 1, end: 0, kept: 1}, {sec: 2, end: 0, kept: 2}, {sec: 3, end: 0, kept: 2},
		}},
		{"offsets that go back start afresh", []step{
			{sec: 0, end: 100, read: 50, kept: 1},
			{sec: 61, end: 200, read: 50, produced: 100.0 / 61, known: true, kept: 2},
			{sec: 62, end: 10, read: 0, kept: 1},
		}},
	} {
		var w paceWindow
		for i, s := range c.steps {
			cur := paceSample{at: at(s.sec), end: s.end, read: s.read}
			w = w.next(cur)
			p, r, known := w.rates(cur)
			if known != s.known || known && (math.Abs(p-s.produced) > 1e-9 || math.Abs(r-s.rate) > 1e-9) || len(w.samples) != s.kept {
				t.Errorf("%s, step %d: rates %v %v known %v with %d samples; want %v %v known %v with %d", c.name, i, p, r, known, len(w.samples), s.produced, s.rate, s.known, s.kept)
			}
		}
	}
}
