package main

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"
)

// measurement is one reader's run over the same rows.
type measurement struct {
	name string
	rows int64
	took time.Duration
	rss  int64  // peak RSS in bytes, 0 when not measured
	note string // e.g. a sanity count

	cpu      float64    // CPU seconds of the reader process
	services serviceCPU // CPU seconds the services spent meanwhile
}

func (m measurement) rate() float64 { return float64(m.rows) / m.took.Seconds() }

// comparison puts walhouse next to a PostgreSQL reference.
type comparison struct {
	title       string
	ref         measurement
	walhouse    measurement
	ratioTarget float64
	rssTarget   int64
}

type results struct {
	comparisons []comparison
	profile     []string // lines about the profiled run, if any
}

func (r *results) add(c comparison) { r.comparisons = append(r.comparisons, c) }

func (r *results) print(w io.Writer) {
	for _, c := range r.comparisons {
		fmt.Fprintf(w, "\n%s\n", c.title)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "reader\trows\tseconds\trows/s\tpeak RSS\tCPU s: reader\tpostgres\tkafka\t")
		for _, m := range []measurement{c.ref, c.walhouse} {
			rss := "-"
			if m.rss > 0 {
				rss = fmt.Sprintf("%.0f MB", float64(m.rss)/(1<<20))
			}
			fmt.Fprintf(tw, "%s\t%d\t%.2f\t%.0f\t%s\t%.1f\t%.1f\t%.1f\t\n", m.name, m.rows, m.took.Seconds(), m.rate(), rss, m.cpu, m.services.postgres, m.services.kafka)
		}
		tw.Flush()
		ratio := c.walhouse.rate() / c.ref.rate()
		fmt.Fprintf(w, "ratio walhouse/%s: %.2f (target >= %.1f: %s)\n", c.ref.name, ratio, c.ratioTarget, verdict(ratio >= c.ratioTarget))
		fmt.Fprintf(w, "walhouse peak RSS: %.0f MB (target < %.0f MB: %s)\n", float64(c.walhouse.rss)/(1<<20), float64(c.rssTarget)/(1<<20), verdict(c.walhouse.rss < c.rssTarget))
		if c.walhouse.note != "" {
			fmt.Fprintf(w, "check: %s\n", c.walhouse.note)
		}
	}
	if len(r.profile) > 0 {
		fmt.Fprintln(w)
		for _, l := range r.profile {
			fmt.Fprintln(w, l)
		}
	}
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "NOT met"
}
