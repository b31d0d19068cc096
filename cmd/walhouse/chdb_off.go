//go:build nochdb

package main

import (
	"context"
	"errors"

	"github.com/walhouse/walhouse/cli"
)

// runChdb of a binary built with -tags nochdb (the container image): the
// embedded engine needs the dynamic loader, which a static binary lacks,
// and it is for tests and the demo only.
func runChdb(context.Context, *cli.Invocation) error {
	return errors.New("this walhouse was built without the embedded ClickHouse (-tags nochdb, as the container image is); use a ClickHouse server, or a walhouse built without that tag")
}
