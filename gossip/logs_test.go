package gossip

import (
	"log"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// memberlist writes some log lines while it holds its node lock, and every
// line under the log's own lock. Acting on a suspicion queues broadcasts,
// whose queue reads the member count: done inside Write, a suspicion line
// waited for locks that memberlist's other goroutines held while they
// waited for the log, and a 200-site grid stopped. Write must return
// whatever the suspicion's handling waits for.
func TestSuspicionIsHandledOutsideMemberlistsLog(t *testing.T) {
	m, err := newMetrics(prometheus.NewRegistry())
	require.NoError(t, err)
	release := make(chan struct{})
	got := make(chan string, 1)
	ml := newMemberlistLog(slog.New(slog.DiscardHandler), m, func(member string) {
		<-release
		got <- member
	}, nil)
	logger := log.New(ml, "", 0)

	wrote := make(chan struct{})
	go func() {
		logger.Printf("[INFO] memberlist: Suspect east-17 has failed, no acks received")
		// The next line takes the log's lock again: it would wait for the
		// first line's handling if that ran inside Write.
		logger.Printf("[INFO] memberlist: Marking east-17 as failed, suspect timeout reached (0 peer confirmations)")
		close(wrote)
	}()
	select {
	case <-wrote:
	case <-time.After(5 * time.Second):
		t.Fatal("memberlist's log waited for a suspicion to be handled")
	}
	close(release)
	select {
	case member := <-got:
		require.Equal(t, "east-17", member)
	case <-time.After(5 * time.Second):
		t.Fatal("the suspicion was never handled")
	}
}

// A refutation of this site's suspicion or death, which memberlist says
// only in its log, is handed on (outside the log's lock, as a suspicion
// is); other lines are not.
func TestARefutationIsHandedOnFromMemberlistsLog(t *testing.T) {
	m, err := newMetrics(prometheus.NewRegistry())
	require.NoError(t, err)
	refuted := make(chan struct{}, 4)
	logger := log.New(newMemberlistLog(slog.New(slog.DiscardHandler), m, nil, func() { refuted <- struct{}{} }), "", 0)
	logger.Printf("[WARN] memberlist: Refuting a suspect message (from: west/17)")
	logger.Printf("[WARN] memberlist: Refuting a dead message (from: west/17)")
	logger.Printf("[WARN] memberlist: Refuting an alive message for 'east/1' (10.0.0.1:7946) meta:([] VS []), vsn:([] VS [])")
	logger.Printf("[INFO] memberlist: Suspect west-17 has failed, no acks received")
	for range 2 {
		select {
		case <-refuted:
		case <-time.After(5 * time.Second):
			t.Fatal("a refutation was not handed on")
		}
	}
	select {
	case <-refuted:
		t.Fatal("a line that refutes nothing was handed on")
	case <-time.After(200 * time.Millisecond):
	}
}
