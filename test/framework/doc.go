// Package framework is how the suites under test/ start what they test,
// on top of test/controlplane: a site (a control plane's corner with the
// agent's ServiceAccount, its chart's RBAC and a kubeconfig) and its agent
// as a process, with the test timings in one place; and the TestMain of
// every suite and benchmark package.
//
// A suite's main builds the binaries it runs and starts its control
// planes:
//
//	var cp *controlplane.ControlPlane
//
//	func TestMain(m *testing.M) {
//		framework.Main(m, framework.ControlPlanes(&cp), framework.Binaries(testbin.Agent))
//	}
//
// and a test starts a site and its agent:
//
//	s := framework.NewSite(t, cp, framework.SiteOptions{Prefix: "grid", Name: "east", Swim: true})
//	a := s.StartAgent(t, framework.AgentOptions{Timings: framework.Fast, Loopback: true})
//
// A benchmark package calls BenchMain instead of Main: `go test ./...`
// passes through every benchmark package without starting anything.
package framework
