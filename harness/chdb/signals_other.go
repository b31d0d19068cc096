//go:build !linux

package chdb

import (
	"fmt"
	"runtime"
)

// preserveSignals is only implemented for Linux, the one platform libchdb.so
// is built for here.
func preserveSignals() (func() error, error) {
	return nil, fmt.Errorf("the embedded ClickHouse engine is only supported on Linux, not %s", runtime.GOOS)
}
