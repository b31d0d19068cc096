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
