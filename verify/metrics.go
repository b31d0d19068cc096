package verify

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are verify's Prometheus metrics, per table, from the rounds of
// a long-running `walhouse verify --every`.
type Metrics struct {
	rows       *prometheus.CounterVec
	mismatched *prometheus.GaugeVec
	changed    *prometheus.GaugeVec
	lsn        *prometheus.GaugeVec
	at         *prometheus.GaugeVec
	failures   *prometheus.CounterVec
}

// NewMetrics registers verify's metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		rows: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "walhouse_verify_rows_checked_total",
			Help: "PostgreSQL rows compared with ClickHouse FINAL by walhouse verify."}, []string{"table"}),
		mismatched: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "walhouse_verify_mismatched_rows",
			Help: "Rows that differ between PostgreSQL and ClickHouse FINAL in the table's last verified round, confirmed in two snapshots (after --repair: those the repair did not fix). Suspects beyond --max-mismatches are not counted: they are unconfirmed."}, []string{"table"}),
		changed: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "walhouse_verify_changed_since_rows",
			Help: "Rows that differed in the table's last round but changed since its snapshot: checked again next round, never reported."}, []string{"table"}),
		lsn: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "walhouse_verify_last_verified_lsn",
			Help: "WAL position (as a number) of the snapshot of the table's last verified round: ClickHouse equalled PostgreSQL there, but for walhouse_verify_mismatched_rows."}, []string{"table"}),
		at: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "walhouse_verify_last_verified_timestamp_seconds",
			Help: "Unix time the table's last round ended."}, []string{"table"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "walhouse_verify_failures_total",
			Help: "Rounds in which a table could not be verified (not loaded up to the snapshot, a timeout, a connection lost); the report's errors say why."}, []string{"table"}),
	}
	reg.MustRegister(m.rows, m.mismatched, m.changed, m.lsn, m.at, m.failures)
	return m
}

// Observe records a table's verified round.
func (m *Metrics) Observe(res TableResult) {
	if m == nil {
		return
	}
	left := 0
	for _, x := range res.Mismatches {
		if !x.Repaired {
			left++
		}
	}
	m.rows.WithLabelValues(res.Table).Add(float64(res.RowsChecked))
	m.mismatched.WithLabelValues(res.Table).Set(float64(left))
	m.changed.WithLabelValues(res.Table).Set(float64(res.ChangedSince))
	m.lsn.WithLabelValues(res.Table).Set(float64(res.Snapshot))
	m.at.WithLabelValues(res.Table).Set(float64(res.VerifiedAt.Unix()))
}

// Failed records a round in which table could not be verified.
func (m *Metrics) Failed(table string) {
	if m == nil {
		return
	}
	m.failures.WithLabelValues(table).Inc()
}
