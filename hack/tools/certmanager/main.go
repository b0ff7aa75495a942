// Command cert-manager-controller runs the pinned cert-manager's own
// controllers (github.com/cert-manager/cert-manager/pkg/controller) against
// a kube-apiserver, for the test that issues a site certificate the way
// trust/README.md tells operators to.
//
// It exists because cert-manager's controller main package is not a module
// the Go module proxy can serve: cmd/controller is the nested module
// github.com/cert-manager/cert-manager/controller-binary, whose path does
// not match its folder and which replaces the main module with ../../. What
// the proxy does serve, the main module at the pinned version, holds every
// controller and issuer; this file only does what cmd/controller/app's Run
// does with them once leader election is off: build a controller context
// factory, construct the enabled controllers from controller.Known(), start
// the shared informers and run the control loops until a signal. Leader
// election, the metrics and healthz servers, and the configuration file are
// left out: a test runs one controller and reads its results from the API.
//
// Its flags keep cert-manager's names and meanings where they exist:
// --kubeconfig, --namespace, --controllers (a comma-separated list of
// controller names; upstream's "*" and "-name" forms are not supported, so a
// test names exactly what runs), --leader-elect (only false is supported),
// --concurrent-workers, --cluster-resource-namespace and -v.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"
	"k8s.io/klog/v2"

	"github.com/cert-manager/cert-manager/pkg/controller"
	logf "github.com/cert-manager/cert-manager/pkg/logs"
	"github.com/cert-manager/cert-manager/pkg/util"

	// The controllers register themselves with controller.Known() and the
	// issuer kinds with the issuer factory when imported; these are the ones
	// a CA Issuer and its Certificates need (the ACME, Vault and Venafi
	// issuers and the ingress and Gateway shims are left out, and with them
	// their cloud SDKs).
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/approver"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/ca"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/issuing"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/keymanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/readiness"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/requestmanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/revisionmanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/trigger"
	_ "github.com/cert-manager/cert-manager/pkg/controller/issuers"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/ca"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "cert-manager-controller:", err)
		os.Exit(1)
	}
}

func run() error {
	fs := flag.NewFlagSet("cert-manager-controller", flag.ExitOnError)
	klog.InitFlags(fs)
	kubeconfig := fs.String("kubeconfig", "", "path to the kubeconfig of the API server to act on")
	namespace := fs.String("namespace", "", "namespace to limit the controllers to (all namespaces when empty)")
	controllers := fs.String("controllers", "", "comma-separated names of the controllers to run")
	leaderElect := fs.Bool("leader-elect", false, "leader election (not supported: must be false)")
	workers := fs.Int("concurrent-workers", 5, "workers per controller")
	clusterNS := fs.String("cluster-resource-namespace", "kube-system", "namespace of the Secrets ClusterIssuers refer to")
	version := fs.Bool("version", false, "print the version stamped in at build time and exit")
	_ = fs.Parse(os.Args[1:])

	if *version {
		fmt.Println(util.VersionInfo().GitVersion)
		return nil
	}
	if *leaderElect {
		return errors.New("--leader-elect=true is not supported: run one controller")
	}
	enabled := map[string]bool{}
	known := controller.Known()
	for _, n := range strings.Split(*controllers, ",") {
		n = strings.TrimSpace(n)
		if n == "" {
			continue
		}
		if _, ok := known[n]; !ok {
			names := make([]string, 0, len(known))
			for k := range known {
				names = append(names, k)
			}
			sort.Strings(names)
			return fmt.Errorf("--controllers: unknown controller %q (known: %s)", n, strings.Join(names, ","))
		}
		enabled[n] = true
	}
	if len(enabled) == 0 {
		return errors.New("--controllers names no controller")
	}

	logf.InitLogs()
	defer logf.FlushLogs()
	rootCtx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rootCtx = logf.NewContext(rootCtx, logf.Log, "controller")
	log := logf.FromContext(rootCtx)
	log.Info("starting cert-manager controller", "version", util.VersionInfo().GitVersion)

	// The values cert-manager's configuration defaults to
	// (internal/apis/config/controller/v1alpha1/defaults.go at the pinned
	// version), since the defaulting code is internal to its module.
	factory, err := controller.NewContextFactory(rootCtx, controller.ContextOptions{
		Kubeconfig:         *kubeconfig,
		KubernetesAPIQPS:   20,
		KubernetesAPIBurst: 50,
		Namespace:          *namespace,
		IssuerOptions: controller.IssuerOptions{
			ClusterResourceNamespace: *clusterNS,
		},
		CertificateOptions: controller.CertificateOptions{
			CopiedAnnotationPrefixes:                 []string{"*", "-kubectl.kubernetes.io/", "-fluxcd.io/", "-argocd.argoproj.io/"},
			CertificateRequestMinimumBackoffDuration: time.Hour,
			CertificateRequestMaximumBackoffDuration: 32 * time.Hour,
		},
	})
	if err != nil {
		return err
	}
	cmctx, err := factory.Build()
	if err != nil {
		return err
	}

	g, gctx := errgroup.WithContext(rootCtx)
	names := make([]string, 0, len(enabled))
	for n := range enabled {
		names = append(names, n)
	}
	slices.Sort(names)
	log.Info("enabled controllers: " + strings.Join(names, ","))
	for _, n := range names {
		iface, err := known[n](factory)
		if err != nil {
			return fmt.Errorf("controller %s: %w", n, err)
		}
		g.Go(func() error { return iface.Run(*workers, gctx) })
	}
	cmctx.SharedInformerFactory.Start(gctx.Done())
	cmctx.KubeSharedInformerFactory.Start(gctx.Done())
	cmctx.HTTP01ResourceMetadataInformersFactory.Start(gctx.Done())

	err = g.Wait()
	cmctx.HTTP01ResourceMetadataInformersFactory.Shutdown()
	cmctx.KubeSharedInformerFactory.Shutdown()
	cmctx.SharedInformerFactory.Shutdown()
	log.Info("control loops exited")
	return err
}
