package registry_test

import (
	"strings"
	"testing"

	"github.com/walhouse/walhouse/registry"
)

// The sentinel's text is what an operator sees when the sink starts before
// capture or with another prefix: it must say what to do.
func TestErrNoRegistrySaysWhatToDo(t *testing.T) {
	msg := registry.ErrNoRegistry.Error()
	for _, want := range []string{"does not exist", "capture", "--topic-prefix", "retry"} {
		if !strings.Contains(msg, want) {
			t.Errorf("ErrNoRegistry = %q, should mention %q", msg, want)
		}
	}
}
