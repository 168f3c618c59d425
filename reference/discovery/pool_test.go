package discovery

import (
	"context"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	ctrlcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache/informertest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllertest"

	"github.com/eppkit/eppkit/reference/framework"
	"github.com/eppkit/eppkit/reference/modelrewrite"
	giev1 "sigs.k8s.io/gateway-api-inference-extension/api/v1"
	giev1alpha2 "sigs.k8s.io/gateway-api-inference-extension/apix/v1alpha2"
)

// recorder collects Subscribe calls as key lists.
type recorder struct {
	mu    sync.Mutex
	calls []change
}

type change struct {
	Added, Removed []string
	AddedNames     []string
}

func (r *recorder) fn(added, removed []*framework.EndpointMetadata) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := change{Added: keys(added), Removed: keys(removed), AddedNames: []string{}}
	for _, a := range added {
		c.AddedNames = append(c.AddedNames, a.Name)
	}
	r.calls = append(r.calls, c)
}

// take returns the calls so far and forgets them.
func (r *recorder) take() []change {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.calls
	r.calls = nil
	return out
}

type poolHarness struct {
	t    *testing.T
	src  *InferencePoolSource
	pool *controllertest.FakeInformer
	pods *controllertest.FakeInformer
	objs *controllertest.FakeInformer
	// rewrites is the InferenceModelRewrite informer (startPoolSourceWith a store only).
	rewrites *controllertest.FakeInformer
	// legacyObjs and legacyRewrites are the legacy group's informers when llm-d.ai is served.
	legacyObjs, legacyRewrites *controllertest.FakeInformer
	rec                        *recorder
	curPool                    *giev1.InferencePool
}

func startPoolSource(t *testing.T, group string) *poolHarness {
	t.Helper()
	return startPoolSourceWith(t, group, nil)
}

func startPoolSourceWith(t *testing.T, group string, rewrites *modelrewrite.Store) *poolHarness {
	return startPoolSourceGroups(t, group, rewrites, false)
}

// legacyOnly is an informer set whose API server does not serve the llm-d.ai group (only the GIE
// v1.5.0 CRDs are installed): GetInformer of an llm-d.ai kind is a no-match error.
type legacyOnly struct{ *informertest.FakeInformers }

func (l legacyOnly) GetInformer(ctx context.Context, obj client.Object, opts ...ctrlcache.InformerGetOption) (ctrlcache.Informer, error) {
	if u, ok := obj.(*unstructured.Unstructured); ok && u.GroupVersionKind().Group == GroupLLMD {
		return nil, &meta.NoKindMatchError{GroupKind: u.GroupVersionKind().GroupKind(), SearchedVersions: []string{"v1alpha2"}}
	}
	return l.FakeInformers.GetInformer(ctx, obj, opts...)
}

// startPoolSourceGroups starts a source; llmd makes the llm-d.ai group served too, and then
// h.objs and h.rewrites are the llm-d.ai informers (unstructured objects) and h.legacyObjs,
// h.legacyRewrites the legacy ones.
func startPoolSourceGroups(t *testing.T, group string, rewrites *modelrewrite.Store, llmd bool) *poolHarness {
	t.Helper()
	sc, err := Scheme()
	if err != nil {
		t.Fatal(err)
	}
	cfg := PoolConfig{Name: "pool", Namespace: ns, Group: group, ModelRewrites: rewrites}
	fake := &informertest.FakeInformers{Scheme: sc}
	var inf ctrlcache.Informers = legacyOnly{fake}
	if llmd {
		inf = fake
	}
	src, err := NewInferencePoolOn(cfg, inf)
	if err != nil {
		t.Fatal(err)
	}
	h := &poolHarness{t: t, src: src, rec: &recorder{}}
	src.Subscribe(h.rec.fn)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := src.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := src.Start(ctx); err == nil {
		t.Error("a second Start must fail")
	}
	get := func(obj any) *controllertest.FakeInformer {
		var fi *controllertest.FakeInformer
		var err error
		switch o := obj.(type) {
		case *unstructured.Unstructured:
			fi, err = fake.FakeInformerFor(ctx, o)
		case *corev1.Pod:
			fi, err = fake.FakeInformerFor(ctx, o)
		case *giev1.InferencePool:
			fi, err = fake.FakeInformerFor(ctx, o)
		case *giev1alpha2.InferenceObjective:
			fi, err = fake.FakeInformerFor(ctx, o)
		case *giev1alpha2.InferenceModelRewrite:
			fi, err = fake.FakeInformerFor(ctx, o)
		}
		if err != nil {
			t.Fatal(err)
		}
		return fi
	}
	h.pool = get(src.poolObject())
	h.pods = get(&corev1.Pod{})
	h.objs = get(&giev1alpha2.InferenceObjective{})
	if rewrites != nil {
		h.rewrites = get(&giev1alpha2.InferenceModelRewrite{})
	}
	if llmd {
		h.legacyObjs, h.legacyRewrites = h.objs, h.rewrites
		h.objs = get(llmdObject("InferenceObjective"))
		if rewrites != nil {
			h.rewrites = get(llmdObject("InferenceModelRewrite"))
		}
	}
	return h
}

func (h *poolHarness) setPool(ports ...int32) {
	p := &giev1.InferencePool{
		ObjectMeta: metav1.ObjectMeta{Name: "pool", Namespace: ns},
		Spec:       giev1.InferencePoolSpec{Selector: giev1.LabelSelector{MatchLabels: map[giev1.LabelKey]giev1.LabelValue{"app": "vllm"}}},
	}
	for _, n := range ports {
		p.Spec.TargetPorts = append(p.Spec.TargetPorts, giev1.Port{Number: giev1.PortNumber(n)})
	}
	if h.curPool == nil {
		h.pool.Add(p)
	} else {
		h.pool.Update(h.curPool, p)
	}
	h.curPool = p
}

func (h *poolHarness) expect(what string, want []change) {
	h.t.Helper()
	got := h.rec.take()
	if diff := cmp.Diff(want, got); diff != "" {
		h.t.Errorf("%s: Subscribe calls (-want +got):\n%s", what, diff)
	}
}

func (h *poolHarness) expectEndpoints(what string, want ...string) {
	h.t.Helper()
	if want == nil {
		want = []string{}
	}
	if diff := cmp.Diff(want, keys(h.src.Endpoints())); diff != "" {
		h.t.Errorf("%s: Endpoints (-want +got):\n%s", what, diff)
	}
}

func waitSynced(t *testing.T, src *InferencePoolSource, want bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for src.Synced() != want {
		if time.Now().After(deadline) {
			t.Fatalf("Synced never became %v", want)
		}
		time.Sleep(time.Millisecond)
	}
}

func none() []string { return []string{} }

func TestInferencePoolSourceLifecycle(t *testing.T) {
	h := startPoolSource(t, "")
	// Informers are synced (the fakes are), but without the pool the source is not.
	time.Sleep(20 * time.Millisecond)
	if h.src.Synced() {
		t.Fatal("Synced before the InferencePool was seen")
	}

	// A Ready pod seen before the pool is not an endpoint until the pool arrives.
	a := mkPod("a", "10.0.0.1")
	h.pods.Add(a)
	h.expectEndpoints("pod before pool")
	h.setPool(8000)
	waitSynced(t, h.src, true)
	h.expectEndpoints("pool arrives", "10.0.0.1:8000")
	h.expect("pool arrives", []change{{Added: []string{"10.0.0.1:8000"}, Removed: none(), AddedNames: []string{"a-rank-0"}}})

	// A pod becoming Ready appears at once.
	b := mkPod("b", "10.0.0.2", notReady)
	h.pods.Add(b)
	h.expect("not-Ready pod added", nil)
	bReady := mkPod("b", "10.0.0.2")
	h.pods.Update(b, bReady)
	h.expect("pod becomes Ready", []change{{Added: []string{"10.0.0.2:8000"}, Removed: none(), AddedNames: []string{"b-rank-0"}}})

	// Not Ready again: leaves in the same event.
	bNotReady := mkPod("b", "10.0.0.2", notReady)
	h.pods.Update(bReady, bNotReady)
	h.expect("pod not Ready", []change{{Added: none(), Removed: []string{"10.0.0.2:8000"}, AddedNames: none()}})
	h.expectEndpoints("pod not Ready", "10.0.0.1:8000")

	// Terminating (deletionTimestamp set, still Ready): leaves at once.
	h.pods.Update(bNotReady, bReady)
	h.rec.take()
	h.pods.Update(bReady, mkPod("b", "10.0.0.2", terminating))
	h.expect("pod terminating", []change{{Added: none(), Removed: []string{"10.0.0.2:8000"}, AddedNames: none()}})

	// Deleted, also through a tombstone.
	h.pods.Delete(a)
	h.expect("pod deleted", []change{{Added: none(), Removed: []string{"10.0.0.1:8000"}, AddedNames: none()}})
	h.pods.Add(a)
	h.rec.take()
	// The fake informer cannot emit a tombstone; feed one through the same handler.
	h.src.handler(h.src.onPod).OnDelete(toolscache.DeletedFinalStateUnknown{Key: ns + "/a", Obj: a})
	h.expect("pod deleted (tombstone)", []change{{Added: none(), Removed: []string{"10.0.0.1:8000"}, AddedNames: none()}})
	h.expectEndpoints("all pods gone")

	// Pods of another namespace never count.
	h.pods.Add(mkPod("x", "10.0.0.9", inNamespace("other")))
	h.expect("pod in another namespace", nil)
}

func TestInferencePoolSourceTargetPorts(t *testing.T) {
	h := startPoolSource(t, GroupV1)
	h.pods.Add(mkPod("a", "10.0.0.1"))
	h.pods.Add(mkPod("b", "10.0.0.2"))
	h.setPool(8000)
	waitSynced(t, h.src, true)
	h.expectEndpoints("one target port: one endpoint per pod", "10.0.0.1:8000", "10.0.0.2:8000")
	h.rec.take()

	h.setPool(8000, 8001, 8002)
	h.expectEndpoints("three target ports: three per pod",
		"10.0.0.1:8000", "10.0.0.1:8001", "10.0.0.1:8002", "10.0.0.2:8000", "10.0.0.2:8001", "10.0.0.2:8002")
	h.expect("ports added", []change{{
		Added:      []string{"10.0.0.1:8001", "10.0.0.1:8002", "10.0.0.2:8001", "10.0.0.2:8002"},
		Removed:    none(),
		AddedNames: []string{"a-rank-1", "a-rank-2", "b-rank-1", "b-rank-2"},
	}})
	for _, e := range h.src.Endpoints() {
		if e.PodName != "a" && e.PodName != "b" {
			t.Errorf("endpoint %s PodName %q", e.Key(), e.PodName)
		}
	}

	// Removing the middle port removes its endpoints; 8002 moves to rank 1 (a metadata change
	// reported as added with the new name).
	h.setPool(8000, 8002)
	h.expect("port 8001 removed", []change{{
		Added:      []string{"10.0.0.1:8002", "10.0.0.2:8002"},
		Removed:    []string{"10.0.0.1:8001", "10.0.0.2:8001"},
		AddedNames: []string{"a-rank-1", "b-rank-1"},
	}})

	// The pool going away removes everything and unsyncs the source.
	h.pool.Delete(h.curPool)
	h.expectEndpoints("pool deleted")
	if h.src.Synced() {
		t.Error("Synced with the pool deleted")
	}
	h.expect("pool deleted", []change{{Added: none(),
		Removed: []string{"10.0.0.1:8000", "10.0.0.1:8002", "10.0.0.2:8000", "10.0.0.2:8002"}, AddedNames: none()}})

	// Another pool's events are ignored.
	other := &giev1.InferencePool{ObjectMeta: metav1.ObjectMeta{Name: "other", Namespace: ns},
		Spec: giev1.InferencePoolSpec{Selector: giev1.LabelSelector{MatchLabels: map[giev1.LabelKey]giev1.LabelValue{"app": "vllm"}},
			TargetPorts: []giev1.Port{{Number: 8000}}}}
	h.pool.Add(other)
	h.expectEndpoints("another pool")
}

func TestInferencePoolSourceTerminatingPool(t *testing.T) {
	h := startPoolSource(t, GroupV1)
	h.pods.Add(mkPod("a", "10.0.0.1"))
	h.setPool(8000)
	h.expectEndpoints("pool", "10.0.0.1:8000")
	p := h.curPool.DeepCopy()
	now := metav1.Now()
	p.DeletionTimestamp = &now
	h.pool.Update(h.curPool, p)
	h.expectEndpoints("pool terminating")
}

func TestInferencePoolSourceObjectives(t *testing.T) {
	h := startPoolSource(t, GroupV1)
	prio := func(p int) *int { return &p }
	obj := func(name, pool, group string, p *int) *giev1alpha2.InferenceObjective {
		return &giev1alpha2.InferenceObjective{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: giev1alpha2.InferenceObjectiveSpec{Priority: p,
				PoolRef: giev1alpha2.PoolObjectReference{Name: giev1alpha2.ObjectName(pool), Group: giev1alpha2.Group(group)}},
		}
	}
	critical := obj("critical", "pool", GroupV1, prio(10))
	h.objs.Add(critical)
	h.objs.Add(obj("batch", "pool", "", prio(-1))) // empty group: the CRD default
	h.objs.Add(obj("unset", "pool", GroupV1, nil))
	h.objs.Add(obj("elsewhere", "other-pool", GroupV1, prio(5)))
	h.objs.Add(obj("wronggroup", "pool", GroupV1Alpha2, prio(5)))
	foreign := obj("foreign", "pool", GroupV1, prio(5))
	foreign.Namespace = "other"
	h.objs.Add(foreign)

	for _, tc := range []struct {
		name string
		want int
		ok   bool
	}{{"critical", 10, true}, {"batch", -1, true}, {"unset", 0, true}, {"elsewhere", 0, false},
		{"wronggroup", 0, false}, {"foreign", 0, false}, {"missing", 0, false}} {
		if p, ok := h.src.Priority(tc.name); p != tc.want || ok != tc.ok {
			t.Errorf("Priority(%q) = %d, %v; want %d, %v", tc.name, p, ok, tc.want, tc.ok)
		}
	}

	// Priority changes, re-pointing to another pool, deletion.
	updated := obj("critical", "pool", GroupV1, prio(3))
	h.objs.Update(critical, updated)
	if p, _ := h.src.Priority("critical"); p != 3 {
		t.Errorf("after update Priority(critical) = %d, want 3", p)
	}
	moved := obj("critical", "other-pool", GroupV1, prio(3))
	h.objs.Update(updated, moved)
	if _, ok := h.src.Priority("critical"); ok {
		t.Error("objective re-pointed to another pool still counted")
	}
	h.objs.Delete(obj("batch", "pool", "", prio(-1)))
	if _, ok := h.src.Priority("batch"); ok {
		t.Error("deleted objective still counted")
	}
}

// TestInferencePoolSourceModelRewrites: the InferenceModelRewrites of the pool (its name and
// group, in its namespace) reach the store with their creation time; others, deleted ones and
// ones re-pointed elsewhere do not; an invalid one holds no rules.
func TestInferencePoolSourceModelRewrites(t *testing.T) {
	store := modelrewrite.NewStore(1)
	h := startPoolSourceWith(t, GroupV1, store)
	rw := func(name, pool, group string, created int64, target string) *giev1alpha2.InferenceModelRewrite {
		return &giev1alpha2.InferenceModelRewrite{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, CreationTimestamp: metav1.Unix(created, 0)},
			Spec: giev1alpha2.InferenceModelRewriteSpec{
				PoolRef: &giev1alpha2.PoolObjectReference{Name: giev1alpha2.ObjectName(pool), Group: giev1alpha2.Group(group)},
				Rules: []giev1alpha2.InferenceModelRewriteRule{{
					Matches: []giev1alpha2.Match{{Model: &giev1alpha2.ModelMatch{Value: "alias"}}},
					Targets: []giev1alpha2.TargetModel{{ModelRewrite: target}},
				}},
			},
		}
	}
	check := func(what, want string) {
		t.Helper()
		got, _, ok := store.Rewrite("alias")
		if (want == "") == ok || got != want {
			t.Fatalf("%s: Rewrite(alias) = %q, %v; want %q", what, got, ok, want)
		}
	}
	newer := rw("newer", "pool", "", 20, "from-newer") // empty group: the CRD default
	h.rewrites.Add(newer)
	h.rewrites.Add(rw("elsewhere", "other-pool", GroupV1, 1, "from-elsewhere"))
	h.rewrites.Add(rw("wronggroup", "pool", GroupV1Alpha2, 1, "from-wronggroup"))
	foreign := rw("foreign", "pool", GroupV1, 1, "from-foreign")
	foreign.Namespace = "other"
	h.rewrites.Add(foreign)
	check("one rewrite of the pool", "from-newer")
	older := rw("older", "pool", GroupV1, 10, "from-older")
	h.rewrites.Add(older)
	check("the older rewrite wins", "from-older")
	bad := older.DeepCopy()
	bad.Spec.Rules[0].Targets = nil
	h.rewrites.Update(older, bad)
	check("an invalid update drops its rules", "from-newer")
	h.rewrites.Update(bad, older)
	moved := rw("older", "other-pool", GroupV1, 10, "from-older")
	h.rewrites.Update(older, moved)
	check("re-pointed to another pool", "from-newer")
	h.rewrites.Delete(newer)
	check("deleted", "")
}

func TestInferencePoolSourceV1Alpha2(t *testing.T) {
	h := startPoolSource(t, GroupV1Alpha2)
	h.pods.Add(mkPod("a", "10.0.0.1"))
	pool := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "inference.networking.x-k8s.io/v1alpha2", "kind": "InferencePool",
		"metadata": map[string]any{"name": "pool", "namespace": ns},
		"spec":     map[string]any{"selector": map[string]any{"app": "vllm"}, "targetPortNumber": int64(8000)},
	}}
	h.pool.Add(pool)
	waitSynced(t, h.src, true)
	h.expectEndpoints("v1alpha2 pool", "10.0.0.1:8000")
	if n := h.src.Endpoints()[0].Name; n != "a-rank-0" {
		t.Errorf("Name = %q, want a-rank-0", n)
	}
	broken := pool.DeepCopy()
	broken.Object["spec"].(map[string]any)["targetPortNumber"] = "8000"
	h.pool.Update(pool, broken)
	h.expectEndpoints("unreadable pool")
}

func TestInferencePoolSourceLateSubscriber(t *testing.T) {
	h := startPoolSource(t, GroupV1)
	h.pods.Add(mkPod("a", "10.0.0.1"))
	h.setPool(8000, 8001)
	late := &recorder{}
	h.src.Subscribe(late.fn)
	if diff := cmp.Diff([]change{{Added: []string{"10.0.0.1:8000", "10.0.0.1:8001"}, Removed: none(), AddedNames: []string{"a-rank-0", "a-rank-1"}}}, late.take()); diff != "" {
		t.Errorf("late subscriber's first call (-want +got):\n%s", diff)
	}
}

func TestNewInferencePoolValidation(t *testing.T) {
	tests := []struct {
		cfg     PoolConfig
		wantErr string
	}{
		{PoolConfig{Name: "p", Namespace: "n"}, "RestConfig is required"},
		{PoolConfig{RestConfig: &rest.Config{}, Namespace: "n"}, "--pool-name"},
		{PoolConfig{RestConfig: &rest.Config{}, Name: "p"}, "--pool-namespace"},
		{PoolConfig{RestConfig: &rest.Config{}, Name: "P_bad", Namespace: "n"}, `pool name "P_bad"`},
		{PoolConfig{RestConfig: &rest.Config{}, Name: "p", Namespace: "a.b"}, `pool namespace "a.b"`},
		{PoolConfig{RestConfig: &rest.Config{}, Name: "p", Namespace: "n", Group: "example.com"}, `pool group "example.com"`},
	}
	for _, tc := range tests {
		_, err := NewInferencePool(tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("NewInferencePool(%+v) error = %v, want %q", tc.cfg, err, tc.wantErr)
		}
	}
	if _, err := NewInferencePoolOn(PoolConfig{Name: "p", Namespace: "n"}, nil); err == nil || !strings.Contains(err.Error(), "informer set is required") {
		t.Errorf("NewInferencePoolOn without informers: error = %v", err)
	}
	if _, err := NewInferencePoolOn(PoolConfig{Name: "P_bad", Namespace: "n"}, &informertest.FakeInformers{}); err == nil || !strings.Contains(err.Error(), `pool name "P_bad"`) {
		t.Errorf("NewInferencePoolOn with a bad name: error = %v", err)
	}
	// A valid config builds a cache without contacting the API server.
	src, err := NewInferencePool(PoolConfig{RestConfig: &rest.Config{Host: "https://127.0.0.1:1"}, Name: "p", Namespace: "n"})
	if err != nil {
		t.Fatalf("valid config: %v", err)
	}
	if src.cfg.Group != GroupV1 || src.Synced() {
		t.Errorf("group %q synced %v; want the v1 default, not synced", src.cfg.Group, src.Synced())
	}
}

const kubeconfigYAML = `apiVersion: v1
kind: Config
clusters:
- name: c
  cluster:
    server: https://HOST:6443
contexts:
- name: ctx
  context: {cluster: c, user: u}
current-context: ctx
users:
- name: u
  user: {token: t}
`

func TestRestConfig(t *testing.T) {
	dir := t.TempDir()
	write := func(name, host string) string {
		p := dir + "/" + name
		if err := os.WriteFile(p, []byte(strings.ReplaceAll(kubeconfigYAML, "HOST", host)), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	flagPath := write("flag", "10.1.1.1")
	envPath := write("env", "10.2.2.2")
	t.Setenv("KUBECONFIG", envPath)
	c, err := RestConfig(flagPath)
	if err != nil || c.Host != "https://10.1.1.1:6443" {
		t.Errorf("flag path: host %v, err %v; want the flag's file", c, err)
	}
	c, err = RestConfig("")
	if err != nil || c.Host != "https://10.2.2.2:6443" {
		t.Errorf("$KUBECONFIG: host %v, err %v; want the env file", c, err)
	}
	if _, err := RestConfig(dir + "/missing"); err == nil || !strings.Contains(err.Error(), dir+"/missing") {
		t.Errorf("missing file: error %v, want one naming the path", err)
	}
	// Neither flag, env, in-cluster nor ~/.kube/config.
	t.Setenv("KUBECONFIG", "")
	t.Setenv("HOME", dir)
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	if _, err := RestConfig(""); err == nil || !strings.Contains(err.Error(), "no kubeconfig") {
		t.Errorf("no source: error %v", err)
	}
	if err := os.MkdirAll(dir+"/.kube", 0o700); err != nil {
		t.Fatal(err)
	}
	write(".kube/config", "10.3.3.3")
	if c, err := RestConfig(""); err != nil || c.Host != "https://10.3.3.3:6443" {
		t.Errorf("~/.kube/config: host %v, err %v", c, err)
	}
}

func TestInferencePoolSourceUnreachableAPIServer(t *testing.T) {
	// Port 1 on loopback: nothing listens, the connection is refused at once.
	src, err := NewInferencePool(PoolConfig{RestConfig: &rest.Config{Host: "http://127.0.0.1:1"}, Name: "p", Namespace: "n"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = src.Start(ctx)
	if err == nil || !strings.Contains(err.Error(), "watch InferencePool") {
		t.Fatalf("Start error = %v, want one saying the InferencePool watch failed", err)
	}
	if src.Synced() {
		t.Error("Synced without an API server")
	}
}

// llmdObject is an empty llm-d.ai/v1alpha2 object of kind.
func llmdObject(kind string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(schema.GroupVersionKind{Group: GroupLLMD, Version: "v1alpha2", Kind: kind})
	return u
}

// asLLMD is obj as an llm-d.ai/v1alpha2 object (the same schema as the legacy kind).
func asLLMD(t *testing.T, obj any, kind string) *unstructured.Unstructured {
	t.Helper()
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{Object: m}
	u.SetGroupVersionKind(schema.GroupVersionKind{Group: GroupLLMD, Version: "v1alpha2", Kind: kind})
	return u
}

// TestInferencePoolSourceLLMDGroup: with the llm-d.ai group served, InferenceObjectives and
// InferenceModelRewrites come from it and the legacy group's objects are ignored, as llm-d-router
// v0.10.0 (pkg/epp/server/controller_config.go populateWithDiscovery). (The legacy-only
// tests above run with llm-d.ai not served.)
func TestInferencePoolSourceLLMDGroup(t *testing.T) {
	store := modelrewrite.NewStore(1)
	h := startPoolSourceGroups(t, GroupV1, store, true)
	prio := func(p int) *int { return &p }
	obj := func(name string, p int) *giev1alpha2.InferenceObjective {
		return &giev1alpha2.InferenceObjective{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: giev1alpha2.InferenceObjectiveSpec{Priority: prio(p), PoolRef: giev1alpha2.PoolObjectReference{Name: "pool"}}}
	}
	h.objs.Add(asLLMD(t, obj("new", -1), "InferenceObjective"))
	h.objs.Add(asLLMD(t, obj("both", 0), "InferenceObjective"))
	h.legacyObjs.Add(obj("both", -1))
	h.legacyObjs.Add(obj("legacy-only", -1))
	for _, tc := range []struct {
		name string
		want int
		ok   bool
	}{{"new", -1, true}, {"both", 0, true}, {"legacy-only", 0, false}} {
		if p, ok := h.src.Priority(tc.name); p != tc.want || ok != tc.ok {
			t.Errorf("Priority(%q) = %d, %v; want %d, %v", tc.name, p, ok, tc.want, tc.ok)
		}
	}
	rw := func(name, target string) *giev1alpha2.InferenceModelRewrite {
		return &giev1alpha2.InferenceModelRewrite{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: giev1alpha2.InferenceModelRewriteSpec{PoolRef: &giev1alpha2.PoolObjectReference{Name: "pool"},
				Rules: []giev1alpha2.InferenceModelRewriteRule{{Matches: []giev1alpha2.Match{{Model: &giev1alpha2.ModelMatch{Value: "alias"}}},
					Targets: []giev1alpha2.TargetModel{{ModelRewrite: target}}}}}}
	}
	h.legacyRewrites.Add(rw("legacy", "from-legacy"))
	if got, _, ok := store.Rewrite("alias"); ok {
		t.Errorf("a legacy rewrite applied (%q) while llm-d.ai is served", got)
	}
	h.rewrites.Add(asLLMD(t, rw("current", "from-llmd"), "InferenceModelRewrite"))
	if got, _, ok := store.Rewrite("alias"); !ok || got != "from-llmd" {
		t.Errorf("Rewrite(alias) = %q, %v; want from-llmd", got, ok)
	}
}
