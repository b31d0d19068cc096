package testenv

import (
	"os"
	"strings"
	"testing"
)

// KafkaClusterEnv names the variable that points the tests of a replicated
// Kafka cluster at one: the bootstrap list of deploy/local/kafka-cluster.sh
// (written to .local/kafka-cluster/env; make chaos-cluster sets it).
const KafkaClusterEnv = "WALHOUSE_KAFKA_CLUSTER"

// RequireKafkaCluster returns the brokers of the three-broker cluster the
// environment names, and skips t when it names none: make test runs
// against the single broker, and only make chaos-cluster (or a developer
// who started deploy/local/kafka-cluster.sh) sets the variable.
func RequireKafkaCluster(t testing.TB) []string {
	t.Helper()
	if os.Getenv("WALHOUSE_INTEGRATION") == "0" {
		t.Skip("integration tests disabled (WALHOUSE_INTEGRATION=0, as in make unit)")
	}
	v := strings.TrimSpace(os.Getenv(KafkaClusterEnv))
	if v == "" {
		t.Skipf("no Kafka cluster: start one with deploy/local/kafka-cluster.sh start and export %s (. .local/kafka-cluster/env), or run make chaos-cluster", KafkaClusterEnv)
	}
	return strings.Split(v, ",")
}
