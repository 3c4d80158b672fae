// Command cert-manager-controller runs cert-manager's controllers (Issuers,
// Certificates, CertificateRequests, ACME, ...) from the published
// github.com/cert-manager/cert-manager module.
//
// Upstream's own main (cmd/controller, module
// github.com/cert-manager/cert-manager/controller-binary) is a separate,
// unpublished module, so hack/certmanager/run builds this small replacement in
// a wrapper module. It uses only importable packages:
//
//   - configuration: upstream's ControllerConfiguration file format
//     (controller.config.cert-manager.io/v1alpha1), decoded and defaulted by
//     pkg/controller/configfile exactly like upstream's --config;
//   - controllers: the constructors every pkg/controller/... package registers
//     in pkg/controller.Known(), built from a pkg/controller.ContextFactory;
//   - metrics (pkg/metrics), /livez (pkg/healthz) and Lease leader election
//     (client-go) as upstream wires them.
//
// Not provided (they need upstream's internal packages): the long list of
// individual flags (use --config), TLS for the metrics endpoint, pprof, the
// pemSizeLimitsConfig override (the built-in limits apply) and upstream's
// configuration validation beyond the checks below.
package main

import (
	"context"
	"errors"
	"fmt"
	iofs "io/fs"
	"maps"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	"golang.org/x/sync/errgroup"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/component-base/featuregate"
	logsapi "k8s.io/component-base/logs/api/v1"

	"github.com/cert-manager/cert-manager/pkg/controller"
	"github.com/cert-manager/cert-manager/pkg/controller/configfile"
	"github.com/cert-manager/cert-manager/pkg/healthz"
	dnsutil "github.com/cert-manager/cert-manager/pkg/issuer/acme/dns/util"
	logf "github.com/cert-manager/cert-manager/pkg/logs"
	"github.com/cert-manager/cert-manager/pkg/server"
	"github.com/cert-manager/cert-manager/pkg/util"
	utilfeature "github.com/cert-manager/cert-manager/pkg/util/feature"

	// Controllers register themselves in controller.Known() from init().
	challengescontroller "github.com/cert-manager/cert-manager/pkg/controller/acmechallenges"
	orderscontroller "github.com/cert-manager/cert-manager/pkg/controller/acmeorders"
	shimgatewaycontroller "github.com/cert-manager/cert-manager/pkg/controller/certificate-shim/gateways"
	shimingresscontroller "github.com/cert-manager/cert-manager/pkg/controller/certificate-shim/ingresses"
	shimlistenersetcontroller "github.com/cert-manager/cert-manager/pkg/controller/certificate-shim/listenerset"
	cracmecontroller "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/acme"
	crapprovercontroller "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/approver"
	crcacontroller "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/ca"
	crselfsignedcontroller "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/selfsigned"
	crvaultcontroller "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/vault"
	crvenaficontroller "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/venafi"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/issuing"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/keymanager"
	certificatesmetricscontroller "github.com/cert-manager/cert-manager/pkg/controller/certificates/metrics"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/readiness"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/requestmanager"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/revisionmanager"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/trigger"
	csracmecontroller "github.com/cert-manager/cert-manager/pkg/controller/certificatesigningrequests/acme"
	csrcacontroller "github.com/cert-manager/cert-manager/pkg/controller/certificatesigningrequests/ca"
	csrselfsignedcontroller "github.com/cert-manager/cert-manager/pkg/controller/certificatesigningrequests/selfsigned"
	csrvaultcontroller "github.com/cert-manager/cert-manager/pkg/controller/certificatesigningrequests/vault"
	csrvenaficontroller "github.com/cert-manager/cert-manager/pkg/controller/certificatesigningrequests/venafi"
	clusterissuerscontroller "github.com/cert-manager/cert-manager/pkg/controller/clusterissuers"
	issuerscontroller "github.com/cert-manager/cert-manager/pkg/controller/issuers"

	// Issuer implementations register themselves from init().
	_ "github.com/cert-manager/cert-manager/pkg/issuer/acme"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/ca"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/selfsigned"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/vault"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/venafi"
)

// What "*" in the configuration's controllers list means (upstream's default set).
var defaultEnabledControllers = []string{
	issuerscontroller.ControllerName,
	clusterissuerscontroller.ControllerName,
	certificatesmetricscontroller.ControllerName,
	shimingresscontroller.ControllerName,
	orderscontroller.ControllerName,
	challengescontroller.ControllerName,
	cracmecontroller.CRControllerName,
	crapprovercontroller.ControllerName,
	crcacontroller.CRControllerName,
	crselfsignedcontroller.CRControllerName,
	crvaultcontroller.CRControllerName,
	crvenaficontroller.CRControllerName,
	trigger.ControllerName,
	issuing.ControllerName,
	keymanager.ControllerName,
	requestmanager.ControllerName,
	readiness.ControllerName,
	revisionmanager.ControllerName,
}

var csrControllers = []string{
	csracmecontroller.CSRControllerName,
	csrcacontroller.CSRControllerName,
	csrselfsignedcontroller.CSRControllerName,
	csrvenaficontroller.CSRControllerName,
	csrvaultcontroller.CSRControllerName,
}

// Not run when the controller is scoped to one namespace.
var clusterScopedControllers = append([]string{clusterissuerscontroller.ControllerName}, csrControllers...)

const baseConfig = "apiVersion: controller.config.cert-manager.io/v1alpha1\nkind: ControllerConfiguration\n"

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "cert-manager-controller: %v\n", err)
		logf.FlushLogs()
		os.Exit(1)
	}
	logf.FlushLogs()
}

func run() error {
	logf.InitLogs()

	fs := pflag.NewFlagSet("cert-manager-controller", pflag.ContinueOnError)
	configPath := fs.String("config", "", "ControllerConfiguration file (controller.config.cert-manager.io/v1alpha1); "+
		"every field upstream's --config accepts, with upstream's defaults")
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig file (overrides kubeConfig in --config)")
	showVersion := fs.Bool("version", false, "print the version and exit")
	exitIfConfigRemoved := fs.Bool("exit-if-config-removed", false, "exit (0) once the --config file is gone, "+
		"e.g. when the local cluster's state directory holding it is removed")
	var logging logsapi.LoggingConfiguration
	logsapi.SetRecommendedLoggingConfiguration(&logging)
	logf.AddFlagsNonDeprecated(&logging, fs)
	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return nil
		}
		return err
	}
	if *showVersion {
		fmt.Printf("cert-manager-controller %s (%s) %s\n", util.AppVersion, util.AppGitCommit, util.VersionInfo().GoVersion)
		return nil
	}

	data := []byte(baseConfig)
	if *configPath != "" {
		b, err := os.ReadFile(*configPath)
		if err != nil {
			return fmt.Errorf("reading --config: %w", err)
		}
		data = b
	}
	file := configfile.New()
	if err := file.DecodeAndConfigure(data); err != nil {
		return fmt.Errorf("decoding the ControllerConfiguration: %w", err)
	}
	cfg := file.Config
	if *kubeconfig != "" {
		cfg.KubeConfig = *kubeconfig
	}
	// Logging flags given on the command line win over the file.
	fs.Visit(func(f *pflag.Flag) {
		switch f.Name {
		case "v":
			cfg.Logging.Verbosity = logging.Verbosity
		case "vmodule":
			cfg.Logging.VModule = logging.VModule
		case "logging-format":
			cfg.Logging.Format = logging.Format
		}
	})
	if err := utilfeature.DefaultMutableFeatureGate.SetFromMap(cfg.FeatureGates); err != nil {
		return fmt.Errorf("feature gates: %w", err)
	}
	if err := logf.ValidateAndApply(&cfg.Logging); err != nil {
		return fmt.Errorf("logging configuration: %w", err)
	}
	if cfg.NumberOfConcurrentWorkers < 1 {
		return fmt.Errorf("numberOfConcurrentWorkers must be at least 1")
	}
	if cfg.LeaderElectionConfig.Enabled && cfg.LeaderElectionConfig.Namespace == "" {
		return fmt.Errorf("leaderElectionConfig.namespace is required when leader election is enabled")
	}

	enabled := sets.New[string]()
	var disabled []string
	for _, name := range cfg.Controllers {
		switch {
		case name == "*":
			enabled.Insert(defaultEnabledControllers...)
		case strings.HasPrefix(name, "-"):
			disabled = append(disabled, strings.TrimPrefix(name, "-"))
		default:
			enabled.Insert(name)
		}
	}
	if len(enabled) == 0 && len(disabled) > 0 {
		enabled.Insert(defaultEnabledControllers...)
	}
	gate := utilfeature.DefaultFeatureGate
	if gate.Enabled(featuregate.Feature("ExperimentalCertificateSigningRequestControllers")) {
		enabled.Insert(csrControllers...)
	}
	if gate.Enabled(featuregate.Feature("ExperimentalGatewayAPISupport")) && cfg.EnableGatewayAPI {
		enabled.Insert(shimgatewaycontroller.ControllerName)
		if gate.Enabled(featuregate.Feature("ListenerSets")) && cfg.EnableGatewayAPIListenerSet {
			enabled.Insert(shimlistenersetcontroller.ControllerName)
		}
	}
	enabled.Delete(disabled...)
	if cfg.Namespace != "" {
		enabled.Delete(clusterScopedControllers...)
	}
	for name := range enabled {
		if _, ok := controller.Known()[name]; !ok {
			return fmt.Errorf("unknown controller %q (known: %s)", name, strings.Join(slices.Sorted(maps.Keys(controller.Known())), ", "))
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx = logf.NewContext(ctx, logf.Log, "controller")
	log := logf.FromContext(ctx)
	log.Info("starting cert-manager controller", "version", util.AppVersion, "git_commit", util.AppGitCommit,
		"go_version", util.VersionInfo().GoVersion, "platform", util.VersionInfo().Platform)

	opts, err := contextOptions(cfg.ACMEHTTP01Config.SolverResourceRequestCPU, cfg.ACMEHTTP01Config.SolverResourceRequestMemory,
		cfg.ACMEHTTP01Config.SolverResourceLimitsCPU, cfg.ACMEHTTP01Config.SolverResourceLimitsMemory)
	if err != nil {
		return err
	}
	opts.APIServerHost = cfg.APIServerHost //nolint:staticcheck // still honoured upstream
	opts.Kubeconfig = cfg.KubeConfig
	opts.KubernetesAPIQPS = cfg.KubernetesAPIQPS
	opts.KubernetesAPIBurst = cfg.KubernetesAPIBurst
	opts.Namespace = cfg.Namespace
	opts.ClusterResourceNamespace = cfg.ClusterResourceNamespace
	opts.ClusterIssuerAmbientCredentials = cfg.ClusterIssuerAmbientCredentials
	opts.IssuerAmbientCredentials = cfg.IssuerAmbientCredentials
	opts.HTTP01SolverImage = cfg.ACMEHTTP01Config.SolverImage
	opts.ACMEHTTP01SolverRunAsNonRoot = cfg.ACMEHTTP01Config.SolverRunAsNonRoot
	opts.HTTP01SolverNameservers = cfg.ACMEHTTP01Config.SolverNameservers
	opts.DNS01Nameservers = cfg.ACMEDNS01Config.RecursiveNameservers
	if len(opts.DNS01Nameservers) == 0 {
		opts.DNS01Nameservers = dnsutil.RecursiveNameservers
	}
	opts.DNS01CheckAuthoritative = !cfg.ACMEDNS01Config.RecursiveNameserversOnly
	opts.DNS01CheckRetryPeriod = cfg.ACMEDNS01Config.CheckRetryPeriod
	opts.MaxConcurrentChallenges = cfg.MaxConcurrentChallenges
	opts.DefaultIssuerName = cfg.IngressShimConfig.DefaultIssuerName
	opts.DefaultIssuerKind = cfg.IngressShimConfig.DefaultIssuerKind
	opts.DefaultIssuerGroup = cfg.IngressShimConfig.DefaultIssuerGroup
	opts.DefaultAutoCertificateAnnotations = cfg.IngressShimConfig.DefaultAutoCertificateAnnotations
	opts.ExtraCertificateAnnotations = cfg.IngressShimConfig.ExtraCertificateAnnotations
	opts.EnableOwnerRef = cfg.EnableCertificateOwnerRef
	opts.CopiedAnnotationPrefixes = cfg.CopiedAnnotationPrefixes
	opts.CertificateRequestMinimumBackoffDuration = cfg.CertificateRequestMinimumBackoffDuration
	opts.EnableGatewayAPI = cfg.EnableGatewayAPI
	opts.EnableGatewayAPIListenerSet = cfg.EnableGatewayAPIListenerSet

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if *exitIfConfigRemoved && *configPath != "" {
		go watchConfig(ctx, *configPath, cancel)
	}
	g, ctx := errgroup.WithContext(ctx)

	factory, err := controller.NewContextFactory(ctx, opts)
	if err != nil {
		return err
	}
	base, err := factory.Build()
	if err != nil {
		return err
	}
	log.Info("enabled controllers", "controllers", sets.List(enabled))

	metricsLn, err := server.Listen(ctx, "tcp", cfg.MetricsListenAddress)
	if err != nil {
		return fmt.Errorf("metrics listener on %s: %w", cfg.MetricsListenAddress, err)
	}
	metricsServer := base.Metrics.NewServer(metricsLn)
	g.Go(func() error {
		log.Info("serving metrics", "address", metricsLn.Addr().String())
		if err := metricsServer.Serve(metricsLn); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	})
	g.Go(func() error {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return metricsServer.Shutdown(shutdown) //nolint:contextcheck
	})

	healthzLn, err := net.Listen("tcp", cfg.HealthzListenAddress)
	if err != nil {
		return fmt.Errorf("healthz listener on %s: %w", cfg.HealthzListenAddress, err)
	}
	healthzServer := healthz.NewServer(cfg.LeaderElectionConfig.HealthzTimeout)
	g.Go(func() error {
		log.Info("serving /livez", "address", healthzLn.Addr().String())
		return healthzServer.Start(ctx, healthzLn)
	})

	elected := make(chan struct{})
	if cfg.LeaderElectionConfig.Enabled {
		le := cfg.LeaderElectionConfig
		g.Go(func() error {
			leCtx, err := factory.Build("leader-election")
			if err != nil {
				return err
			}
			host, err := os.Hostname()
			if err != nil {
				return err
			}
			lock, err := resourcelock.New(resourcelock.LeasesResourceLock, le.Namespace, "cert-manager-controller",
				leCtx.Client.CoreV1(), leCtx.Client.CoordinationV1(),
				resourcelock.ResourceLockConfig{Identity: host + "-external-cert-manager-controller", EventRecorder: leCtx.Recorder})
			if err != nil {
				return err
			}
			lost := make(chan struct{}, 1)
			elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
				Lock: lock, LeaseDuration: le.LeaseDuration, RenewDeadline: le.RenewDeadline, RetryPeriod: le.RetryPeriod,
				ReleaseOnCancel: true, WatchDog: healthzServer.LeaderHealthzAdaptor,
				Callbacks: leaderelection.LeaderCallbacks{
					OnStartedLeading: func(context.Context) { close(elected) },
					OnStoppedLeading: func() { lost <- struct{}{} },
				},
			})
			if err != nil {
				return err
			}
			log.Info("waiting for leader election", "namespace", le.Namespace, "lease", "cert-manager-controller")
			elector.Run(ctx)
			if ctx.Err() == nil {
				return errors.New("leader election lost")
			}
			return nil
		})
	} else {
		close(elected)
	}

	select {
	case <-ctx.Done():
		return g.Wait()
	case <-elected:
	}

	for name, construct := range controller.Known() {
		if !enabled.Has(name) {
			continue
		}
		iface, err := construct(factory)
		if err != nil {
			cancel()
			_ = g.Wait()
			return fmt.Errorf("constructing controller %s: %w", name, err)
		}
		g.Go(func() error {
			log.V(logf.InfoLevel).Info("starting controller", "controller", name)
			return iface.Run(cfg.NumberOfConcurrentWorkers, ctx)
		})
	}
	base.SharedInformerFactory.Start(ctx.Done())
	base.KubeSharedInformerFactory.Start(ctx.Done())
	base.HTTP01ResourceMetadataInformersFactory.Start(ctx.Done())
	if gate.Enabled(featuregate.Feature("ExperimentalGatewayAPISupport")) && cfg.EnableGatewayAPI {
		base.GWShared.Start(ctx.Done())
	}

	err = g.Wait()
	log.Info("control loops exited")
	base.HTTP01ResourceMetadataInformersFactory.Shutdown()
	base.KubeSharedInformerFactory.Shutdown()
	base.SharedInformerFactory.Shutdown()
	if cfg.EnableGatewayAPI {
		base.GWShared.Shutdown()
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

func contextOptions(reqCPU, reqMem, limCPU, limMem string) (controller.ContextOptions, error) {
	var opts controller.ContextOptions
	for _, q := range []struct {
		name  string
		value string
		into  *resource.Quantity
	}{
		{"acmeHTTP01Config.solverResourceRequestCPU", reqCPU, &opts.HTTP01SolverResourceRequestCPU},
		{"acmeHTTP01Config.solverResourceRequestMemory", reqMem, &opts.HTTP01SolverResourceRequestMemory},
		{"acmeHTTP01Config.solverResourceLimitsCPU", limCPU, &opts.HTTP01SolverResourceLimitsCPU},
		{"acmeHTTP01Config.solverResourceLimitsMemory", limMem, &opts.HTTP01SolverResourceLimitsMemory},
	} {
		parsed, err := resource.ParseQuantity(q.value)
		if err != nil {
			return opts, fmt.Errorf("%s: %w", q.name, err)
		}
		*q.into = parsed
	}
	return opts, nil
}

// watchConfig cancels the run once path no longer exists: a local instance then
// stops with the cluster whose state directory held its configuration.
func watchConfig(ctx context.Context, path string, cancel context.CancelFunc) {
	ticker := time.NewTicker(time.Second)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
			if _, err := os.Stat(path); errors.Is(err, iofs.ErrNotExist) {
				logf.FromContext(ctx).Info("configuration file removed; shutting down", "config", path)
				cancel()
				return
			}
		}
	}
}
