package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/eppkit/eppkit/conformance/cluster/local"
	"github.com/eppkit/eppkit/fakes/kubelet"
)

func init() {
	subcommands = append(subcommands, newClusterCommand)
}

// newClusterCommand is `eppkit cluster`: the local cluster provider (up, down) and the process
// kubelet it runs. See docs/kubelet.md.
func newClusterCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cluster",
		Short: "A local Kubernetes cluster (etcd, kube-apiserver, controller manager, scheduler, process kubelet) for the e2e tier",
	}
	cmd.AddCommand(newClusterUpCommand(), newClusterDownCommand(), newClusterKubeletCommand())
	return cmd
}

type localFlags struct {
	name, stateDir, podCIDR string
	images                  []string
}

func (f *localFlags) register(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.StringVar(&f.name, "name", local.DefaultName, "cluster name (its state lives in ${XDG_CACHE_HOME:-~/.cache}/eppkit/clusters/<name>)")
	fs.StringVar(&f.stateDir, "state-dir", "", "state directory (default: from --name)")
	fs.StringVar(&f.podCIDR, "pod-cidr", kubelet.DefaultPodCIDR, "the node's loopback pod range")
	fs.StringSliceVar(&f.images, "image", nil, "IMAGE=/abs/path/to/binary the kubelet runs for IMAGE, besides eppkit (repeatable)")
}

func (f *localFlags) provider(logger *slog.Logger) (*local.Provider, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	imgs, err := kubelet.ParseImageMap(f.images)
	if err != nil {
		return nil, fmt.Errorf("--image: %w", err)
	}
	return local.New(local.Options{Name: f.name, StateDir: f.stateDir, Eppkit: self, Images: imgs, PodCIDR: f.podCIDR, Logger: logger})
}

func newClusterUpCommand() *cobra.Command {
	var f localFlags
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Create (or reuse) the local cluster and print its kubeconfig path",
		Long: "Starts etcd, kube-apiserver, kube-controller-manager and kube-scheduler v1.37.2 (built by " +
			"`eppkit tools build k8s --all`) and the process kubelet, detached, so they keep running after this " +
			"command; a second `up` reuses them. Pods of the image eppkit (eppkit:dev, any registry) run this " +
			"binary with the container's args on their own loopback IP. `eppkit cluster down` removes it.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, err := f.provider(slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil)))
			if err != nil {
				return err
			}
			if err := p.Create(cmd.Context()); err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), p.KubeconfigPath())
			return nil
		},
	}
	f.register(cmd)
	return cmd
}

func newClusterDownCommand() *cobra.Command {
	var f localFlags
	cmd := &cobra.Command{
		Use:   "down",
		Short: "Stop the local cluster's processes and remove its state",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, err := f.provider(slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil)))
			if err != nil {
				return err
			}
			return p.Destroy(cmd.Context())
		},
	}
	f.register(cmd)
	return cmd
}

func newClusterKubeletCommand() *cobra.Command {
	var (
		kubeconfig, stateDir, nodeName, podCIDR, apiHost, apiPort, logLevel string
		images                                                              []string
	)
	cmd := &cobra.Command{
		Use:   "kubelet",
		Short: "Run the process kubelet: register a node and run its pods as local processes (the local provider starts it)",
		Long: "Registers a Ready node with a loopback podCIDR, renews its lease, and runs the pods bound to it " +
			"whose image maps to a local binary (--image), each on its own loopback IP. See docs/kubelet.md for " +
			"what is and is not supported. SIGTERM stops every pod's containers and exits.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var level slog.Level
			if err := level.UnmarshalText([]byte(logLevel)); err != nil {
				return fmt.Errorf("--log-level: %w", err)
			}
			logger := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: level}))
			if kubeconfig == "" {
				return errors.New("--kubeconfig is required")
			}
			abs, err := filepath.Abs(kubeconfig)
			if err != nil {
				return fmt.Errorf("--kubeconfig: %w", err)
			}
			cfg, err := clientcmd.BuildConfigFromFlags("", abs)
			if err != nil {
				return fmt.Errorf("--kubeconfig: %w", err)
			}
			cfg.QPS, cfg.Burst = 50, 100
			cs, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				return err
			}
			imgs, err := kubelet.ParseImageMap(images)
			if err != nil {
				return fmt.Errorf("--image: %w", err)
			}
			k, err := kubelet.New(kubelet.Config{Client: cs, NodeName: nodeName, PodCIDR: podCIDR, Images: imgs,
				Kubeconfig: abs, APIServerHost: apiHost, APIServerPort: apiPort, StateDir: stateDir, Logger: logger})
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			start := time.Now()
			err = k.Run(ctx)
			logger.Info("kubelet stopped", "ran", time.Since(start).Round(time.Second))
			if errors.Is(err, context.Canceled) {
				return nil
			}
			return err
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig of the API server; also handed to every container as KUBECONFIG")
	fs.StringVar(&stateDir, "state-dir", "", "directory for pod directories, container logs and volumes (required)")
	fs.StringVar(&nodeName, "node-name", kubelet.DefaultNodeName, "node to register")
	fs.StringVar(&podCIDR, "pod-cidr", kubelet.DefaultPodCIDR, "loopback pod range")
	fs.StringVar(&apiHost, "apiserver-host", "", "KUBERNETES_SERVICE_HOST for containers")
	fs.StringVar(&apiPort, "apiserver-port", "", "KUBERNETES_SERVICE_PORT for containers")
	fs.StringSliceVar(&images, "image", nil, "IMAGE=/abs/path/to/binary (repeatable); see docs/kubelet.md for how images match")
	fs.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	_ = cmd.MarkFlagRequired("state-dir")
	return cmd
}
