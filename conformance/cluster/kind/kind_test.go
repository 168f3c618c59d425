package kind

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/kind/pkg/apis/config/defaults"
	"sigs.k8s.io/kind/pkg/apis/config/v1alpha4"
	"sigs.k8s.io/kind/pkg/cluster/nodes"
	kindexec "sigs.k8s.io/kind/pkg/exec"
	"sigs.k8s.io/yaml"

	"github.com/eppkit/eppkit/internal/hostinfo"
	"github.com/eppkit/eppkit/internal/toolcache"
	"github.com/eppkit/eppkit/manifests"
)

// fakeCluster records calls to the kind library.
type fakeCluster struct {
	mu        sync.Mutex
	clusters  []string
	nodes     []*fakeNode
	createErr error
	// createErrs are returned by successive Creates (before createErr).
	createErrs []error
	listErr    error
	exportErr  error
	calls      []string
	created    *v1alpha4.Cluster
	params     CreateParams
}

func (f *fakeCluster) record(format string, a ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, fmt.Sprintf(format, a...))
}

func (f *fakeCluster) List() ([]string, error) {
	f.record("List")
	if f.listErr != nil {
		return nil, f.listErr
	}
	return slices.Clone(f.clusters), nil
}

func (f *fakeCluster) Create(name string, cfg *v1alpha4.Cluster, p CreateParams) error {
	f.record("Create %s", name)
	f.created, f.params = cfg, p
	if len(f.createErrs) > 0 {
		err := f.createErrs[0]
		f.createErrs = f.createErrs[1:]
		if err != nil {
			return err
		}
	}
	if f.createErr != nil {
		return f.createErr
	}
	f.clusters = append(f.clusters, name)
	return os.WriteFile(p.Kubeconfig, []byte("kubeconfig of "+name), 0o600)
}

func (f *fakeCluster) Delete(name, kubeconfig string) error {
	f.record("Delete %s %s", name, filepath.Base(kubeconfig))
	f.clusters = slices.DeleteFunc(f.clusters, func(s string) bool { return s == name })
	return nil
}

func (f *fakeCluster) ExportKubeConfig(name, path string) error {
	f.record("ExportKubeConfig %s %s", name, filepath.Base(path))
	if f.exportErr != nil {
		return f.exportErr
	}
	return os.WriteFile(path, []byte("kubeconfig of "+name), 0o600)
}

func (f *fakeCluster) Nodes(name string) ([]nodes.Node, error) {
	f.record("Nodes %s", name)
	out := make([]nodes.Node, len(f.nodes))
	for i, n := range f.nodes {
		out[i] = n
	}
	return out, nil
}

func (f *fakeCluster) CollectLogs(name, dir string) error {
	f.record("CollectLogs %s %s", name, filepath.Base(dir))
	return nil
}

// fakeNode is a kind node whose commands are scripted: containerd config dump prints config,
// ctr import reads stdin into imported, crictl inspecti fails when inspectErr is set.
type fakeNode struct {
	name       string
	config     string
	inspectErr error
	importErr  error

	mu       sync.Mutex
	commands [][]string
	imported []byte
}

func (n *fakeNode) String() string              { return n.name }
func (n *fakeNode) Role() (string, error)       { return "control-plane", nil }
func (n *fakeNode) IP() (string, string, error) { return "172.18.0.2", "", nil }
func (n *fakeNode) SerialLogs(io.Writer) error  { return nil }
func (n *fakeNode) Command(c string, a ...string) kindexec.Cmd {
	return n.CommandContext(context.Background(), c, a...)
}
func (n *fakeNode) CommandContext(_ context.Context, c string, a ...string) kindexec.Cmd {
	return &fakeCmd{node: n, argv: append([]string{c}, a...)}
}

type fakeCmd struct {
	node           *fakeNode
	argv           []string
	stdin          io.Reader
	stdout, stderr io.Writer
}

func (c *fakeCmd) SetEnv(...string) kindexec.Cmd      { return c }
func (c *fakeCmd) SetStdin(r io.Reader) kindexec.Cmd  { c.stdin = r; return c }
func (c *fakeCmd) SetStdout(w io.Writer) kindexec.Cmd { c.stdout = w; return c }
func (c *fakeCmd) SetStderr(w io.Writer) kindexec.Cmd { c.stderr = w; return c }
func (c *fakeCmd) Run() error {
	n := c.node
	n.mu.Lock()
	n.commands = append(n.commands, c.argv)
	n.mu.Unlock()
	switch c.argv[0] {
	case "containerd":
		_, err := io.WriteString(c.stdout, n.config)
		return err
	case "ctr":
		b, err := io.ReadAll(c.stdin)
		if err != nil {
			return err
		}
		n.imported = b
		if n.importErr != nil {
			io.WriteString(c.stderr, "ctr: content digest sha256:abc: not found")
			return n.importErr
		}
		return nil
	case "crictl":
		return n.inspectErr
	}
	return fmt.Errorf("unexpected command %v", c.argv)
}

// fakeRunner writes archive bytes where `save -o` asks.
type fakeRunner struct {
	calls   [][]string
	archive []byte
	err     error
	infoErr error // what `<engine> info` returns
	// images are what `<engine> image inspect` finds (nil = every image); pullErr is what
	// `<engine> pull` returns (a pulled image is then found).
	images  map[string]bool
	pullErr error
}

func (r *fakeRunner) Run(_ context.Context, name string, args ...string) error {
	r.calls = append(r.calls, append([]string{name}, args...))
	if r.err != nil {
		return r.err
	}
	if len(args) == 1 && args[0] == "info" {
		return r.infoErr
	}
	if len(args) == 3 && args[0] == "image" && args[1] == "inspect" {
		if r.images == nil || r.images[args[2]] {
			return nil
		}
		return fmt.Errorf("%s image inspect %s: exit status 1: Error: No such image: %s", name, args[2], args[2])
	}
	if len(args) == 2 && args[0] == "pull" {
		if r.pullErr != nil {
			return r.pullErr
		}
		if r.images != nil {
			r.images[args[1]] = true
		}
		return nil
	}
	for i, a := range args {
		if a == "-o" && i+1 < len(args) {
			return os.WriteFile(args[i+1], r.archive, 0o600)
		}
	}
	return errors.New("no -o")
}

const containerdV3 = `version = 3
[plugins]
  [plugins."io.containerd.cri.v1.images"]
    snapshotter = "overlayfs"
`

const containerdV2 = `version = 2
[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = "native"
`

type readyFake struct {
	err   error
	calls []string
}

func (r *readyFake) wait(_ context.Context, kubeconfig string, _ time.Duration) error {
	r.calls = append(r.calls, filepath.Base(kubeconfig))
	return r.err
}

func newTest(t *testing.T, fc *fakeCluster, fr *fakeRunner, rd *readyFake, mod func(*Options)) *Provider {
	t.Helper()
	o := Options{Dir: t.TempDir(), Cluster: fc, Runner: fr, NodesReady: rd.wait,
		Cgroups:      func() (hostinfo.CgroupMode, error) { return hostinfo.CgroupV2, nil },
		OfflineImage: func() (*toolcache.NodeImageStamp, error) { return nil, toolcache.ErrNotBuilt }}
	if mod != nil {
		mod(&o)
	}
	p, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestPinnedNodeImage keeps the provider's default, the committed kind config and kind's own
// default equal.
func TestPinnedNodeImage(t *testing.T) {
	if DefaultNodeImage != defaults.Image {
		t.Errorf("DefaultNodeImage %q, kind v0.33.0's default %q", DefaultNodeImage, defaults.Image)
	}
	var c v1alpha4.Cluster
	if err := yaml.UnmarshalStrict(manifests.KindConfig(), &c); err != nil {
		t.Fatal(err)
	}
	for i, n := range c.Nodes {
		if n.Image != DefaultNodeImage {
			t.Errorf("manifests/kind/cluster.yaml nodes[%d].image %q, want %q", i, n.Image, DefaultNodeImage)
		}
	}
}

func TestClusterConfig(t *testing.T) {
	node := func(role v1alpha4.NodeRole, image string) v1alpha4.Node {
		return v1alpha4.Node{Role: role, Image: image}
	}
	tests := []struct {
		name      string
		opts      Options
		wantName  string
		wantNodes []v1alpha4.Node
		wantErr   string
	}{
		{name: "default config", opts: Options{}, wantName: "eppkit",
			wantNodes: []v1alpha4.Node{node(v1alpha4.ControlPlaneRole, DefaultNodeImage)}},
		{name: "name and node image override", opts: Options{Name: "ci-1", NodeImage: "kindest/node:v1.36.0@sha256:00"}, wantName: "ci-1",
			wantNodes: []v1alpha4.Node{node(v1alpha4.ControlPlaneRole, "kindest/node:v1.36.0@sha256:00")}},
		{name: "nodes without images get the pinned one, the config's name is replaced",
			opts:      Options{Config: []byte("kind: Cluster\napiVersion: kind.x-k8s.io/v1alpha4\nname: other\nnodes:\n- role: control-plane\n- role: worker\n  image: my/node:v1@sha256:11\n")},
			wantName:  "eppkit",
			wantNodes: []v1alpha4.Node{node(v1alpha4.ControlPlaneRole, DefaultNodeImage), node(v1alpha4.WorkerRole, "my/node:v1@sha256:11")}},
		{name: "no nodes: one control plane", opts: Options{Config: []byte("kind: Cluster\napiVersion: kind.x-k8s.io/v1alpha4\n")}, wantName: "eppkit",
			wantNodes: []v1alpha4.Node{node(v1alpha4.ControlPlaneRole, DefaultNodeImage)}},
		{name: "wrong kind", opts: Options{Config: []byte("kind: Config\napiVersion: v1\n")}, wantErr: `kind "Config" apiVersion "v1"`},
		{name: "unknown field", opts: Options{Config: []byte("kind: Cluster\napiVersion: kind.x-k8s.io/v1alpha4\nnodez: []\n")}, wantErr: "nodez"},
		{name: "bad role", opts: Options{Config: []byte("kind: Cluster\napiVersion: kind.x-k8s.io/v1alpha4\nnodes:\n- role: boss\n")}, wantErr: `nodes[0].role "boss"`},
		{name: "bad engine", opts: Options{Engine: "lxc"}, wantErr: `Engine "lxc"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := tt.opts
			o.Dir, o.Cluster, o.Runner = t.TempDir(), &fakeCluster{}, &fakeRunner{}
			p, err := New(o)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			c, err := p.ClusterConfig()
			if err != nil {
				t.Fatal(err)
			}
			if c.Name != tt.wantName || c.Kind != "Cluster" || c.APIVersion != "kind.x-k8s.io/v1alpha4" {
				t.Errorf("config name/kind/apiVersion = %q %q %q", c.Name, c.Kind, c.APIVersion)
			}
			if diff := cmp.Diff(tt.wantNodes, c.Nodes); diff != "" {
				t.Errorf("nodes (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCreateNewCluster(t *testing.T) {
	fc, rd := &fakeCluster{clusters: []string{"someone-else"}}, &readyFake{}
	p := newTest(t, fc, &fakeRunner{}, rd, func(o *Options) { o.WaitForReady = 90 * time.Second })
	if err := p.Create(t.Context()); err != nil {
		t.Fatal(err)
	}
	if p.Reused() {
		t.Error("Reused() = true for a new cluster")
	}
	if diff := cmp.Diff([]string{"List", "Create eppkit"}, fc.calls); diff != "" {
		t.Errorf("kind calls (-want +got):\n%s", diff)
	}
	if fc.created.Name != "eppkit" || fc.created.Nodes[0].Image != DefaultNodeImage {
		t.Errorf("created config %+v", fc.created)
	}
	if diff := cmp.Diff(CreateParams{Kubeconfig: p.KubeconfigPath(), WaitForReady: 90 * time.Second, Retain: true}, fc.params); diff != "" {
		t.Errorf("create params (-want +got):\n%s", diff)
	}
	if !filepath.IsAbs(p.KubeconfigPath()) {
		t.Errorf("KubeconfigPath %q is not absolute", p.KubeconfigPath())
	}
	if b, err := os.ReadFile(p.KubeconfigPath()); err != nil || string(b) != "kubeconfig of eppkit" {
		t.Errorf("kubeconfig: %q %v", b, err)
	}
	if diff := cmp.Diff([]string{"kubeconfig"}, rd.calls); diff != "" {
		t.Errorf("Ready-node waits (-want +got):\n%s", diff)
	}
}

func TestCreateReusesByName(t *testing.T) {
	fc, rd := &fakeCluster{clusters: []string{"eppkit"}}, &readyFake{}
	p := newTest(t, fc, &fakeRunner{}, rd, nil)
	if err := p.Create(t.Context()); err != nil {
		t.Fatal(err)
	}
	if !p.Reused() {
		t.Error("Reused() = false for a listed cluster")
	}
	if diff := cmp.Diff([]string{"List", "ExportKubeConfig eppkit kubeconfig"}, fc.calls); diff != "" {
		t.Errorf("kind calls (-want +got):\n%s", diff)
	}
	if len(rd.calls) != 1 {
		t.Errorf("Ready-node waits %v, want one", rd.calls)
	}
}

func TestCreateReusedButNotReady(t *testing.T) {
	fc, rd := &fakeCluster{clusters: []string{"eppkit"}}, &readyFake{err: errors.New("no Ready node within 5m0s")}
	p := newTest(t, fc, &fakeRunner{}, rd, nil)
	err := p.Create(t.Context())
	if err == nil || !strings.Contains(err.Error(), "reuse cluster eppkit: no Ready node") || !strings.Contains(err.Error(), "kind delete cluster --name eppkit") {
		t.Fatalf("err = %v", err)
	}
	// Someone else's broken cluster is reported, never recreated or deleted.
	if diff := cmp.Diff([]string{"List", "ExportKubeConfig eppkit kubeconfig"}, fc.calls); diff != "" {
		t.Errorf("kind calls (-want +got):\n%s", diff)
	}
}

func TestCreateFailure(t *testing.T) {
	for _, keep := range []bool{false, true} {
		t.Run(fmt.Sprintf("KeepOnFailure=%v", keep), func(t *testing.T) {
			fc := &fakeCluster{createErr: errors.New("failed to init node with kubeadm")}
			p := newTest(t, fc, &fakeRunner{}, &readyFake{}, func(o *Options) { o.KeepOnFailure = keep })
			err := p.Create(t.Context())
			if err == nil {
				t.Fatal("Create succeeded")
			}
			for _, w := range []string{"create cluster eppkit", DefaultNodeImage, "kubeadm", "logs in " + filepath.Join(p.opts.Dir, "create-failure-logs")} {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			want := []string{"List", "Create eppkit", "CollectLogs eppkit create-failure-logs"}
			if !keep {
				// One logged retry after the failed attempt is cleaned up.
				want = append(want, "Delete eppkit kubeconfig", "Create eppkit", "CollectLogs eppkit create-failure-logs", "Delete eppkit kubeconfig")
			}
			if diff := cmp.Diff(want, fc.calls); diff != "" {
				t.Errorf("kind calls (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCreateNotReadyAfterCreate(t *testing.T) {
	fc := &fakeCluster{}
	p := newTest(t, fc, &fakeRunner{}, &readyFake{err: errors.New("no Ready node")}, nil)
	if err := p.Create(t.Context()); err == nil || !strings.Contains(err.Error(), "no Ready node") {
		t.Fatalf("err = %v", err)
	}
	if diff := cmp.Diff([]string{"List", "Create eppkit", "CollectLogs eppkit create-failure-logs", "Delete eppkit kubeconfig",
		"Create eppkit", "CollectLogs eppkit create-failure-logs", "Delete eppkit kubeconfig"}, fc.calls); diff != "" {
		t.Errorf("kind calls (-want +got):\n%s", diff)
	}
}

func TestNoContainerEngine(t *testing.T) {
	p := newTest(t, &fakeCluster{}, &fakeRunner{}, &readyFake{}, nil)
	p.noEngine = true
	if err := p.Create(t.Context()); !errors.Is(err, ErrNoContainerEngine) {
		t.Fatalf("err = %v, want ErrNoContainerEngine", err)
	}
}

// TestEngineWithoutDaemon: docker installed but dockerd not running (this repository's CI) is
// ErrNoContainerEngine; a list failure while the engine answers is reported as it is.
func TestEngineWithoutDaemon(t *testing.T) {
	listErr := errors.New(`command "docker ps -a --filter label=io.x-k8s.kind.cluster" failed with error: exit status 1`)
	fr := &fakeRunner{infoErr: errors.New("Cannot connect to the Docker daemon at unix:///var/run/docker.sock")}
	p := newTest(t, &fakeCluster{listErr: listErr}, fr, &readyFake{}, func(o *Options) { o.Engine = "docker" })
	err := p.Create(t.Context())
	if !errors.Is(err, ErrNoContainerEngine) || !strings.Contains(err.Error(), "Cannot connect to the Docker daemon") {
		t.Errorf("daemon down: err = %v, want ErrNoContainerEngine with docker info's message", err)
	}
	if diff := cmp.Diff([][]string{{"docker", "info"}}, fr.calls); diff != "" {
		t.Errorf("commands (-want +got):\n%s", diff)
	}
	fc := &fakeCluster{listErr: listErr}
	p = newTest(t, fc, &fakeRunner{}, &readyFake{}, func(o *Options) { o.Engine = "docker" })
	err = p.Create(t.Context())
	if err == nil || errors.Is(err, ErrNoContainerEngine) || !strings.Contains(err.Error(), "list clusters") {
		t.Errorf("engine answers, list fails: err = %v, want the list error", err)
	}
	if fc.created != nil {
		t.Error("created a cluster although listing failed")
	}
}

func TestLoadImage(t *testing.T) {
	archive := []byte("image archive bytes")
	n1 := &fakeNode{name: "eppkit-control-plane", config: containerdV3}
	n2 := &fakeNode{name: "eppkit-worker", config: containerdV2}
	fc, fr := &fakeCluster{clusters: []string{"eppkit"}, nodes: []*fakeNode{n1, n2}}, &fakeRunner{archive: archive}
	p := newTest(t, fc, fr, &readyFake{}, func(o *Options) { o.Engine = "podman" })
	if err := p.LoadImage(t.Context(), "eppkit:dev"); err != nil {
		t.Fatal(err)
	}
	if len(fr.calls) != 1 {
		t.Fatalf("host commands %v, want one save", fr.calls)
	}
	save := fr.calls[0]
	if diff := cmp.Diff([]string{"podman", "save", "-o", "ARCHIVE", "eppkit:dev"}, append(save[:3:3], "ARCHIVE", save[4])); diff != "" {
		t.Errorf("save command (-want +got):\n%s", diff)
	}
	if _, err := os.Stat(save[3]); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("archive %s left behind (%v)", save[3], err)
	}
	for _, tc := range []struct {
		n    *fakeNode
		snap string
	}{{n1, "overlayfs"}, {n2, "native"}} {
		want := [][]string{
			{"containerd", "config", "dump"},
			{"ctr", "--namespace=k8s.io", "images", "import", "--digests", "--snapshotter=" + tc.snap, "-"},
			{"crictl", "inspecti", "eppkit:dev"},
		}
		if diff := cmp.Diff(want, tc.n.commands); diff != "" {
			t.Errorf("node %s commands (-want +got):\n%s", tc.n.name, diff)
		}
		if !bytes.Equal(tc.n.imported, archive) {
			t.Errorf("node %s imported %q, want the saved archive", tc.n.name, tc.n.imported)
		}
		for _, c := range tc.n.commands {
			if slices.Contains(c, "--all-platforms") {
				t.Errorf("node %s: %v uses --all-platforms", tc.n.name, c)
			}
		}
	}
}

func TestLoadImageErrors(t *testing.T) {
	tests := []struct {
		name    string
		nodes   []*fakeNode
		runErr  error
		image   string
		wantErr []string
	}{
		{"empty image", []*fakeNode{{name: "n", config: containerdV3}}, nil, "", []string{"empty image name"}},
		{"no nodes", nil, nil, "eppkit:dev", []string{"has no nodes", "Create it first"}},
		{"save fails", []*fakeNode{{name: "n", config: containerdV3}}, errors.New("No such image: eppkit:dev"), "eppkit:dev",
			[]string{"docker save", "No such image", "make image"}},
		{"unknown containerd config version", []*fakeNode{{name: "n", config: "version = 9\n"}}, nil, "eppkit:dev",
			[]string{"node n", "version 9 not supported"}},
		{"import fails", []*fakeNode{{name: "n", config: containerdV3, importErr: errors.New("exit status 1")}}, nil, "eppkit:dev",
			[]string{"node n", "ctr --namespace=k8s.io images import --digests --snapshotter=overlayfs -", "content digest"}},
		{"not visible to the CRI", []*fakeNode{{name: "n", config: containerdV3, inspectErr: errors.New("exit status 1")}}, nil, "eppkit:dev",
			[]string{"crictl inspecti eppkit:dev does not find it"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fc := &fakeCluster{clusters: []string{"eppkit"}, nodes: tt.nodes}
			p := newTest(t, fc, &fakeRunner{archive: []byte("x"), err: tt.runErr}, &readyFake{}, nil)
			err := p.LoadImage(t.Context(), tt.image)
			if err == nil {
				t.Fatal("LoadImage succeeded")
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

func TestSnapshotter(t *testing.T) {
	tests := []struct {
		name, config, want, wantErr string
	}{
		{"v2", containerdV2, "native", ""},
		{"v3", containerdV3, "overlayfs", ""},
		{"v4", strings.Replace(containerdV3, "version = 3", "version = 4", 1), "overlayfs", ""},
		{"v3 without the images plugin", "version = 3\n[plugins]\n", "", `no plugins.io.containerd.cri.v1.images.snapshotter`},
		{"no version", "[plugins]\n", "", "no version"},
		{"not TOML", "version = = 3", "", "containerd config:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Snapshotter([]byte(tt.config))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("Snapshotter = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func TestDestroyAndExportLogs(t *testing.T) {
	fc := &fakeCluster{}
	p := newTest(t, fc, &fakeRunner{}, &readyFake{}, nil)
	// Nothing to destroy: not an error, nothing deleted.
	if err := p.Destroy(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := p.Create(t.Context()); err != nil {
		t.Fatal(err)
	}
	logs := filepath.Join(t.TempDir(), "a", "logs")
	if err := p.ExportLogs(t.Context(), logs); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(logs); err != nil || !st.IsDir() {
		t.Errorf("logs dir not created: %v", err)
	}
	if err := p.Destroy(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p.KubeconfigPath()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("kubeconfig left after Destroy: %v", err)
	}
	want := []string{"List", "List", "Create eppkit", "CollectLogs eppkit logs", "List", "Delete eppkit kubeconfig"}
	if diff := cmp.Diff(want, fc.calls); diff != "" {
		t.Errorf("kind calls (-want +got):\n%s", diff)
	}
}

func TestDefaultDirIsPerName(t *testing.T) {
	t.Setenv("EPPKIT_TOOLS_CACHE", t.TempDir())
	p, err := New(Options{Name: "ci-7", Cluster: &fakeCluster{}, Runner: &fakeRunner{}})
	if err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(os.Getenv("EPPKIT_TOOLS_CACHE"), "kind-ci-7", "kubeconfig")
	if p.KubeconfigPath() != want {
		t.Errorf("KubeconfigPath %q, want %q (a reuse in a later process must find it)", p.KubeconfigPath(), want)
	}
}

func TestHostPatchesOnCgroupV1(t *testing.T) {
	for _, mode := range []hostinfo.CgroupMode{hostinfo.CgroupV1, hostinfo.CgroupV2} {
		t.Run(mode.String(), func(t *testing.T) {
			fc := &fakeCluster{}
			var log strings.Builder
			p := newTest(t, fc, &fakeRunner{}, &readyFake{}, func(o *Options) {
				o.Cgroups = func() (hostinfo.CgroupMode, error) { return mode, nil }
				o.Log = &log
			})
			if err := p.Create(t.Context()); err != nil {
				t.Fatal(err)
			}
			var want []string
			if mode == hostinfo.CgroupV1 {
				want = []string{"kind: KubeletConfiguration\nfailCgroupV1: false\n"}
			}
			if diff := cmp.Diff(want, fc.created.KubeadmConfigPatches); diff != "" {
				t.Errorf("kubeadm patches (-want +got):\n%s", diff)
			}
			if warned := strings.Contains(log.String(), "WARNING: this host mounts cgroup v1"); warned != (mode == hostinfo.CgroupV1) {
				t.Errorf("cgroup v1 warning = %v on %v; log:\n%s", warned, mode, log.String())
			}
		})
	}
	p := newTest(t, &fakeCluster{}, &fakeRunner{}, &readyFake{}, func(o *Options) {
		o.Cgroups = func() (hostinfo.CgroupMode, error) { return 0, errors.New("statfs /sys/fs/cgroup: no such file") }
	})
	if err := p.Create(t.Context()); err == nil || !strings.Contains(err.Error(), "cgroup mode") {
		t.Errorf("unreadable cgroup mode: err = %v", err)
	}
}

func TestNodeImageResolution(t *testing.T) {
	etcdPatch := "kind: ClusterConfiguration\netcd:\n  local:\n    imageTag: 3.6.11-0\n"
	built := func() (*toolcache.NodeImageStamp, error) {
		return &toolcache.NodeImageStamp{Tag: toolcache.KindNodeImageTag, KubeadmPatches: []string{etcdPatch}}, nil
	}
	notBuilt := func() (*toolcache.NodeImageStamp, error) { return nil, toolcache.ErrNotBuilt }
	pullErr := errors.New("docker pull: exit status 1: Error response from daemon: Get \"https://registry-1.docker.io/v2/\": dial tcp: lookup registry-1.docker.io: no such host")
	for _, tc := range []struct {
		name      string
		nodeImage string
		images    map[string]bool
		pullErr   error
		offline   func() (*toolcache.NodeImageStamp, error)
		want      string
		whyHas    string
		patches   []string
		wantErr   []string
	}{
		{name: "pinned present", images: map[string]bool{DefaultNodeImage: true}, offline: built, want: DefaultNodeImage, whyHas: "present in docker"},
		{name: "pinned pulled", images: map[string]bool{}, offline: built, want: DefaultNodeImage, whyHas: "pulled"},
		{name: "pinned cannot be had: offline", images: map[string]bool{toolcache.KindNodeImageTag: true}, pullErr: pullErr, offline: built,
			want: toolcache.KindNodeImageTag, whyHas: "cannot be had", patches: []string{etcdPatch}},
		{name: "neither", images: map[string]bool{}, pullErr: pullErr, offline: notBuilt,
			wantErr: []string{"cannot be had", "no such host", "eppkit tools build kind-node"}},
		{name: "offline stamp but image gone from the engine", images: map[string]bool{}, pullErr: pullErr, offline: built,
			wantErr: []string{"does not hold the offline node image " + toolcache.KindNodeImageTag}},
		{name: "offline asked for", nodeImage: OfflineNodeImage, images: map[string]bool{DefaultNodeImage: true, toolcache.KindNodeImageTag: true}, offline: built,
			want: toolcache.KindNodeImageTag, whyHas: "asked for", patches: []string{etcdPatch}},
		{name: "offline asked for, not built", nodeImage: OfflineNodeImage, offline: notBuilt, wantErr: []string{"not built"}},
		{name: "explicit image", nodeImage: "my/node:v1@sha256:11", offline: built, want: "my/node:v1@sha256:11", whyHas: "asked for"},
		{name: "explicit offline tag gets its patches", nodeImage: toolcache.KindNodeImageTag, offline: built, want: toolcache.KindNodeImageTag, patches: []string{etcdPatch}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fc := &fakeCluster{}
			fr := &fakeRunner{images: tc.images, pullErr: tc.pullErr}
			p := newTest(t, fc, fr, &readyFake{}, func(o *Options) { o.NodeImage, o.OfflineImage = tc.nodeImage, tc.offline })
			err := p.Create(t.Context())
			if tc.wantErr != nil {
				for _, w := range tc.wantErr {
					if err == nil || !strings.Contains(err.Error(), w) {
						t.Errorf("err = %v, want it to contain %q", err, w)
					}
				}
				if fc.created != nil {
					t.Error("a cluster was created without a node image")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			img, why := p.NodeImage()
			if img != tc.want || fc.created.Nodes[0].Image != tc.want || !strings.Contains(why, tc.whyHas) {
				t.Errorf("node image %q (created %q) why %q; want %q, why containing %q", img, fc.created.Nodes[0].Image, why, tc.want, tc.whyHas)
			}
			if diff := cmp.Diff(tc.patches, fc.created.KubeadmConfigPatches); diff != "" {
				t.Errorf("kubeadm patches (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCreateRetriesOnce(t *testing.T) {
	fc := &fakeCluster{createErrs: []error{errors.New("could not find a log line that matches \"Reached target .*Multi-User System.*\"")}}
	var log strings.Builder
	p := newTest(t, fc, &fakeRunner{}, &readyFake{}, func(o *Options) { o.Log = &log })
	if err := p.Create(t.Context()); err != nil {
		t.Fatalf("second attempt should succeed: %v", err)
	}
	if diff := cmp.Diff([]string{"List", "Create eppkit", "CollectLogs eppkit create-failure-logs", "Delete eppkit kubeconfig", "Create eppkit"}, fc.calls); diff != "" {
		t.Errorf("kind calls (-want +got):\n%s", diff)
	}
	if !strings.Contains(log.String(), "attempt 1 of 2 failed") || !strings.Contains(log.String(), "Multi-User System") {
		t.Errorf("the retry is not logged with its cause:\n%s", log.String())
	}
}

func TestRecreateUnready(t *testing.T) {
	fc := &fakeCluster{clusters: []string{"eppkit"}}
	rd := &readyFake{err: errors.New("no Ready node within 1m0s: list nodes: connection refused")}
	var log strings.Builder
	p := newTest(t, fc, &fakeRunner{}, rd, func(o *Options) { o.RecreateUnready, o.Log = true, &log })
	// The first wait (the stale cluster) fails, the one after the new create succeeds.
	calls := 0
	p.opts.NodesReady = func(ctx context.Context, k string, d time.Duration) error {
		calls++
		if calls == 1 {
			if d != time.Minute {
				t.Errorf("reuse wait %s, want ReuseWait 1m", d)
			}
			return rd.err
		}
		return nil
	}
	if err := p.Create(t.Context()); err != nil {
		t.Fatal(err)
	}
	if p.Reused() {
		t.Error("Reused() = true for a recreated cluster")
	}
	if diff := cmp.Diff([]string{"List", "ExportKubeConfig eppkit kubeconfig", "Delete eppkit kubeconfig", "Create eppkit"}, fc.calls); diff != "" {
		t.Errorf("kind calls (-want +got):\n%s", diff)
	}
	if !strings.Contains(log.String(), "deleting the stale cluster") {
		t.Errorf("log lacks the recreate:\n%s", log.String())
	}
	// A kubeconfig that cannot be exported (its containers are gone) is stale too.
	fc = &fakeCluster{clusters: []string{"eppkit"}, exportErr: errors.New("failed to get api server endpoint")}
	p = newTest(t, fc, &fakeRunner{}, &readyFake{}, func(o *Options) { o.RecreateUnready = true })
	if err := p.Create(t.Context()); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"List", "ExportKubeConfig eppkit kubeconfig", "Delete eppkit kubeconfig", "Create eppkit"}, fc.calls); diff != "" {
		t.Errorf("kind calls (-want +got):\n%s", diff)
	}
}
