package controller

import (
	"fmt"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/gridsync/gridsync/api/v1alpha1"
)

// ManagerOptions configure the manager that hosts the controller.
type ManagerOptions struct {
	Options
	// LeaderElection makes one replica active at a time, through a Lease
	// named LeaderElectionID in LeaderElectionNamespace.
	LeaderElection          bool
	LeaderElectionNamespace string
	LeaderElectionID        string
	// LeaseDuration, RenewDeadline and RetryPeriod tune the election;
	// zero keeps client-go's defaults (15 s, 10 s, 2 s).
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// SeveralPerProcess lets more than one manager run in a process (the
	// tests run two replicas); controller-runtime refuses a controller
	// name twice otherwise, because their metrics would mix.
	SeveralPerProcess bool
}

// ShutdownTimeout is how long a stopping manager waits for its runnables
// (the reconcilers, SWIM's leave, the Lease's release).
const ShutdownTimeout = 5 * time.Second

// Scheme knows the core types and the Grid API.
func Scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, err
	}
	if err := v1alpha1.AddToScheme(s); err != nil {
		return nil, err
	}
	return s, nil
}

// NewManager returns a manager running the controller. Its own metrics and
// probe servers are off: the agent serves both with the project's health
// package, from the registry in Options plus controller-runtime's.
func NewManager(cfg *rest.Config, mo ManagerOptions) (manager.Manager, error) {
	scheme, err := Scheme()
	if err != nil {
		return nil, err
	}
	opts := mo.withDefaults()
	mgrOpts := manager.Options{
		Scheme:                        scheme,
		Cache:                         cacheOptions(),
		MapperProvider:                newRESTMapper,
		Client:                        client.Options{Cache: &client.CacheOptions{DisableFor: uncached}},
		Metrics:                       metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress:        "0",
		LeaderElection:                mo.LeaderElection,
		LeaderElectionID:              mo.LeaderElectionID,
		LeaderElectionNamespace:       mo.LeaderElectionNamespace,
		LeaderElectionResourceLock:    "leases",
		LeaderElectionReleaseOnCancel: true, // a stopping leader hands over at once
		Logger:                        logr.FromSlogHandler(opts.Logger.Handler()),
		GracefulShutdownTimeout:       durationPtr(ShutdownTimeout),
		Controller:                    config.Controller{SkipNameValidation: &mo.SeveralPerProcess},
	}
	if mo.LeaseDuration > 0 {
		mgrOpts.LeaseDuration = durationPtr(mo.LeaseDuration)
	}
	if mo.RenewDeadline > 0 {
		mgrOpts.RenewDeadline = durationPtr(mo.RenewDeadline)
	}
	if mo.RetryPeriod > 0 {
		mgrOpts.RetryPeriod = durationPtr(mo.RetryPeriod)
	}
	mgr, err := ctrl.NewManager(cfg, mgrOpts)
	if err != nil {
		return nil, fmt.Errorf("controller manager: %w", err)
	}
	if err := Setup(mgr, opts); err != nil {
		return nil, err
	}
	return mgr, nil
}

func durationPtr(d time.Duration) *time.Duration { return &d }
