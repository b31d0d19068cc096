package testenv

import (
	"context"
	"errors"
	"fmt"
)

// Cleanups releases what a benchmark created, in reverse order of
// creation. The zero value is empty and ready to use.
type Cleanups []cleanup

type cleanup struct {
	what string
	fn   func(context.Context) error
}

// Push adds fn, described by what (for example "drop table t"), to run
// before everything pushed earlier.
func (s *Cleanups) Push(what string, fn func(context.Context) error) {
	*s = append(*s, cleanup{what, fn})
}

// Run runs every cleanup, newest first, even after one failed, and returns
// their errors joined. The stack is empty afterwards.
func (s *Cleanups) Run(ctx context.Context) error {
	var errs []error
	for i := len(*s) - 1; i >= 0; i-- {
		c := (*s)[i]
		if err := c.fn(ctx); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", c.what, err))
		}
	}
	*s = nil
	return errors.Join(errs...)
}
