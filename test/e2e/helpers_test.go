package e2e

import (
	"testing"

	"github.com/gridsync/gridsync/test/framework"
	"github.com/gridsync/gridsync/test/testbin"
	"github.com/gridsync/gridsync/test/testpod"
	"github.com/gridsync/gridsync/test/testproc"
)

// pod is one gateway pod's view (test/testpod).
type pod = testpod.Pod

func newPod(t *testing.T) *pod { return testpod.New(t, cp) }

// proc is a binary running as a child process.
type proc = testproc.Proc

func start(t *testing.T, binary testbin.Binary, env []string, args ...string) *proc {
	t.Helper()
	return testproc.Start(t, framework.Bin(binary), env, args...)
}

func freeAddr(t *testing.T) string               { return testproc.FreeAddr(t) }
func waitOK(t *testing.T, url string)            { testproc.WaitOK(t, url) }
func get(t *testing.T, url string) (int, string) { return testproc.Get(t, url) }
