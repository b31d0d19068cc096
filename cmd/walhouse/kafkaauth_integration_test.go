package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walhouse/walhouse/internal/testenv"
	"github.com/walhouse/walhouse/kafka"
)

// Against the local broker's SASL/PLAIN listener: the right password
// produces and consumes a record, a wrong one and none at all fail at
// start with an error that says what failed, instead of retrying forever.
func TestIntegrationKafkaSASL(t *testing.T) {
	env := testenv.Require(t, "kafka-sasl")
	plainUser := kafkaSecurity{mechanism: "plain", user: "walhouse"}
	checkKafkaSecurity(t, env.KafkaSASL, "SASL", plainUser, map[string]refusal{
		"wrong password": {"nope", plainUser, []string{"check --kafka-sasl-user and the password"}},
		"no SASL":        {"", kafkaSecurity{}, []string{"--kafka-sasl"}},
	})
}

// Against the local broker's SASL_SSL listener, whose certificate a
// throwaway CA signed: with that CA and the right password a record goes
// through over TLS; trusting only the system's CAs fails at start with an
// error that names the certificate problem and --kafka-tls-ca; a wrong
// password over TLS fails with the login message.
func TestIntegrationKafkaTLS(t *testing.T) {
	env := testenv.Require(t, "kafka-tls")
	withCA := kafkaSecurity{tls: true, ca: env.KafkaTLSCA, mechanism: "plain", user: "walhouse"}
	checkKafkaSecurity(t, env.KafkaTLS, "TLS", withCA, map[string]refusal{
		"system CAs only": {"walhouse-local", kafkaSecurity{tls: true, mechanism: "plain", user: "walhouse"}, []string{"certificate", "--kafka-tls-ca"}},
		"wrong password":  {"nope", withCA, []string{"check --kafka-sasl-user and the password"}},
	})
}

// refusal is a connection that must fail at start with an error that
// mentions each of want.
type refusal struct {
	password string
	sec      kafkaSecurity
	want     []string
}

// checkKafkaSecurity connects to brokers with good and the password
// walhouse-local, creates a topic, produces and consumes a record over the
// connection (named via in messages), then checks each refusal.
func checkKafkaSecurity(t *testing.T, brokers, via string, good kafkaSecurity, refusals map[string]refusal) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	connect := func(password string, sec kafkaSecurity, opts ...kgo.Opt) (*kgo.Client, error) {
		t.Setenv("WALHOUSE_KAFKA_SASL_PASSWORD", password)
		secOpts, err := sec.options()
		if err != nil {
			return nil, err
		}
		return kafka.NewClient(ctx, kafka.Config{Brokers: strings.Split(brokers, ","), Security: secOpts}, opts...)
	}

	topic := testenv.Name(strings.ToLower(via))
	cl, err := connect("walhouse-local", good, kgo.DefaultProduceTopic(topic), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatalf("connect over %s with the right settings: %v", via, err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, topic); err != nil {
		t.Fatalf("create %s over %s: %v", topic, via, err)
	}
	t.Cleanup(func() { _, _ = adm.DeleteTopics(context.Background(), topic) })
	value := "over " + via
	if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte(value)}).FirstErr(); err != nil {
		t.Fatalf("produce over %s: %v", via, err)
	}
	fs := cl.PollFetches(ctx)
	if recs := fs.Records(); len(recs) != 1 || string(recs[0].Value) != value {
		t.Fatalf("consumed %v (errors %v), want the record produced", recs, fs.Errors())
	}

	for name, tc := range refusals {
		start := time.Now()
		cl, err := connect(tc.password, tc.sec)
		if err == nil {
			cl.Close()
			t.Errorf("%s: connected", name)
			continue
		}
		t.Logf("%s: failed after %v: %v", name, time.Since(start).Round(time.Millisecond), err)
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q, want it to mention %q", name, err, w)
			}
		}
	}
}
