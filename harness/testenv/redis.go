package testenv

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// DeleteKeys deletes every key of the Redis (or Valkey) server at addr that
// matches pattern, such as the Layer 2 keys a benchmark's sinks wrote,
// scanning and unlinking 10,000 at a time.
func DeleteKeys(ctx context.Context, addr, pattern string) error {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	var errs []error
	iter := rdb.Scan(ctx, 0, pattern, 10_000).Iterator()
	var keys []string
	flush := func() {
		if len(keys) > 0 {
			if err := rdb.Unlink(ctx, keys...).Err(); err != nil {
				errs = append(errs, fmt.Errorf("delete keys %s: %w", pattern, err))
			}
			keys = keys[:0]
		}
	}
	for iter.Next(ctx) {
		if keys = append(keys, iter.Val()); len(keys) == 10_000 {
			flush()
		}
	}
	flush()
	if err := iter.Err(); err != nil {
		errs = append(errs, fmt.Errorf("scan keys %s: %w", pattern, err))
	}
	return errors.Join(errs...)
}
