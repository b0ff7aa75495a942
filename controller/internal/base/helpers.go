package base

import (
	"fmt"
	"strings"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// APIFailure says why reading ("get") or writing ("write") an object of
// kind failed, without echoing a response body.
func APIFailure(err error, verb, kind string) string {
	switch {
	case apierrors.IsNotFound(err):
		return "the " + kind + " does not exist"
	case apierrors.IsForbidden(err):
		return fmt.Sprintf("the agent may not %s the %s (RBAC)", verb, kind)
	default:
		return fmt.Sprintf("could not %s the %s (%s)", verb, kind, apierrors.ReasonForError(err))
	}
}

// ReasonFieldNotSupported is the Ready condition's reason while a network
// sets fields this release does not act on.
const ReasonFieldNotSupported = "FieldNotSupported"

// JoinLimited joins at most n items and says how many more there are, so
// a condition message stays short.
func JoinLimited(items []string, n int) string {
	out := ""
	for i, s := range items {
		if i == n {
			return out + fmt.Sprintf(" and %d more", len(items)-n)
		}
		if i > 0 {
			out += ", "
		}
		out += s
	}
	return out
}

// ReasonLog remembers the last problem logged per key, so that a problem
// is logged when it starts or changes, not at every round.
type ReasonLog struct {
	mu   sync.Mutex
	last map[string]string
}

// Set records key's problem ("" for none) and returns the one before.
func (r *ReasonLog) Set(key, why string) (before string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.last == nil {
		r.last = map[string]string{}
	}
	before = r.last[key]
	if why == "" {
		delete(r.last, key)
	} else {
		r.last[key] = why
	}
	return before
}

// Keep forgets the problems under prefix that are not in current: a
// problem that comes back is logged again.
func (r *ReasonLog) Keep(prefix string, current map[string]bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k := range r.last {
		if strings.HasPrefix(k, prefix) && !current[k] {
			delete(r.last, k)
		}
	}
}
