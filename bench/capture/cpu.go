package main

import "github.com/walhouse/walhouse/harness/testenv"

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

// readServiceCPU reads the services' CPU time, finding their processes
// through the pid files under localDir (.local). A service whose pid is
// unknown counts as 0.
func readServiceCPU(localDir string) serviceCPU {
	return serviceCPU{
		postgres: testenv.ServiceCPU(localDir, testenv.PostgreSQL),
		kafka:    testenv.ServiceCPU(localDir, testenv.Kafka),
	}
}
