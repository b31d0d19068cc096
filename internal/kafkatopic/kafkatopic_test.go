package kafkatopic

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

// fakeAdmin answers CreateTopic with createErr and lists the topics in
// existing.
type fakeAdmin struct {
	createErr error
	existing  map[string]bool
	listed    int
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
