package kafka

import (
	"cmp"
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

func TestDurabilityProblems(t *testing.T) {
	for _, tc := range []struct {
		name    string
		brokers int
		topic   TopicDurability
		want    []string // each problem's setting, in order
	}{
		{"three replicas, two in sync", 3, TopicDurability{Replicas: 3, MinInsync: 2}, nil},
		{"three replicas, three in sync", 3, TopicDurability{Replicas: 3, MinInsync: 3}, nil},
		{"one broker, one replica", 1, TopicDurability{Replicas: 1, MinInsync: 1}, nil},
		{"one replica on a cluster", 3, TopicDurability{Replicas: 1, MinInsync: 1}, []string{"replication factor 1"}},
		{"one replica on two brokers", 2, TopicDurability{Replicas: 1, MinInsync: 1}, []string{"replication factor 1"}},
		{"one in sync of three", 3, TopicDurability{Replicas: 3, MinInsync: 1}, []string{"min.insync.replicas 1 with replication factor 3"}},
		{"two replicas, one in sync", 3, TopicDurability{Replicas: 2, MinInsync: 1}, []string{"min.insync.replicas 1 with replication factor 2"}},
		{"more in sync than replicas", 3, TopicDurability{Replicas: 2, MinInsync: 3}, []string{"min.insync.replicas 3 above replication factor 2"}},
		{"one replica, two in sync", 1, TopicDurability{Replicas: 1, MinInsync: 2}, []string{"min.insync.replicas 2 above replication factor 1"}},
		{"unclean election", 3, TopicDurability{Replicas: 3, MinInsync: 2, UncleanElection: true}, []string{"unclean.leader.election.enable true"}},
		{"unclean election, one replica, one broker", 1, TopicDurability{Replicas: 1, MinInsync: 1, UncleanElection: true}, nil},
		{"everything wrong", 3, TopicDurability{Replicas: 3, MinInsync: 1, UncleanElection: true},
			[]string{"min.insync.replicas 1 with replication factor 3", "unclean.leader.election.enable true"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.topic.Topic = "walhouse.public.orders"
			got := DurabilityProblems(tc.brokers, tc.topic)
			var settings []string
			for _, p := range got {
				settings = append(settings, p.Setting)
				if p.Topic != tc.topic.Topic || p.Reason == "" || p.Fix == "" {
					t.Errorf("problem without topic, reason or fix: %+v", p)
				}
			}
			if strings.Join(settings, "; ") != strings.Join(tc.want, "; ") {
				t.Errorf("DurabilityProblems(%d, %+v) = %q, want %q", tc.brokers, tc.topic, settings, tc.want)
			}
		})
	}
}

func TestParseDurabilityMode(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want DurabilityMode
		bad  bool
	}{
		{"warn", DurabilityWarn, false}, {"", DurabilityWarn, false}, {"Refuse", DurabilityRefuse, false},
		{"off", DurabilityOff, false}, {"strict", 0, true},
	} {
		got, err := ParseDurabilityMode(tc.in)
		if (err != nil) != tc.bad || !tc.bad && got != tc.want {
			t.Errorf("ParseDurabilityMode(%q) = %v, %v; want %v (error: %v)", tc.in, got, err, tc.want, tc.bad)
		}
		if !tc.bad && got.String() != strings.ToLower(cmp.Or(tc.in, "warn")) {
			t.Errorf("%v.String() = %q", got, got.String())
		}
	}
}

// Capture's producer (ProducerOpts) and the sink's dead-letter producer
// (SafeProducerOpts on the group client) acknowledge from all in-sync
// replicas and write idempotently; CheckProducer finds a client that does
// not.
func TestCheckProducer(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []kgo.Opt
		want string // "" for safe, else part of the error
	}{
		{"capture's producer", ProducerOpts(1<<20, kgo.StickyKeyPartitioner(nil)), ""},
		{"the sink's client", append(SafeProducerOpts(), kgo.ConsumerGroup("g"), kgo.ConsumeTopics("t"), kgo.DisableAutoCommit()), ""},
		{"franz-go's defaults", nil, ""},
		{"leader acks", []kgo.Opt{kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite()}, "acks is not all"},
		{"no idempotence", append(SafeProducerOpts(), kgo.DisableIdempotentWrite()), "idempotent writes are disabled"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers("127.0.0.1:1")}, tc.opts...)...)
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			err = CheckProducer(cl)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("CheckProducer: %v, want nil", err)
			case tc.want != "" && (!errors.Is(err, ErrUnsafeProducer) || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("CheckProducer: %v, want ErrUnsafeProducer saying %q", err, tc.want)
			}
		})
	}
}

func TestMinInsyncReplicasOption(t *testing.T) {
	base := Configs(1<<20, nil)
	got := applyTopicOptions(base, []TopicOption{MinInsyncReplicas(2)})
	if v := got[MinInsyncReplicasConfig]; v == nil || *v != "2" {
		t.Errorf("min.insync.replicas = %v, want 2", v)
	}
	if _, ok := base[MinInsyncReplicasConfig]; ok {
		t.Error("applyTopicOptions changed its argument")
	}
	if _, ok := applyTopicOptions(base, []TopicOption{MinInsyncReplicas(-1)})[MinInsyncReplicasConfig]; ok {
		t.Error("MinInsyncReplicas(-1) set the topic's setting; want the broker's default")
	}
}

// durabilityFake answers CheckDurability's requests from a table of topics.
type durabilityFake struct {
	brokers int
	topics  map[string]TopicDurability
}

func (f durabilityFake) BrokerMetadata(context.Context) (kadm.Metadata, error) {
	var m kadm.Metadata
	for i := range f.brokers {
		m.Brokers = append(m.Brokers, kadm.BrokerDetail{NodeID: int32(i + 1)})
	}
	return m, nil
}

func (f durabilityFake) ListTopics(context.Context, ...string) (kadm.TopicDetails, error) {
	td := kadm.TopicDetails{}
	for name, t := range f.topics {
		replicas := make([]int32, t.Replicas)
		td[name] = kadm.TopicDetail{Topic: name, Partitions: kadm.PartitionDetails{0: {Replicas: replicas}, 1: {Replicas: replicas}}}
	}
	return td, nil
}

func (f durabilityFake) DescribeTopicConfigs(_ context.Context, topics ...string) (kadm.ResourceConfigs, error) {
	var out kadm.ResourceConfigs
	for _, name := range topics {
		t := f.topics[name]
		isr, unclean := strconv.Itoa(t.MinInsync), "false"
		if t.UncleanElection {
			unclean = "true"
		}
		out = append(out, kadm.ResourceConfig{Name: name, Configs: []kadm.Config{
			{Key: MinInsyncReplicasConfig, Value: &isr}, {Key: UncleanElectionConfig, Value: &unclean}}})
	}
	return out, nil
}

func TestCheckDurability(t *testing.T) {
	f := durabilityFake{brokers: 3, topics: map[string]TopicDurability{
		"wh.public.orders":  {Replicas: 3, MinInsync: 2},
		"wh.public.lines":   {Replicas: 1, MinInsync: 1},
		"wh-state":          {Replicas: 3, MinInsync: 1},
		"wh-dlq":            {Replicas: 3, MinInsync: 2, UncleanElection: true},
		"other.public.x":    {Replicas: 1, MinInsync: 1},
		"dead-letters-here": {Replicas: 3, MinInsync: 2},
	}}
	got, err := CheckDurability(context.Background(), f, PipelineTopics("wh", "dead-letters-here"))
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, p := range got {
		lines = append(lines, p.Topic+": "+p.Setting)
	}
	want := []string{
		"wh-dlq: unclean.leader.election.enable true",
		"wh-state: min.insync.replicas 1 with replication factor 3",
		"wh.public.lines: replication factor 1",
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("CheckDurability found\n%s\nwant\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
}
