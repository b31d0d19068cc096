package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// clockTicks is USER_HZ, the unit of the CPU times in /proc/<pid>/stat; it
// is 100 on every Linux architecture Go supports.
const clockTicks = 100

// serviceCPU is the CPU time, in seconds, used so far by the local
// PostgreSQL (postmaster and every backend, live or exited) and the Kafka
// broker. Differences between two readings tell how much CPU a reader made
// the services spend: on a 2-core machine the services and walhouse compete
// for the same cores.
type serviceCPU struct {
	postgres, kafka float64
}

func (a serviceCPU) sub(b serviceCPU) serviceCPU {
	return serviceCPU{postgres: a.postgres - b.postgres, kafka: a.kafka - b.kafka}
}

// readServiceCPU reads the services' CPU time from /proc, finding their
// processes through the pid files under localDir (.local). A service whose
// pid is unknown counts as 0.
func readServiceCPU(localDir string) serviceCPU {
	var s serviceCPU
	if pid, err := pidFile(filepath.Join(localDir, "postgres", "data", "postmaster.pid")); err == nil {
		s.postgres = processTreeCPU(pid)
	}
	if pid, err := pidFile(filepath.Join(localDir, "kafka", "kafka.pid")); err == nil {
		own, reaped, _, _ := procCPU(pid)
		s.kafka = own + reaped
	}
	return s
}

func pidFile(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	first, _, _ := strings.Cut(string(b), "\n")
	return strconv.Atoi(strings.TrimSpace(first))
}

// processTreeCPU returns the CPU time of pid, of its exited children, and
// of its live children.
func processTreeCPU(pid int) float64 {
	own, reaped, _, err := procCPU(pid)
	if err != nil {
		return 0
	}
	total := own + reaped
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if c, _, ppid, err := procCPU(child); err == nil && ppid == pid {
			total += c
		}
	}
	return total
}

// procCPU reads /proc/<pid>/stat: the process's own CPU seconds (user +
// system), those of its waited-for children, and its parent's pid.
func procCPU(pid int) (own, reaped float64, ppid int, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, 0, err
	}
	// The command name is in parentheses and may contain spaces.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, 0, 0, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state); ppid is field 4, utime..cstime are 14..17.
	if len(f) < 15 {
		return 0, 0, 0, fmt.Errorf("/proc/%d/stat: too few fields", pid)
	}
	num := func(k int) float64 { v, _ := strconv.ParseFloat(f[k-3], 64); return v / clockTicks }
	ppid, _ = strconv.Atoi(f[1])
	return num(14) + num(15), num(16) + num(17), ppid, nil
}
