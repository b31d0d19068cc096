package chdb

import (
	"os"
	"sync"
	"testing"

	"github.com/walhouse/walhouse/harness/testenv"
)

// The engine is once per process, so the package's tests share one, opened
// on first use and closed when they are done.
var shared struct {
	once   sync.Once
	engine *Engine
	err    error
	dir    string
	lib    string
}

// testEngine returns the shared engine. Without WALHOUSE_CHDB_LIB (from the
// environment or .local/env) it skips the test, or fails it when
// WALHOUSE_INTEGRATION=1 says the engine must be there.
func testEngine(t *testing.T) *Engine {
	t.Helper()
	if os.Getenv("WALHOUSE_INTEGRATION") == "0" {
		t.Skip("integration tests disabled (WALHOUSE_INTEGRATION=0)")
	}
	lib := testenv.Load().ChdbLib
	if lib == "" {
		msg := "WALHOUSE_CHDB_LIB is not set: run `make services` (it downloads .local/chdb/libchdb.so) or set WALHOUSE_CHDB_LIB to the path of libchdb.so"
		if testenv.Required() {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	shared.once.Do(func() {
		shared.dir, shared.err = os.MkdirTemp("", "walhouse-chdb-test-*")
		if shared.err == nil {
			shared.lib = lib
			shared.engine, shared.err = Open(lib, shared.dir)
		}
	})
	if shared.err != nil {
		t.Fatalf("open the engine: %v", shared.err)
	}
	return shared.engine
}

func TestMain(m *testing.M) {
	code := m.Run()
	if shared.engine != nil {
		_ = shared.engine.Close()
	}
	if shared.dir != "" {
		_ = os.RemoveAll(shared.dir)
	}
	os.Exit(code)
}
