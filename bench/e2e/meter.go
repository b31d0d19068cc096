package main

import (
	"sync"
	"time"

	"github.com/walhouse/walhouse/harness/testenv"
)

// usage is the CPU and memory one process (or service) used in a phase.
type usage struct {
	Process    string  `json:"process"`
	CPUSeconds float64 `json:"cpu_seconds"`
	PeakRSSMB  float64 `json:"peak_rss_mb"`
}

// tracked is one process a meter follows.
type tracked struct {
	name string
	cpu  func() float64
	rss  func() int64
	// peak returns the process's lifetime peak (VmHWM), for processes that
	// started within the phase; nil otherwise.
	peak func() (int64, error)
	cpu0 float64
	max  int64
}

// meter follows the CPU time and resident memory of the local services
// and of the benchmark's processes during one phase: CPU as the difference
// of two readings, peak memory as the largest of samples taken every
// sampleInterval (and VmHWM for processes that started within the phase).
// PostgreSQL counts its backends; its memory is their summed Pss.
type meter struct {
	began time.Time
	mu    sync.Mutex
	procs []*tracked
	stop  chan struct{}
	done  chan struct{}
}

const sampleInterval = 500 * time.Millisecond

// startMeter starts following the services and procs.
func (b *bench) startMeter(procs ...*testenv.Process) *meter {
	m := &meter{began: time.Now(), stop: make(chan struct{}), done: make(chan struct{})}
	m.add(procs...)
	for _, s := range testenv.AllServices() {
		m.track(&tracked{
			name: string(s),
			cpu:  func() float64 { return testenv.ServiceCPU(b.o.localDir, s) },
			rss:  func() int64 { return testenv.ServiceRSS(b.o.localDir, s) },
		})
	}
	go m.sample()
	return m
}

// add follows more processes, e.g. one started after the meter.
func (m *meter) add(procs ...*testenv.Process) {
	for _, p := range procs {
		t := &tracked{
			name: p.Name(),
			cpu:  p.CPUSeconds,
			rss:  func() int64 { n, _ := testenv.RSS(p.Pid()); return n },
		}
		if !p.Started().Before(m.began) {
			t.peak = p.PeakRSS
		}
		m.track(t)
	}
}

func (m *meter) track(t *tracked) {
	t.cpu0 = t.cpu()
	t.max = t.rss()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.procs = append(m.procs, t)
}

func (m *meter) sample() {
	defer close(m.done)
	tick := time.NewTicker(sampleInterval)
	defer tick.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-tick.C:
		}
		m.mu.Lock()
		procs := append([]*tracked(nil), m.procs...)
		m.mu.Unlock()
		for _, t := range procs {
			t.max = max(t.max, t.rss())
		}
	}
}

// finish stops sampling and returns what each process used since it was
// tracked, in the order tracked. Call it while the processes still run.
func (m *meter) finish() []usage {
	close(m.stop)
	<-m.done
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]usage, 0, len(m.procs))
	for _, t := range m.procs {
		peak := max(t.max, t.rss())
		if t.peak != nil {
			if n, err := t.peak(); err == nil {
				peak = max(peak, n)
			}
		}
		out = append(out, usage{Process: t.name, CPUSeconds: t.cpu() - t.cpu0, PeakRSSMB: float64(peak) / (1 << 20)})
	}
	return out
}

// totalCPU returns the CPU seconds of every process in u.
func totalCPU(u []usage) float64 {
	var s float64
	for _, x := range u {
		s += x.CPUSeconds
	}
	return s
}

// cpuOf returns the CPU seconds of the named process in u (0 if absent).
func cpuOf(u []usage, name string) float64 {
	for _, x := range u {
		if x.Process == name {
			return x.CPUSeconds
		}
	}
	return 0
}
