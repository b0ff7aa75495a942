package soak

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gridsync/gridsync/api/v1alpha1"
	"github.com/gridsync/gridsync/shared/envelope"
	"github.com/gridsync/gridsync/test/framework"
	"github.com/gridsync/gridsync/test/testbin"
	"github.com/gridsync/gridsync/test/testproc"
)

// The agent phase: for the middle third of a run the overlay comes from
// the gridsync-agent binary, publishing from a GridNetwork and an
// InferenceProvider whose models change, instead of from the harness.
// Its revisions are learnt from a watch of the ConfigMap, in the order
// they appear, so that the reader can tell a published revision and its
// order. Faults that write the ConfigMap themselves wait for the harness
// phases.

// agentPhase starts the agent on the network's resources.
func (s *soak) agentPhase(ctx context.Context) {
	s.cmMu.Lock()
	defer s.cmMu.Unlock()
	// The phase may begin while a fault has the API server down: each
	// call below is idempotent and retried like the harness's others.
	site := &framework.Site{CP: cp, AgentNS: s.ns + "-agent", Namespaces: []string{s.ns},
		Kubeconfig: filepath.Join(s.t.TempDir(), "agent-kubeconfig")}
	if !s.retry(ctx, "agent site", func() error { return site.Setup(ctx) }) {
		return
	}
	var err error
	s.grid, err = framework.AdminClient(cp)
	if err != nil {
		s.violate("harness: client: %v", err)
		return
	}
	network := &v1alpha1.GridNetwork{ObjectMeta: metav1.ObjectMeta{Name: s.scope.Network}, Spec: v1alpha1.GridNetworkSpec{
		ConsumerGateways: []v1alpha1.ConsumerGateway{{Name: s.scope.Gateway, Namespace: s.ns, SiteName: s.scope.LocalSite}},
	}}
	s.provider = &v1alpha1.InferenceProvider{ObjectMeta: metav1.ObjectMeta{Name: s.scope.Network + "-provider"}, Spec: v1alpha1.InferenceProviderSpec{
		GridNetworkRef: s.scope.Network, ProviderKind: "vllm", BackendKind: "openai_compatible",
		Endpoint: "http://127.0.0.1:9/v1", Models: s.nextModels(),
	}}
	for _, obj := range []client.Object{network, s.provider} {
		if !s.retry(ctx, "create "+obj.GetName(), func() error { return s.grid.Create(ctx, obj) }) {
			return
		}
	}
	// The fast resync only: the agent keeps leader election's defaults,
	// so that it steps down (and is restarted) when an API outage
	// outlasts the 10 s renew deadline, as a pod's agent does.
	args := site.AgentArgs(testproc.FreeAddr(s.t), framework.AgentOptions{Timings: framework.Timings{Resync: framework.Fast.Resync}})
	s.agent = &agentRun{stop: make(chan struct{}), done: make(chan struct{})}
	go s.superviseAgent(s.agent, args)
	s.viaAgent.Store(true)
	s.events.add("agent phase begins")
}

// agentRun is the agent process of a phase and its supervisor's state.
type agentRun struct {
	stop, done chan struct{}
	mu         sync.Mutex
	cmd        *exec.Cmd
}

// superviseAgent keeps the agent running through its phase as the
// kubelet keeps its container: an agent that exits is started again a
// second later. An agent exits when it cannot renew its lease
// within the renew deadline (10 s), as in an API outage that long; it
// publishes again once it leads again.
func (s *soak) superviseAgent(run *agentRun, args []string) {
	defer close(run.done)
	for {
		cmd := exec.Command(framework.Bin(testbin.Agent), args...) //nolint:noctx // stopped with SIGTERM when the phase ends
		cmd.Stderr = &lineWriter{log: s.events, prefix: "agent "}
		if err := cmd.Start(); err != nil {
			s.violate("harness: start the agent: %v", err)
			return
		}
		run.mu.Lock()
		run.cmd = cmd
		run.mu.Unlock()
		err := cmd.Wait()
		select {
		case <-run.stop:
			return
		default:
		}
		s.events.add(fmt.Sprintf("agent exited: %v", err))
		s.mu.Lock()
		s.agentRestarts++
		s.mu.Unlock()
		select {
		case <-run.stop:
			return
		case <-time.After(time.Second):
		}
	}
}

// endAgentPhase stops the agent; the harness publishes again.
func (s *soak) endAgentPhase() {
	s.cmMu.Lock()
	defer s.cmMu.Unlock()
	if s.agent == nil {
		return
	}
	close(s.agent.stop)
	s.agent.mu.Lock()
	if cmd := s.agent.cmd; cmd != nil {
		_ = cmd.Process.Signal(syscall.SIGTERM)
	}
	s.agent.mu.Unlock()
	<-s.agent.done
	s.agent = nil
	s.viaAgent.Store(false)
	s.events.add("agent phase ends")
}

// nextModels are the provider's models for its next revision: new names
// every time, so that no revision repeats an earlier one.
func (s *soak) nextModels() []v1alpha1.Model {
	s.mu.Lock()
	s.modelSeq++
	n := s.modelSeq
	s.mu.Unlock()
	var out []v1alpha1.Model
	for i := range 1 + n%3 {
		out = append(out, v1alpha1.Model{Name: fmt.Sprintf("model-%d-%d", n, i)})
	}
	return out
}

// agentBump changes the provider's models: the agent publishes a revision.
func (s *soak) agentBump(ctx context.Context) {
	var p v1alpha1.InferenceProvider
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := s.grid.Get(cctx, client.ObjectKeyFromObject(s.provider), &p); err != nil {
		s.events.add(fmt.Sprintf("provider change failed: %v", err))
		return
	}
	// A merge patch, not an update: the agent writes the provider's
	// status meanwhile, and an update would lose to that by conflict.
	orig := p.DeepCopy()
	p.Spec.Models = s.nextModels()
	if err := s.grid.Patch(cctx, &p, client.MergeFrom(orig)); err != nil {
		s.events.add(fmt.Sprintf("provider change failed: %v", err))
		return
	}
	s.events.add(fmt.Sprintf("provider models changed to %s", p.Spec.Models[0].Name))
}

// learnRevisions registers every revision the ConfigMap comes to hold that
// the harness did not publish (the agent's), as the next generation, for
// the whole run; the watch is restarted after every end (API restarts).
func (s *soak) learnRevisions(ctx context.Context) {
	for ctx.Err() == nil {
		w, err := s.admin.CoreV1().ConfigMaps(s.ns).Watch(ctx, metav1.ListOptions{
			FieldSelector: "metadata.name=" + s.configMap,
		})
		if err != nil {
			time.Sleep(200 * time.Millisecond)
			continue
		}
		for ev := range w.ResultChan() {
			if cm, ok := ev.Object.(*corev1.ConfigMap); ok && (ev.Type == watch.Added || ev.Type == watch.Modified) {
				s.learn(cm)
			}
		}
		w.Stop()
	}
}

// learn registers the revision a ConfigMap holds when it is valid and
// new: the next generation.
func (s *soak) learn(cm *corev1.ConfigMap) {
	res, err := envelope.Validate([]byte(cm.Data[envelope.DataKeyEnvelope]), envelope.Options{Expect: s.scope})
	if err != nil {
		return // the invalid fault's updates, a deletion's leftovers
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, known := s.published[res.Revision]; known {
		return
	}
	s.gen++
	s.published[res.Revision] = s.gen
	s.newest = s.gen
	s.acceptedAt[s.gen] = time.Now()
	s.updates++
	s.agentUpdates++
	s.events.add(fmt.Sprintf("learnt gen %d %s (the agent's)", s.gen, res.Revision[:12]))
}
