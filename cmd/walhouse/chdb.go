package main

import (
	"context"
	"errors"
)

func runChdb(ctx context.Context, args []string) error {
	return errors.New("not implemented yet")
}
