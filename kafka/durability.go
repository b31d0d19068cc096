package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walhouse/walhouse/internal/backoff"
)

// walhouse's first guarantee, nothing lost, rests on Kafka keeping every
// record it acknowledged: capture confirms the slot past a change once
// Kafka acknowledged its record, and PostgreSQL may then recycle the WAL.
// A record acknowledged by one broker only and lost with that broker is
// lost for good. On a cluster that takes, per topic, a replication factor
// above 1, min.insync.replicas of at least 2 (an acknowledged record is on
// two brokers) and no unclean leader election (an out-of-sync replica,
// missing acknowledged records, never becomes leader); and producers that
// wait for all in-sync replicas (acks=all) and write idempotently (a retry
// after a lost answer is not written twice, nor out of order). This file
// sets the producers' side and checks the topics' side.

// Topic settings the durability check reads and walhouse sets.
const (
	MinInsyncReplicasConfig = "min.insync.replicas"
	UncleanElectionConfig   = "unclean.leader.election.enable"
)

// SafeProducerOpts are the producer settings every walhouse producer uses:
// acks from all in-sync replicas. Idempotent writes are franz-go's default
// and walhouse never disables them; CheckProducer checks both.
func SafeProducerOpts() []kgo.Opt {
	return []kgo.Opt{kgo.RequiredAcks(kgo.AllISRAcks())}
}

// ErrUnsafeProducer is wrapped by CheckProducer's error.
var ErrUnsafeProducer = errors.New("the Kafka producer cannot keep the guarantee")

// CheckProducer reports whether cl produces with acks=all and
// idempotence, the settings SafeProducerOpts gives; an error wraps
// ErrUnsafeProducer. Capture and the sink check their producers at start,
// so an option added later that weakens them fails there, not in a loss.
func CheckProducer(cl *kgo.Client) error {
	var problems []string
	if acks, ok := cl.OptValue(kgo.RequiredAcks).(kgo.Acks); !ok || acks != kgo.AllISRAcks() {
		problems = append(problems, "acks is not all (kgo.RequiredAcks(kgo.AllISRAcks()))")
	}
	if off, ok := cl.OptValue(kgo.DisableIdempotentWrite).(bool); !ok || off {
		problems = append(problems, "idempotent writes are disabled (kgo.DisableIdempotentWrite)")
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w: %s; build producers with kafka.SafeProducerOpts and without DisableIdempotentWrite", ErrUnsafeProducer, strings.Join(problems, "; "))
	}
	return nil
}

// TopicOption sets a configuration of the topics walhouse creates.
type TopicOption func(configs map[string]*string)

// MinInsyncReplicas gives the topics walhouse creates min.insync.replicas
// n; n < 1 leaves the broker's default.
func MinInsyncReplicas(n int) TopicOption {
	return func(configs map[string]*string) {
		if n >= 1 {
			v := strconv.Itoa(n)
			configs[MinInsyncReplicasConfig] = &v
		}
	}
}

// applyTopicOptions returns configs with opts applied, a new map.
func applyTopicOptions(configs map[string]*string, opts []TopicOption) map[string]*string {
	out := make(map[string]*string, len(configs)+len(opts))
	for k, v := range configs {
		out[k] = v
	}
	for _, o := range opts {
		o(out)
	}
	return out
}

// DurabilityMode is what capture and the sink do at start when a topic's
// settings cannot keep what Kafka acknowledged (--topic-durability).
type DurabilityMode uint8

// The modes of the durability check.
const (
	// DurabilityWarn logs every problem and runs on (the default).
	DurabilityWarn DurabilityMode = iota
	// DurabilityRefuse stops at start with the problems and their fixes.
	DurabilityRefuse
	// DurabilityOff checks nothing.
	DurabilityOff
)

// String returns the mode as --topic-durability takes it.
func (m DurabilityMode) String() string {
	switch m {
	case DurabilityWarn:
		return "warn"
	case DurabilityRefuse:
		return "refuse"
	case DurabilityOff:
		return "off"
	default:
		return "DurabilityMode(" + strconv.Itoa(int(m)) + ")"
	}
}

// ParseDurabilityMode reads warn, refuse or off.
func ParseDurabilityMode(s string) (DurabilityMode, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "warn", "":
		return DurabilityWarn, nil
	case "refuse":
		return DurabilityRefuse, nil
	case "off":
		return DurabilityOff, nil
	}
	return 0, fmt.Errorf("%q: want warn, refuse or off", s)
}

// TopicDurability is what decides whether a topic keeps what it
// acknowledged.
type TopicDurability struct {
	Topic string
	// Replicas is the smallest replica count among its partitions.
	Replicas int
	// MinInsync is its min.insync.replicas in force (its own or the
	// broker's default).
	MinInsync int
	// UncleanElection is its unclean.leader.election.enable in force.
	UncleanElection bool
}

// DurabilityProblem is a topic setting that cannot give walhouse's
// guarantee, why, and what to run.
type DurabilityProblem struct {
	Topic, Setting, Reason, Fix string
}

// String says the problem in one line.
func (p DurabilityProblem) String() string {
	return fmt.Sprintf("topic %s: %s: %s; %s", p.Topic, p.Setting, p.Reason, p.Fix)
}

// DurabilityProblems returns what in t cannot keep every acknowledged
// record on a cluster of brokers brokers (none: the settings can). One
// broker can keep nothing on a second: replication factor 1 and
// min.insync.replicas 1 are what it allows, and they are no problem there.
func DurabilityProblems(brokers int, t TopicDurability) []DurabilityProblem {
	var out []DurabilityProblem
	alter := func(setting string, v string) string {
		return fmt.Sprintf("run kafka-configs.sh --bootstrap-server <broker> --alter --entity-type topics --entity-name %s --add-config %s=%s", t.Topic, setting, v)
	}
	if t.Replicas == 1 && brokers > 1 {
		out = append(out, DurabilityProblem{Topic: t.Topic, Setting: "replication factor 1",
			Reason: fmt.Sprintf("its records live on one of the cluster's %d brokers, and a record acknowledged there is lost with that broker's disk", brokers),
			Fix:    fmt.Sprintf("add replicas (kafka-reassign-partitions.sh, to 3 where there are 3 brokers) and start capture with --replication-factor %d so that new topics get them", min(brokers, 3))})
	}
	if t.Replicas > 1 && t.MinInsync < 2 {
		out = append(out, DurabilityProblem{Topic: t.Topic, Setting: fmt.Sprintf("min.insync.replicas %d with replication factor %d", t.MinInsync, t.Replicas),
			Reason: "an acknowledged record may be on the leader alone when the other replicas fall behind, and is lost if that broker fails before they catch up",
			Fix:    alter(MinInsyncReplicasConfig, "2") + " (and start capture with --min-insync-replicas 2 for new topics)"})
	}
	if t.Replicas >= 1 && t.MinInsync > t.Replicas {
		out = append(out, DurabilityProblem{Topic: t.Topic, Setting: fmt.Sprintf("min.insync.replicas %d above replication factor %d", t.MinInsync, t.Replicas),
			Reason: "Kafka refuses every write with acks=all (NOT_ENOUGH_REPLICAS), so the pipeline stalls",
			Fix:    alter(MinInsyncReplicasConfig, strconv.Itoa(max(t.Replicas-1, 1)))})
	}
	if t.UncleanElection && t.Replicas > 1 {
		out = append(out, DurabilityProblem{Topic: t.Topic, Setting: "unclean.leader.election.enable true",
			Reason: "a replica that missed acknowledged records may become leader when the in-sync ones are down, and those records are gone",
			Fix:    alter(UncleanElectionConfig, "false")})
	}
	return out
}

// durabilityAdmin is the part of kadm.Client CheckDurability uses.
type durabilityAdmin interface {
	BrokerMetadata(ctx context.Context) (kadm.Metadata, error)
	ListTopics(ctx context.Context, topics ...string) (kadm.TopicDetails, error)
	DescribeTopicConfigs(ctx context.Context, topics ...string) (kadm.ResourceConfigs, error)
}

// CheckDurability reads the settings of every existing topic that match
// selects (the pipeline's: see PipelineTopics) and returns their problems
// (DurabilityProblems), sorted by topic. adm is a *kadm.Client.
func CheckDurability(ctx context.Context, adm durabilityAdmin, match func(topic string) bool) ([]DurabilityProblem, error) {
	meta, err := adm.BrokerMetadata(ctx)
	if err != nil {
		return nil, fmt.Errorf("list the Kafka brokers: %w", err)
	}
	all, err := adm.ListTopics(ctx)
	if err != nil {
		return nil, fmt.Errorf("list the Kafka topics: %w", err)
	}
	var names []string
	for _, name := range all.Names() {
		if match(name) {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return nil, nil
	}
	rcs, err := describeSettled(ctx, adm, names)
	if err != nil {
		return nil, fmt.Errorf("read the settings of the Kafka topics %v: %w; grant DESCRIBE_CONFIGS on them, or start with --topic-durability off", names, err)
	}
	var out []DurabilityProblem
	for _, name := range names {
		td := TopicDurability{Topic: name, Replicas: -1}
		for _, p := range all[name].Partitions {
			if td.Replicas < 0 || len(p.Replicas) < td.Replicas {
				td.Replicas = len(p.Replicas)
			}
		}
		rc, err := rcs.On(name, nil)
		if err == nil {
			err = rc.Err
		}
		if err != nil {
			return nil, fmt.Errorf("read the settings of Kafka topic %s: %w; grant DESCRIBE_CONFIGS on it, or start with --topic-durability off", name, err)
		}
		for _, c := range rc.Configs {
			switch c.Key {
			case MinInsyncReplicasConfig:
				td.MinInsync, _ = strconv.Atoi(c.MaybeValue())
			case UncleanElectionConfig:
				td.UncleanElection = c.MaybeValue() == "true"
			}
		}
		out = append(out, DurabilityProblems(len(meta.Brokers), td)...)
	}
	slices.SortStableFunc(out, func(a, b DurabilityProblem) int { return strings.Compare(a.Topic, b.Topic) })
	return out, nil
}

// describeSettled describes the topics' configurations, asking again
// for a while when a broker does not know one of them yet: a topic created
// a moment ago (capture's state topic at its first start) reaches every
// broker's metadata a little later.
func describeSettled(ctx context.Context, adm durabilityAdmin, names []string) (kadm.ResourceConfigs, error) {
	for delay := backoff.ShortMin; ; delay = backoff.Next(delay, backoff.ShortMax) {
		rcs, err := adm.DescribeTopicConfigs(ctx, names...)
		if err == nil {
			for _, rc := range rcs {
				if rc.Err != nil {
					err = fmt.Errorf("topic %s: %w", rc.Name, rc.Err)
					break
				}
			}
		}
		if err == nil || !errors.Is(err, kerr.UnknownTopicOrPartition) {
			return rcs, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(delay):
		}
	}
}

// PipelineTopics selects the topics of the pipeline with the given topic
// prefix: the tables' (<prefix>.…), its own (<prefix>-state, -schemas,
// -dlq, -recopy) and any of extra (a --dlq-topic of another name).
func PipelineTopics(prefix string, extra ...string) func(topic string) bool {
	return func(topic string) bool {
		return strings.HasPrefix(topic, prefix+".") || strings.HasPrefix(topic, prefix+"-") || slices.Contains(extra, topic)
	}
}

// ErrUnsafeTopics is wrapped by EnforceDurability's error in
// DurabilityRefuse mode.
var ErrUnsafeTopics = errors.New("the Kafka topics cannot keep what they acknowledge")

// EnforceDurability runs CheckDurability and acts by mode: off checks
// nothing; warn logs each problem (and a check that could not run) and
// returns nil; refuse returns an error wrapping ErrUnsafeTopics that names
// every problem and its fix, or the check's own error.
func EnforceDurability(ctx context.Context, cl *kgo.Client, match func(topic string) bool, mode DurabilityMode, log *slog.Logger) error {
	if mode == DurabilityOff {
		return nil
	}
	if log == nil {
		log = slog.Default()
	}
	problems, err := CheckDurability(ctx, kadm.NewClient(cl), match)
	if err != nil {
		if mode == DurabilityRefuse {
			return fmt.Errorf("check the durability of the Kafka topics (--topic-durability refuse): %w", err)
		}
		log.Warn("could not check whether the Kafka topics keep what they acknowledge", "err", err)
		return nil
	}
	for _, p := range problems {
		log.Warn("Kafka topic cannot keep every acknowledged record: a broker's loss may lose changes (docs/scale-out.md#kafka-cluster-settings)",
			"topic", p.Topic, "setting", p.Setting, "why", p.Reason, "fix", p.Fix)
	}
	if len(problems) > 0 && mode == DurabilityRefuse {
		lines := make([]string, len(problems))
		for i, p := range problems {
			lines[i] = p.String()
		}
		return fmt.Errorf("%w (--topic-durability refuse): %s; or start with --topic-durability warn to run anyway", ErrUnsafeTopics, strings.Join(lines, "\n"))
	}
	return nil
}
