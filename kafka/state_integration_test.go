package kafka_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/walhouse/walhouse/harness/testenv"
	"github.com/walhouse/walhouse/kafka"
)

// Against the local broker's SASL_SSL listener: the state topic's reader
// connects as the client capture was given does (TLS with a private CA,
// SASL), so a restarted capture finds the progress a former one saved. A
// reader made from the seed brokers alone could not read it at all.
func TestIntegrationKafkaStateOverTLS(t *testing.T) {
	env := testenv.Require(t, "kafka-tls")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	pem, err := os.ReadFile(env.KafkaTLSCA)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		t.Fatalf("%s holds no certificate", env.KafkaTLSCA)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(env.KafkaTLS),
		kgo.DialTLSConfig(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}),
		kgo.SASL(plain.Auth{User: "walhouse", Pass: "walhouse-local"}.AsMechanism()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	topic := testenv.Name("state_tls")
	t.Cleanup(func() { _, _ = kadm.NewClient(cl).DeleteTopics(context.Background(), topic) })

	saved, err := kafka.NewState(ctx, cl, topic, 1)
	if err != nil {
		t.Fatalf("state topic over TLS: %v", err)
	}
	want := map[string]string{"snapshot/a": `{"done":[1,2]}`, "snapshot/b": `{"done":[]}`}
	for k, v := range want {
		if err := saved.Save(ctx, k, []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	// A fresh store, as after a restart, reads the topic back.
	restarted, err := kafka.NewState(ctx, cl, topic, 1)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range want {
		got, err := restarted.Load(ctx, k)
		if err != nil {
			t.Fatalf("load %s over TLS: %v", k, err)
		}
		if string(got) != v {
			t.Errorf("load %s = %q, want %q", k, got, v)
		}
	}
}

// A state topic whose first entries Kafka deleted (retention under a
// cleanup.policy with delete, or DeleteRecords) makes capture's state fail
// to load, saying so, instead of starting as if those keys were never
// written.
func TestIntegrationKafkaStateLostEntries(t *testing.T) {
	env := testenv.Require(t, "kafka")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(env.Kafka))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	topic := testenv.Name("state_lost")
	t.Cleanup(func() { _, _ = adm.DeleteTopics(context.Background(), topic) })
	// Made by an administrator with retention as well as compaction (Kafka
	// refuses DeleteRecords on a topic compacted only).
	policy := "compact,delete"
	if _, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{"cleanup.policy": &policy}, topic); err != nil {
		t.Fatal(err)
	}
	saved, err := kafka.NewState(ctx, cl, topic, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"snapshot/a", "snapshot/b", "snapshot/c"} {
		if err := saved.Save(ctx, k, []byte(`{"done":[1]}`)); err != nil {
			t.Fatal(err)
		}
	}
	var del kadm.Offsets
	del.Add(kadm.Offset{Topic: topic, Partition: 0, At: 2})
	if resp, err := adm.DeleteRecords(ctx, del); err != nil || resp.Error() != nil {
		t.Fatalf("delete records: %v %v", err, resp.Error())
	}
	restarted, err := kafka.NewState(ctx, cl, topic, 1)
	if err != nil {
		t.Fatal(err)
	}
	_, err = restarted.Load(ctx, "snapshot/c")
	if !errors.Is(err, kafka.ErrEntriesLost) || !strings.Contains(err.Error(), "starts at offset 2") {
		t.Fatalf("Load after entries were deleted = %v, want ErrEntriesLost naming offset 2", err)
	}
}
