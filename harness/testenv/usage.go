package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/prometheus/procfs"
)

// Service is one of the local services deploy/local/services.sh runs.
type Service string

// The local services.
const (
	PostgreSQL Service = "postgres"
	Kafka      Service = "kafka"
	Redis      Service = "redis"
	ClickHouse Service = "clickhouse"
)

// AllServices lists the local services in the order benchmarks print them.
func AllServices() []Service { return []Service{PostgreSQL, Kafka, ClickHouse, Redis} }

// pidFile is where services.sh keeps the service's pid, under its
// .local directory.
func (s Service) pidFile(localDir string) string {
	switch s {
	case PostgreSQL:
		return filepath.Join(localDir, "postgres", "data", "postmaster.pid")
	case Kafka:
		return filepath.Join(localDir, "kafka", "kafka.pid")
	case Redis:
		return filepath.Join(localDir, "redis", "redis.pid")
	case ClickHouse:
		return filepath.Join(localDir, "clickhouse", "clickhouse.pid")
	default:
		return ""
	}
}

// ServicePID returns the pid of the running service, from the pid file
// services.sh keeps under localDir (.local).
func ServicePID(localDir string, s Service) (int, error) {
	path := s.pidFile(localDir)
	if path == "" {
		return 0, fmt.Errorf("unknown service %q", s)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("the pid of %s: %w (is it running? make services)", s, err)
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil {
		return 0, fmt.Errorf("the pid of %s in %s: %w", s, path, err)
	}
	return pid, nil
}

// ServiceCPU returns the CPU seconds the service used so far: its main
// process, its exited children and its live ones (PostgreSQL's backends,
// Redis's save forks). Differences between two readings tell how much CPU
// some work made the service spend. A service that is not running counts 0.
func ServiceCPU(localDir string, s Service) float64 {
	pid, err := ServicePID(localDir, s)
	if err != nil {
		return 0
	}
	return ProcessTreeCPU(pid)
}

// ServiceRSS returns the memory the service holds now, in bytes: for
// PostgreSQL the sum over its processes of their proportional share (Pss,
// so shared buffers count once), for the others their resident set. A
// service that is not running counts 0.
func ServiceRSS(localDir string, s Service) int64 {
	pid, err := ServicePID(localDir, s)
	if err != nil {
		return 0
	}
	if s != PostgreSQL {
		n, _ := RSS(pid)
		return n
	}
	var total int64
	for _, p := range append([]int{pid}, children(pid)...) {
		if proc, err := procfs.NewProc(p); err == nil {
			if r, err := proc.ProcSMapsRollup(); err == nil {
				total += int64(r.Pss)
			}
		}
	}
	return total
}

// ProcessCPU returns the CPU seconds (user + system) of process pid, those
// of its waited-for children, and its parent's pid.
func ProcessCPU(pid int) (own, reaped float64, ppid int, err error) {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return 0, 0, 0, err
	}
	st, err := p.Stat()
	if err != nil {
		return 0, 0, 0, err
	}
	return st.CPUTime(), float64(st.CUTime+st.CSTime) / userHZ, st.PPID, nil
}

// userHZ is the unit of the CPU times in /proc/<pid>/stat: 100 on every
// Linux architecture Go supports (procfs assumes the same).
const userHZ = 100

// ProcessTreeCPU returns the CPU seconds of pid, of its exited children
// and of its live children.
func ProcessTreeCPU(pid int) float64 {
	own, reaped, _, err := ProcessCPU(pid)
	if err != nil {
		return 0
	}
	total := own + reaped
	for _, c := range children(pid) {
		if cpu, _, _, err := ProcessCPU(c); err == nil {
			total += cpu
		}
	}
	return total
}

// children returns the pids of pid's live children.
func children(pid int) []int {
	procs, err := procfs.AllProcs()
	if err != nil {
		return nil
	}
	var out []int
	for _, p := range procs {
		if st, err := p.Stat(); err == nil && st.PPID == pid {
			out = append(out, p.PID)
		}
	}
	return out
}

// RSS returns the resident memory of process pid now, in bytes.
func RSS(pid int) (int64, error) {
	st, err := status(pid)
	return int64(st.VmRSS), err
}

// PeakRSS returns the most resident memory process pid has used so far
// (VmHWM from /proc, Linux only). It must be read while the process runs.
func PeakRSS(pid int) (int64, error) {
	st, err := status(pid)
	if err == nil && st.VmHWM == 0 {
		err = fmt.Errorf("no VmHWM in /proc/%d/status", pid)
	}
	if err != nil {
		return 0, fmt.Errorf("read the peak memory: %w", err)
	}
	return int64(st.VmHWM), nil
}

func status(pid int) (procfs.ProcStatus, error) {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return procfs.ProcStatus{}, err
	}
	return p.NewStatus()
}
