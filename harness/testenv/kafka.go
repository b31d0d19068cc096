package testenv

import (
	"context"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
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
