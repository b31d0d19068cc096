package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// services are the local services whose CPU the benchmark reports, by the
// pid files deploy/local/services.sh writes under .local.
var services = []string{"redis", "kafka", "clickhouse"}

// cpuUse is CPU seconds: the benchmark's own process (the sink) and each
// service (-1 when its pid file or /proc entry is missing).
type cpuUse struct {
	sink     float64
	services []float64
}

// cpuSeconds reads the CPU time used so far.
func cpuSeconds() cpuUse {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	u := cpuUse{sink: seconds(ru.Utime) + seconds(ru.Stime)}
	for _, s := range services {
		u.services = append(u.services, serviceCPU(s))
	}
	return u
}

func seconds(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }

// minus returns the CPU used between before and u.
func (u cpuUse) minus(before cpuUse) cpuUse {
	d := cpuUse{sink: u.sink - before.sink}
	for i := range u.services {
		v := -1.0
		if u.services[i] >= 0 && before.services[i] >= 0 {
			v = u.services[i] - before.services[i]
		}
		d.services = append(d.services, v)
	}
	return d
}

func (u cpuUse) String() string {
	parts := []string{fmt.Sprintf("%.1f", u.sink)}
	for _, v := range u.services {
		if v < 0 {
			parts = append(parts, "-")
		} else {
			parts = append(parts, fmt.Sprintf("%.1f", v))
		}
	}
	return strings.Join(parts, " ")
}

// serviceCPU returns the CPU seconds of a local service's process (user
// plus system, from /proc/<pid>/stat), or -1 when it cannot be read.
func serviceCPU(name string) float64 {
	pid, err := os.ReadFile(filepath.Join(".local", name, name+".pid"))
	if err != nil {
		return -1
	}
	stat, err := os.ReadFile(filepath.Join("/proc", strings.TrimSpace(string(pid)), "stat"))
	if err != nil {
		return -1
	}
	// The fields after the command (which may hold spaces) start after
	// its closing parenthesis; utime and stime are the 14th and 15th.
	s := string(stat)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 13 {
		return -1
	}
	ut, err1 := strconv.ParseFloat(fields[11], 64)
	st, err2 := strconv.ParseFloat(fields[12], 64)
	if err1 != nil || err2 != nil {
		return -1
	}
	return (ut + st) / 100 // clock ticks; USER_HZ is 100 on Linux
}
