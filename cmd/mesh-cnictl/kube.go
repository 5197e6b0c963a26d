package main

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/mesh-cni/mesh-cni/internal/version"
)

// kubeFlags are kubectl's connection flags (--kubeconfig, --context, -n,
// -s/--server, --token, --as, ...), bound straight to client-go's
// clientcmd: the kubeconfig loading rules and their overrides. That is all
// the CLI needs of kubectl's machinery, so it links no resource builder
// (and with it no Kustomize).
type kubeFlags struct {
	rules     *clientcmd.ClientConfigLoadingRules
	overrides clientcmd.ConfigOverrides
	// userExtra is --as-user-extra, KEY=VALUE each; clientcmd binds no
	// flag for it.
	userExtra []string
	// cacheDir is --cache-dir, kept so a kubectl command line still
	// parses: kubectl uses it for discovery, which the CLI never does.
	cacheDir string
	loader   clientcmd.ClientConfig
}

func newKubeFlags() *kubeFlags {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	// As kubectl: with no kubeconfig at all, the defaults (and the
	// in-cluster config) apply rather than an empty config.
	rules.DefaultClientConfig = &clientcmd.DefaultClientConfig
	return &kubeFlags{rules: rules, overrides: clientcmd.ConfigOverrides{ClusterDefaults: clientcmd.ClusterDefaults}}
}

// addFlags binds the flags kubectl has for a connection, under kubectl's
// names. Not --username/--password: the CLI has never offered basic
// authentication.
func (k *kubeFlags) addFlags(fs *pflag.FlagSet) {
	fs.StringVar(&k.rules.ExplicitPath, clientcmd.RecommendedConfigPathFlag, "", "Path to the kubeconfig file to use for CLI requests.")
	fs.StringVar(&k.cacheDir, "cache-dir", "", "Accepted as kubectl accepts it; mesh-cnictl keeps no discovery cache")
	names := clientcmd.RecommendedConfigOverrideFlags("")
	names.AuthOverrideFlags.Username.LongName, names.AuthOverrideFlags.Password.LongName = "", ""
	names.ClusterOverrideFlags.APIServer.ShortName = "s"
	clientcmd.BindOverrideFlags(&k.overrides, fs, names)
	fs.Var((*userExtraFlag)(&k.userExtra), "as-user-extra", "User extras to impersonate for the operation, KEY=VALUE; this flag can be repeated to specify multiple values for the same key.")
}

// userExtraFlag is --as-user-extra: a string array whose every value must
// be KEY=VALUE, refused at parse time rather than dropped.
type userExtraFlag []string

func (f *userExtraFlag) Set(v string) error {
	if key, _, ok := strings.Cut(v, "="); !ok || key == "" {
		return errors.New("want KEY=VALUE")
	}
	*f = append(*f, v)
	return nil
}

func (f *userExtraFlag) String() string { return "[" + strings.Join(*f, ",") + "]" }

func (f *userExtraFlag) Type() string { return "stringArray" }

// namespace is -n, "" when not given.
func (k *kubeFlags) namespace() string { return k.overrides.Context.Namespace }

// clientConfig is the kubeconfig with the flags applied, built once per
// run so every command and completion sees the same one.
func (k *kubeFlags) clientConfig() clientcmd.ClientConfig {
	if k.loader == nil {
		if len(k.userExtra) > 0 {
			k.overrides.AuthInfo.ImpersonateUserExtra = map[string][]string{}
			for _, kv := range k.userExtra {
				key, value, _ := strings.Cut(kv, "=") // userExtraFlag checked the form
				k.overrides.AuthInfo.ImpersonateUserExtra[key] = append(k.overrides.AuthInfo.ImpersonateUserExtra[key], value)
			}
		}
		k.loader = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(k.rules, &k.overrides)
	}
	return k.loader
}

// errNoKubeconfig replaces client-go's terse message for no kubeconfig
// at all (and not in a pod).
var errNoKubeconfig = errors.New("no kubeconfig: pass --kubeconfig, set $KUBECONFIG, or create ~/.kube/config")

// kubeNamespace is the namespace of the kubeconfig's context, or -n.
func (k *kubeFlags) kubeNamespace() (string, error) {
	ns, _, err := k.clientConfig().Namespace()
	if clientcmd.IsEmptyConfig(err) {
		return "", errNoKubeconfig
	}
	return ns, err
}

// newClient loads the kubeconfig the way kubectl does, with the kube
// flags; timeout bounds each call unless --request-timeout says otherwise.
func newClient(kube *kubeFlags, timeout time.Duration) (kubernetes.Interface, error) {
	cfg, err := kube.clientConfig().ClientConfig()
	if clientcmd.IsEmptyConfig(err) {
		err = errNoKubeconfig
	}
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig: %w", err)
	}
	cfg = rest.CopyConfig(cfg)
	if cfg.Timeout == 0 {
		cfg.Timeout = timeout
	}
	cfg.UserAgent = "mesh-cnictl/" + version.Version
	return kubernetes.NewForConfig(cfg)
}
