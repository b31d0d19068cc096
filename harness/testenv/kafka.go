package testenv

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// DeleteTopicsWithPrefix deletes every topic whose name starts with prefix:
// a benchmark's or test's tables', state, registry and dead-letter topics,
// which all start with its base name.
func DeleteTopicsWithPrefix(ctx context.Context, adm *kadm.Client, prefix string) error {
	topics, err := adm.ListTopics(ctx)
	if err != nil {
		return err
	}
	var mine []string
	for _, t := range topics.Names() {
		if strings.HasPrefix(t, prefix) {
			mine = append(mine, t)
		}
	}
	if len(mine) == 0 {
		return nil
	}
	resp, err := adm.DeleteTopics(ctx, mine...)
	if err != nil {
		return err
	}
	return resp.Error()
}

// DeleteTopicsAtCleanup deletes the topics of prefix (DeleteTopicsWithPrefix)
// on the brokers of env when t ends: every test's tables add topics, and a
// broker holding thousands of them spends its CPU on per-partition
// housekeeping and on the all-topic metadata a pattern subscription asks
// for, which skews every later benchmark on the machine.
func DeleteTopicsAtCleanup(t testing.TB, env Env, prefix string) {
	t.Cleanup(func() {
		cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(env.Kafka, ",")...))
		if err != nil {
			t.Logf("delete the topics of %s: %v", prefix, err)
			return
		}
		defer cl.Close()
		// Short: brokers a fault test stopped must not hold its end up.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := DeleteTopicsWithPrefix(ctx, kadm.NewClient(cl), prefix); err != nil {
			t.Logf("delete the topics of %s: %v", prefix, err)
		}
	})
}
