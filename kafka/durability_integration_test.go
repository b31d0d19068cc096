package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walhouse/walhouse/harness/testenv"
	"github.com/walhouse/walhouse/kafka"
)

// Against the three-broker cluster of deploy/local/kafka-cluster.sh
// (WALHOUSE_KAFKA_CLUSTER; skipped without it): topics made as walhouse
// makes them with --replication-factor 3 --min-insync-replicas 2 pass the
// check, and each setting that cannot keep an acknowledged record is
// found, warned about, and refused in refuse mode.
func TestIntegrationKafkaClusterDurability(t *testing.T) {
	brokers := testenv.RequireKafkaCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl, err := kafka.NewClient(ctx, kafka.Config{Brokers: brokers}, kafka.ProducerOpts(1<<20, kgo.StickyKeyPartitioner(nil))...)
	if err != nil {
		t.Fatal(err)
	}
	// Cleanups run last first: the client closes after the topics went.
	t.Cleanup(cl.Close)
	if err := kafka.CheckProducer(cl); err != nil {
		t.Fatal(err)
	}
	adm := kadm.NewClient(cl)
	prefix := testenv.Name("durable")
	t.Cleanup(func() {
		td, err := adm.ListTopics(context.Background())
		if err != nil {
			return
		}
		var mine []string
		for _, n := range td.Names() {
			if strings.HasPrefix(n, prefix) {
				mine = append(mine, n)
			}
		}
		_, _ = adm.DeleteTopics(context.Background(), mine...)
	})

	// As capture makes them: the state topic, a table's topic.
	safe := []kafka.TopicOption{kafka.MinInsyncReplicas(2)}
	if _, err := kafka.NewState(ctx, cl, kafka.StateTopic(prefix), 3, safe...); err != nil {
		t.Fatal(err)
	}
	if err := kafka.Topics(cl, 1<<20, safe...).CreateTopic(ctx, prefix+".public.orders", 6, 3); err != nil {
		t.Fatal(err)
	}
	problems, err := kafka.CheckDurability(ctx, adm, kafka.PipelineTopics(prefix))
	if err != nil || len(problems) != 0 {
		t.Fatalf("topics made with RF 3 and min.insync.replicas 2: problems %v, %v; want none", problems, err)
	}
	// A record acknowledged by all in-sync replicas.
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: prefix + ".public.orders", Key: []byte("k"), Value: []byte("v")}).FirstErr(); err != nil {
		t.Fatal(err)
	}

	// What an administrator's topics may get wrong.
	isr1, unclean := "1", "true"
	mustCreate := func(name string, rf int16, configs map[string]*string) {
		t.Helper()
		if _, err := adm.CreateTopic(ctx, 1, rf, configs, name); err != nil {
			t.Fatal(err)
		}
	}
	mustCreate(prefix+".public.single", 1, nil)
	mustCreate(prefix+".public.isr1", 3, map[string]*string{kafka.MinInsyncReplicasConfig: &isr1})
	mustCreate(prefix+"-dlq", 3, map[string]*string{kafka.UncleanElectionConfig: &unclean})
	want := []string{
		"-dlq: unclean.leader.election.enable true",
		".public.isr1: min.insync.replicas 1 with replication factor 3",
		".public.single: replication factor 1",
		// The cluster's min.insync.replicas=2 on one replica: no write
		// with acks=all is ever acknowledged.
		".public.single: min.insync.replicas 2 above replication factor 1",
	}
	// A topic just created reaches every broker's metadata a moment later:
	// the check reads what the broker it asks knows.
	var got []string
	err = testenv.Eventually(ctx, 20*time.Second, func(ctx context.Context) error {
		problems, err := kafka.CheckDurability(ctx, adm, kafka.PipelineTopics(prefix))
		if err != nil {
			return err
		}
		got = got[:0]
		for _, p := range problems {
			got = append(got, strings.TrimPrefix(p.Topic, prefix)+": "+p.Setting)
		}
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			return fmt.Errorf("the check found\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
	if err := kafka.EnforceDurability(ctx, cl, kafka.PipelineTopics(prefix), kafka.DurabilityWarn, nil); err != nil {
		t.Errorf("warn mode: %v, want nil", err)
	}
	err = kafka.EnforceDurability(ctx, cl, kafka.PipelineTopics(prefix), kafka.DurabilityRefuse, nil)
	if !errors.Is(err, kafka.ErrUnsafeTopics) || !strings.Contains(err.Error(), "kafka-configs.sh") {
		t.Errorf("refuse mode: %v, want ErrUnsafeTopics with the fix", err)
	}
}
