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

	"github.com/eppkit/eppkit/manifests"
)

// fakeCluster records calls to the kind library.
type fakeCluster struct {
	mu        sync.Mutex
	clusters  []string
	nodes     []*fakeNode
	createErr error
	listErr   error
	calls     []string
	created   *v1alpha4.Cluster
	params    CreateParams
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
}

func (r *fakeRunner) Run(_ context.Context, name string, args ...string) error {
	r.calls = append(r.calls, append([]string{name}, args...))
	if r.err != nil {
		return r.err
	}
	if len(args) == 1 && args[0] == "info" {
		return r.infoErr
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
	o := Options{Dir: t.TempDir(), Cluster: fc, Runner: fr, NodesReady: rd.wait}
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
				want = append(want, "Delete eppkit kubeconfig")
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
	if diff := cmp.Diff([]string{"List", "Create eppkit", "CollectLogs eppkit create-failure-logs", "Delete eppkit kubeconfig"}, fc.calls); diff != "" {
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
