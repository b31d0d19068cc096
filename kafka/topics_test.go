package kafka

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/walhouse/walhouse/record"
)

// fakeAdmin answers CreateTopic with createErr and lists the topics in
// existing, whose max.message.bytes is maxMessage (0: not readable) and
// which alterErr refuses to alter.
type fakeAdmin struct {
	createErr  error
	existing   map[string]bool
	listed     int
	maxMessage int
	alterErr   error
	altered    string // the value of the last alteration
}

func (f *fakeAdmin) DescribeTopicConfigs(_ context.Context, topics ...string) (kadm.ResourceConfigs, error) {
	if f.maxMessage == 0 {
		return nil, kerr.TopicAuthorizationFailed
	}
	v := strconv.Itoa(f.maxMessage)
	return kadm.ResourceConfigs{{Name: topics[0], Configs: []kadm.Config{{Key: "cleanup.policy"}, {Key: MaxMessageBytesConfig, Value: &v}}}}, nil
}

func (f *fakeAdmin) AlterTopicConfigs(_ context.Context, configs []kadm.AlterConfig, topics ...string) (kadm.AlterConfigsResponses, error) {
	if f.alterErr == nil {
		f.altered = *configs[0].Value
	}
	return kadm.AlterConfigsResponses{{Name: topics[0], Err: f.alterErr}}, nil
}

func (f *fakeAdmin) CreateTopic(_ context.Context, _ int32, _ int16, _ map[string]*string, topic string) (kadm.CreateTopicResponse, error) {
	return kadm.CreateTopicResponse{Topic: topic, Err: f.createErr}, f.createErr
}

func (f *fakeAdmin) ListTopics(_ context.Context, topics ...string) (kadm.TopicDetails, error) {
	f.listed++
	td := kadm.TopicDetails{}
	for _, t := range topics {
		if f.existing[t] {
			td[t] = kadm.TopicDetail{Topic: t}
		} else {
			td[t] = kadm.TopicDetail{Topic: t, Err: kerr.UnknownTopicOrPartition}
		}
	}
	return td, nil
}

func TestEnsure(t *testing.T) {
	compact := "compact"
	for _, tc := range []struct {
		name      string
		createErr error
		exists    bool
		want      string // part of the error; empty: none
		lists     bool
	}{
		{"created", nil, false, "", false},
		{"already there", kerr.TopicAlreadyExists, true, "", false},
		{"not allowed, made by an administrator", kerr.TopicAuthorizationFailed, true, "", true},
		{"not allowed on the cluster, made by an administrator", kerr.ClusterAuthorizationFailed, true, "", true},
		{"not allowed and missing", kerr.TopicAuthorizationFailed, false, "create it (1 partitions, replication factor 3, cleanup.policy=compact) or grant CREATE", true},
		{"broker down", errors.New("dial tcp: connection refused"), false, "connection refused", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			adm := &fakeAdmin{createErr: tc.createErr, existing: map[string]bool{"wh-state": tc.exists}}
			err := Ensure(context.Background(), adm, "wh-state", 1, 3, map[string]*string{"cleanup.policy": &compact})
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("error %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "wh-state")):
				t.Fatalf("error %v, want one naming the topic and containing %q", err, tc.want)
			}
			if (adm.listed > 0) != tc.lists {
				t.Errorf("listed topics %d times; want a lookup only after a refused creation", adm.listed)
			}
		})
	}
}

// TestEnsureRaisesMaxMessageBytes checks that an existing topic gets the
// max.message.bytes the record bound needs, or an error that says what to
// run when the broker refuses.
func TestEnsureRaisesMaxMessageBytes(t *testing.T) {
	need := MaxMessageBytes(record.DefaultMaxBytes)
	for _, tc := range []struct {
		name      string
		createErr error
		have      int
		alterErr  error
		wantAlter bool
		wantErr   string
	}{
		{"new topic", nil, 0, nil, false, ""},
		{"old topic with the 1 MB default", kerr.TopicAlreadyExists, 1048588, nil, true, ""},
		{"administrator's topic with the 1 MB default", kerr.TopicAuthorizationFailed, 1048588, nil, true, ""},
		{"large enough already", kerr.TopicAlreadyExists, need + 1, nil, false, ""},
		{"limit not readable", kerr.TopicAlreadyExists, 0, nil, false, ""},
		{"raise refused", kerr.TopicAlreadyExists, 1048588, kerr.TopicAuthorizationFailed,
			false, "--entity-name wh.public.t --add-config max.message.bytes=" + strconv.Itoa(need) + "`"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			adm := &fakeAdmin{createErr: tc.createErr, existing: map[string]bool{"wh.public.t": true}, maxMessage: tc.have, alterErr: tc.alterErr}
			err := Ensure(context.Background(), adm, "wh.public.t", 6, -1, Configs(record.DefaultMaxBytes, nil))
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("error %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
			}
			if got := adm.altered != ""; got != tc.wantAlter {
				t.Fatalf("altered %v (to %q), want %v", got, adm.altered, tc.wantAlter)
			}
			if tc.wantAlter && adm.altered != strconv.Itoa(need) {
				t.Errorf("raised to %s, want %d", adm.altered, need)
			}
		})
	}
}

// TestTopicNames pins the names of a pipeline's own topics: capture, the
// sink, dlq and serve derive them from the prefix alone, and renaming one
// would strand what an older walhouse wrote there.
func TestTopicNames(t *testing.T) {
	for _, tc := range []struct {
		name   func(string) string
		prefix string
		want   string
	}{
		{StateTopic, "walhouse", "walhouse-state"},
		{SchemasTopic, "walhouse", "walhouse-schemas"},
		{SchemasTopic, "shop.prod", "shop.prod-schemas"},
		{DeadLetterTopic, "walhouse", "walhouse-dlq"},
	} {
		if got := tc.name(tc.prefix); got != tc.want {
			t.Errorf("topic of %q = %q, want %q", tc.prefix, got, tc.want)
		}
	}
}
