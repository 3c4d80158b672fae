// Command cert-manager-cainjector runs cert-manager's CA injector from the
// published github.com/cert-manager/cert-manager module: it fills the caBundle
// of webhook configurations, APIServices and CRD conversion webhooks annotated
// with cert-manager.io/inject-ca-from (a Certificate), inject-ca-from-secret
// or inject-apiserver-ca.
//
// Upstream's own main (cmd/cainjector, module
// github.com/cert-manager/cert-manager/cainjector-binary) is a separate,
// unpublished module, so hack/certmanager/run builds this small replacement in
// a wrapper module. The injectors themselves are upstream's
// pkg/controller/cainjector.RegisterAllInjectors on a controller-runtime
// manager configured like upstream's (Secrets read uncached, metadata-only
// Secret watches, Lease leader election); configuration is upstream's
// CAInjectorConfiguration file format (cainjector.config.cert-manager.io/v1alpha1)
// decoded and defaulted by pkg/cainjector/configfile.
//
// Not provided (they need upstream's internal packages): the individual flags
// (use --config), TLS for the metrics endpoint and pprof.
package main

import (
	"context"
	"errors"
	"fmt"
	iofs "io/fs"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	apiext "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	kscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	logsapi "k8s.io/component-base/logs/api/v1"
	apireg "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/cert-manager/cert-manager/pkg/cainjector/configfile"
	cmscheme "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned/scheme"
	"github.com/cert-manager/cert-manager/pkg/controller/cainjector"
	logf "github.com/cert-manager/cert-manager/pkg/logs"
	"github.com/cert-manager/cert-manager/pkg/util"
	utilfeature "github.com/cert-manager/cert-manager/pkg/util/feature"
)

const baseConfig = "apiVersion: cainjector.config.cert-manager.io/v1alpha1\nkind: CAInjectorConfiguration\n"

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "cert-manager-cainjector: %v\n", err)
		logf.FlushLogs()
		os.Exit(1)
	}
	logf.FlushLogs()
}

func run() error {
	logf.InitLogs()

	fs := pflag.NewFlagSet("cert-manager-cainjector", pflag.ContinueOnError)
	configPath := fs.String("config", "", "CAInjectorConfiguration file (cainjector.config.cert-manager.io/v1alpha1); "+
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
		fmt.Printf("cert-manager-cainjector %s (%s) %s\n", util.AppVersion, util.AppGitCommit, util.VersionInfo().GoVersion)
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
		return fmt.Errorf("decoding the CAInjectorConfiguration: %w", err)
	}
	cfg := file.Config
	if *kubeconfig != "" {
		cfg.KubeConfig = *kubeconfig
	}
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
	le := cfg.LeaderElectionConfig
	if le.Enabled && le.Namespace == "" {
		return fmt.Errorf("leaderElectionConfig.namespace is required when leader election is enabled")
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx = logf.NewContext(ctx, logf.Log, "cainjector")
	log := logf.FromContext(ctx)
	ctrl.SetLogger(log)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if *exitIfConfigRemoved && *configPath != "" {
		go watchConfig(ctx, *configPath, cancel)
	}
	log.Info("starting cert-manager cainjector", "version", util.AppVersion, "git_commit", util.AppGitCommit,
		"go_version", util.VersionInfo().GoVersion, "platform", util.VersionInfo().Platform)

	// Same resolution as upstream: kubeConfig if set, else in-cluster / $KUBECONFIG / ~/.kube/config.
	var loading clientcmd.ClientConfigLoadingRules
	if cfg.KubeConfig != "" {
		loading.ExplicitPath = cfg.KubeConfig
	} else {
		loading = *clientcmd.NewDefaultClientConfigLoadingRules()
	}
	restConfig, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(&loading, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return fmt.Errorf("loading the kubeconfig: %w", err)
	}
	restConfig = util.RestConfigWithUserAgent(restConfig, "cainjector")

	var namespaces map[string]cache.Config
	if cfg.Namespace != "" {
		namespaces = map[string]cache.Config{cfg.Namespace: {}}
	}
	scheme := runtime.NewScheme()
	utilruntime.Must(kscheme.AddToScheme(scheme))
	utilruntime.Must(cmscheme.AddToScheme(scheme))
	utilruntime.Must(apiext.AddToScheme(scheme))
	utilruntime.Must(apireg.AddToScheme(scheme))

	mgr, err := ctrl.NewManager(restConfig, ctrl.Options{
		Scheme: scheme,
		Cache: cache.Options{
			ReaderFailOnMissingInformer: true,
			DefaultNamespaces:           namespaces,
		},
		// Like upstream: never cache Secrets (their data); watches on them are metadata-only.
		Client:                        client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.Secret{}}}},
		LeaderElection:                le.Enabled,
		LeaderElectionNamespace:       le.Namespace,
		LeaderElectionID:              "cert-manager-cainjector-leader-election",
		LeaderElectionReleaseOnCancel: true,
		LeaderElectionLabels:          map[string]string{"app.kubernetes.io/managed-by": "cert-manager-cainjector"},
		LeaderElectionResourceLock:    resourcelock.LeasesResourceLock,
		LeaseDuration:                 &le.LeaseDuration,
		RenewDeadline:                 &le.RenewDeadline,
		RetryPeriod:                   &le.RetryPeriod,
		Metrics:                       metricsserver.Options{BindAddress: cfg.MetricsListenAddress},
	})
	if err != nil {
		return fmt.Errorf("creating the manager: %w", err)
	}

	if cfg.EnableDataSourceConfig.Certificates {
		// The Certificate watch needs the CRD; wait for it like upstream does (5 minutes).
		direct, err := client.New(mgr.GetConfig(), client.Options{Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper()})
		if err != nil {
			return err
		}
		err = wait.PollUntilContextTimeout(ctx, time.Second, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
			var crd apiext.CustomResourceDefinition
			err := direct.Get(ctx, types.NamespacedName{Name: "certificates.cert-manager.io"}, &crd)
			if apierrors.IsNotFound(err) {
				log.Info("certificates.cert-manager.io CRD not found yet, retrying")
				return false, nil
			}
			return err == nil, err
		})
		if err != nil {
			return fmt.Errorf("waiting for the certificates.cert-manager.io CRD: %w", err)
		}
	}

	if err := cainjector.RegisterAllInjectors(ctx, mgr, cainjector.SetupOptions{
		Namespace:                    cfg.Namespace,
		EnableCertificatesDataSource: cfg.EnableDataSourceConfig.Certificates,
		EnabledReconcilersFor: map[string]bool{
			cainjector.MutatingWebhookConfigurationName:   cfg.EnableInjectableConfig.MutatingWebhookConfigurations,
			cainjector.ValidatingWebhookConfigurationName: cfg.EnableInjectableConfig.ValidatingWebhookConfigurations,
			cainjector.APIServiceName:                     cfg.EnableInjectableConfig.APIServices,
			cainjector.CustomResourceDefinitionName:       cfg.EnableInjectableConfig.CustomResourceDefinitions,
		},
	}); err != nil {
		return fmt.Errorf("registering the injectors: %w", err)
	}
	if err := mgr.Start(ctx); err != nil {
		return fmt.Errorf("running the manager: %w", err)
	}
	return nil
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
