package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/walhouse/walhouse/query"
)

// variant is one way of reading: the consistency the dashboard asks for.
type variant struct {
	name        string
	consistency query.Consistency // "" is the default, FINAL
}

var variants = []variant{
	{name: "final", consistency: ""},
	{name: "approximate", consistency: query.Approximate},
}

// request is one of the two requests of a dashboard.
type request int

const (
	summary   request = iota // per-status count and revenue, last 30 days
	listing                  // the 50 most recent orders, last 30 days
	dashboard                // both, one after the other
)

func (r request) String() string {
	switch r {
	case summary:
		return "summary"
	case listing:
		return "listing"
	case dashboard:
		return "dashboard"
	default:
		return "request(" + strconv.Itoa(int(r)) + ")"
	}
}

// sample is the latency of each dashboard load, and what it returned.
type sample struct {
	latency []time.Duration
	rows    int64 // rows counted by the summary, or returned by the listing
}

// measurer loads dashboards through the API.
type measurer struct {
	api     *api
	now     time.Time
	tenants int
	layouts []apiLayout // the tables read, one per layout
	next    int         // the tenant of the next load
}

// results holds one layout's samples by variant, then request.
type results map[string]map[request]*sample

// measure loads the dashboard n times per layout and variant, rotating
// the layouts and alternating the variants so that all see the same
// conditions, each round for the next tenant. Results are by layout name.
func (m *measurer) measure(ctx context.Context, n int) (map[string]results, error) {
	all := map[string]results{}
	for _, l := range m.layouts {
		res := results{}
		for _, v := range variants {
			res[v.name] = map[request]*sample{summary: {}, listing: {}, dashboard: {}}
		}
		all[l.name] = res
	}
	for i := range n {
		t := m.next % m.tenants
		m.next++
		for k := range m.layouts {
			l := m.layouts[(i+k)%len(m.layouts)]
			for j := range variants {
				// Swap which variant goes first on every other load.
				v := variants[(i+j)%len(variants)]
				if err := m.load(ctx, l.table, t, v, all[l.name][v.name]); err != nil {
					return nil, fmt.Errorf("dashboard of %s on %s, %s: %w", tenant(t), l.name, v.name, err)
				}
			}
		}
	}
	return all, nil
}

// request returns request r of the dashboard, read as v.
func (m *measurer) request(r request, v variant) query.Request {
	period := &query.TimeRange{Column: "created_at", From: m.now.AddDate(0, 0, -30).Format(time.RFC3339), To: m.now.Format(time.RFC3339)}
	if r == summary {
		return query.Request{
			GroupBy:     []string{"status"},
			Aggregates:  []query.Aggregate{{Fn: "count", As: "orders"}, {Fn: "sum", Column: "amount", As: "revenue"}},
			TimeRange:   period,
			Consistency: v.consistency,
		}
	}
	return query.Request{
		Columns:     []string{"id", "customer_id", "status", "amount", "created_at"},
		TimeRange:   period,
		OrderBy:     []query.Order{{Column: "created_at", Desc: true}},
		Limit:       50,
		Consistency: v.consistency,
	}
}

// load runs one dashboard on table: the summary, then the listing.
func (m *measurer) load(ctx context.Context, table string, t int, v variant, into map[request]*sample) error {
	var total time.Duration
	for _, r := range []request{summary, listing} {
		start := time.Now()
		resp, err := m.api.query(ctx, table, t, m.request(r, v))
		took := time.Since(start)
		if err != nil {
			return fmt.Errorf("%s: %w", r, err)
		}
		total += took
		s := into[r]
		s.latency = append(s.latency, took)
		if r == listing {
			s.rows += int64(len(resp.Data))
			continue
		}
		for _, row := range resp.Data {
			n, err := jsonInt(row["orders"])
			if err != nil {
				return fmt.Errorf("%s: orders of status %s: %w", r, row["status"], err)
			}
			s.rows += n
		}
	}
	into[dashboard].latency = append(into[dashboard].latency, total)
	return nil
}

// jsonInt reads an integer the API wrote as a JSON number or, for 64-bit
// integers, possibly as a string.
func jsonInt(raw json.RawMessage) (int64, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return strconv.ParseInt(s, 10, 64)
	}
	var n int64
	err := json.Unmarshal(raw, &n)
	return n, err
}

// stats are the figures printed for one sample.
type stats struct {
	p50, p99, mean time.Duration
}

func statsOf(ds []time.Duration) stats {
	if len(ds) == 0 {
		return stats{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	var sum time.Duration
	for _, d := range s {
		sum += d
	}
	return stats{p50: percentile(s, 50), p99: percentile(s, 99), mean: sum / time.Duration(len(s))}
}

// percentile is the nearest-rank percentile of sorted.
func percentile(sorted []time.Duration, p int) time.Duration {
	rank := (p*len(sorted) + 99) / 100 // ceil(p/100 * n)
	return sorted[max(rank, 1)-1]
}

func (b *bench) print(ds []dataset, all map[string]results) {
	merges := "stopped"
	if b.o.merges {
		merges = "running"
	}
	fmt.Printf("\nquery API: %d current rows + older versions and tombstones, %d tenants (merges %s); %d dashboard loads per layout and variant\n",
		b.o.rows, b.o.tenants, merges, b.o.requests)
	fmt.Println("summary: count and sum(amount) by status, last 30 days; listing: 50 most recent orders, last 30 days")
	fmt.Println("rows: per load, rows counted by the summary (approximate counts older versions too) or returned by the listing")
	type line struct {
		d          dataset
		final, apx stats
		rows       float64 // rows counted by FINAL summaries, per load
	}
	var lines []line
	for _, d := range ds {
		res := all[d.layout.name]
		fmt.Printf("\nlayout %s: %s\n%s: %d rows stored, %d read FINAL, %d active parts in %d partitions\n",
			d.layout.name, d.layout.about, d.layout.table, d.stored, d.current, d.parts, d.partitions)
		fmt.Printf("%-10s %-12s %10s %10s %10s %12s\n", "request", "variant", "p50", "p99", "mean", "rows")
		per := map[string]map[request]stats{}
		for _, r := range []request{summary, listing, dashboard} {
			for _, v := range variants {
				s := res[v.name][r]
				st := statsOf(s.latency)
				if per[v.name] == nil {
					per[v.name] = map[request]stats{}
				}
				per[v.name][r] = st
				rows := "-"
				if r != dashboard && len(s.latency) > 0 {
					rows = strconv.FormatFloat(float64(s.rows)/float64(len(s.latency)), 'f', 0, 64)
				}
				fmt.Printf("%-10s %-12s %10s %10s %10s %12s\n", r, v.name, ms(st.p50), ms(st.p99), ms(st.mean), rows)
			}
		}
		fmt.Printf("ratio final/approximate (p50, p99, mean):\n")
		for _, r := range []request{summary, listing, dashboard} {
			f, a := per["final"][r], per["approximate"][r]
			fmt.Printf("%-10s %6s %6s %6s\n", r, ratio(f.p50, a.p50), ratio(f.p99, a.p99), ratio(f.mean, a.mean))
		}
		s := res["final"][summary]
		lines = append(lines, line{d: d, final: per["final"][dashboard], apx: per["approximate"][dashboard], rows: float64(s.rows) / float64(max(len(s.latency), 1))})
	}
	fmt.Printf("\ndashboard (both requests) by layout, same rows, same tenants:\n")
	fmt.Printf("%-22s %7s %11s %11s %11s %11s %7s %7s %7s %12s\n", "layout", "parts", "FINAL p50", "p99", "plain p50", "p99", "p50 ×", "p99 ×", "mean ×", "FINAL rows")
	for _, l := range lines {
		fmt.Printf("%-22s %7d %11s %11s %11s %11s %7s %7s %7s %12.0f\n", l.d.layout.name, l.d.parts, ms(l.final.p50), ms(l.final.p99), ms(l.apx.p50), ms(l.apx.p99),
			ratio(l.final.p50, l.apx.p50), ratio(l.final.p99, l.apx.p99), ratio(l.final.mean, l.apx.mean), l.rows)
	}
	// Every layout holds the same rows and is read for the same tenants:
	// FINAL must count the same rows in each, whatever its partitions.
	for _, l := range lines[1:] {
		if l.rows != lines[0].rows {
			fmt.Printf("WARNING: FINAL counted %.0f rows per summary on %s but %.0f on %s: the layouts disagree\n", l.rows, l.d.layout.name, lines[0].rows, lines[0].d.layout.name)
		}
	}
}

func ms(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 1, 64) + " ms"
}

func ratio(a, b time.Duration) string {
	if b <= 0 {
		return "-"
	}
	return strconv.FormatFloat(float64(a)/float64(b), 'f', 2, 64)
}
