package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walhouse/walhouse/internal/testenv"
)

// Against the local broker's SASL/PLAIN listener: the right password
// produces and consumes a record, a wrong one and none at all fail at
// start with an error that says what failed, instead of retrying forever.
func TestIntegrationKafkaSASL(t *testing.T) {
	env := testenv.Require(t, "kafka-sasl")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	connect := func(password string, sec kafkaSecurity, opts ...kgo.Opt) (*kgo.Client, error) {
		t.Setenv("WALHOUSE_KAFKA_SASL_PASSWORD", password)
		secOpts, err := sec.options()
		if err != nil {
			return nil, err
		}
		return kafkaClient(ctx, kafkaConfig{brokers: strings.Split(env.KafkaSASL, ","), security: secOpts}, opts...)
	}
	plainUser := kafkaSecurity{mechanism: "plain", user: "walhouse"}

	topic := testenv.Name("sasl")
	cl, err := connect("walhouse-local", plainUser, kgo.DefaultProduceTopic(topic), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatalf("connect with the right password: %v", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, topic); err != nil {
		t.Fatalf("create %s over SASL: %v", topic, err)
	}
	t.Cleanup(func() { _, _ = adm.DeleteTopics(context.Background(), topic) })
	if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("over sasl")}).FirstErr(); err != nil {
		t.Fatalf("produce over SASL: %v", err)
	}
	fs := cl.PollFetches(ctx)
	if recs := fs.Records(); len(recs) != 1 || string(recs[0].Value) != "over sasl" {
		t.Fatalf("consumed %v (errors %v), want the record produced", recs, fs.Errors())
	}

	for name, tc := range map[string]struct {
		password string
		sec      kafkaSecurity
		want     string
	}{
		"wrong password": {"nope", plainUser, "check --kafka-sasl-user and the password"},
		"no SASL":        {"", kafkaSecurity{}, "--kafka-sasl"},
	} {
		cl, err := connect(tc.password, tc.sec)
		if err == nil {
			cl.Close()
			t.Errorf("%s: connected", name)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %q, want it to mention %q", name, err, tc.want)
		}
	}
}

// Against the local broker's SASL_SSL listener, whose certificate a
// throwaway CA signed: with that CA and the right password a record goes
// through over TLS; trusting only the system's CAs fails at start with an
// error that names the certificate problem and --kafka-tls-ca; a wrong
// password over TLS fails with the login message.
func TestIntegrationKafkaTLS(t *testing.T) {
	env := testenv.Require(t, "kafka-tls")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	connect := func(password string, sec kafkaSecurity, opts ...kgo.Opt) (*kgo.Client, error) {
		t.Setenv("WALHOUSE_KAFKA_SASL_PASSWORD", password)
		secOpts, err := sec.options()
		if err != nil {
			return nil, err
		}
		return kafkaClient(ctx, kafkaConfig{brokers: strings.Split(env.KafkaTLS, ","), security: secOpts}, opts...)
	}
	withCA := kafkaSecurity{tls: true, ca: env.KafkaTLSCA, mechanism: "plain", user: "walhouse"}

	topic := testenv.Name("tls")
	cl, err := connect("walhouse-local", withCA, kgo.DefaultProduceTopic(topic), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatalf("connect with the CA and the right password: %v", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, topic); err != nil {
		t.Fatalf("create %s over TLS: %v", topic, err)
	}
	t.Cleanup(func() { _, _ = adm.DeleteTopics(context.Background(), topic) })
	if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("over tls")}).FirstErr(); err != nil {
		t.Fatalf("produce over TLS: %v", err)
	}
	fs := cl.PollFetches(ctx)
	if recs := fs.Records(); len(recs) != 1 || string(recs[0].Value) != "over tls" {
		t.Fatalf("consumed %v (errors %v), want the record produced", recs, fs.Errors())
	}

	for name, tc := range map[string]struct {
		password string
		sec      kafkaSecurity
		want     []string
	}{
		"system CAs only": {"walhouse-local", kafkaSecurity{tls: true, mechanism: "plain", user: "walhouse"}, []string{"certificate", "--kafka-tls-ca"}},
		"wrong password":  {"nope", withCA, []string{"check --kafka-sasl-user and the password"}},
	} {
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
