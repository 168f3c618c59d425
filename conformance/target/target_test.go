package target

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/eppkit/eppkit/conformance/harness"
	"github.com/eppkit/eppkit/fakes/gateway/extprocclient"
)

func TestCommandTargetTemplate(t *testing.T) {
	c, err := NewCommandTarget("reference", ReferenceCommand)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		env  harness.TargetEnv
		want string
	}{
		{harness.TargetEnv{Eppkit: "/bin/eppkit", Endpoints: "127.0.10.1:8000,127.0.10.2:8000", GRPCPort: 1, HealthPort: 2, MetricsPort: 3},
			"/bin/eppkit reference-epp --grpc-port 1 --grpc-health-port 2 --metrics-port 3 --emit-endpoint-scores --endpoints 127.0.10.1:8000,127.0.10.2:8000 --objectives eppkit-conformance-sheddable=-1,eppkit-conformance-critical=10 --seed 0"},
		{harness.TargetEnv{Eppkit: "/bin/eppkit", Endpoints: "127.0.10.1:8000", ModelRewritesFile: "/r.yaml", GRPCPort: 1, HealthPort: 2, MetricsPort: 3},
			"/bin/eppkit reference-epp --grpc-port 1 --grpc-health-port 2 --metrics-port 3 --emit-endpoint-scores --endpoints 127.0.10.1:8000 --objectives eppkit-conformance-sheddable=-1,eppkit-conformance-critical=10 --model-rewrites /r.yaml --seed 0"},
		{harness.TargetEnv{Eppkit: "e", Kubeconfig: "/k", PoolName: "p", PoolNamespace: "ns", ConfigFile: "/c.yaml", GRPCPort: 1, HealthPort: 2, MetricsPort: 3, Seed: 42},
			"e reference-epp --grpc-port 1 --grpc-health-port 2 --metrics-port 3 --emit-endpoint-scores --kubeconfig /k --pool-name p --pool-namespace ns --config-file /c.yaml --seed 42"},
	} {
		got, err := c.Render(tc.env)
		if err != nil {
			t.Fatal(err)
		}
		if got != tc.want {
			t.Errorf("Render:\n got %q\nwant %q", got, tc.want)
		}
	}
	for _, bad := range []string{"", "  ", "{{.Nope}}", "{{.Eppkit"} {
		if _, err := NewCommandTarget("command", bad); err == nil || !strings.Contains(err.Error(), "--command") {
			t.Errorf("NewCommandTarget(%q) = %v, want an error naming --command", bad, err)
		}
	}
}

func TestCommandTargetLifecycle(t *testing.T) {
	dir := t.TempDir()
	// The process prints its port and sleeps; Stop must end it (SIGTERM to the group).
	c, err := NewCommandTarget("command", `echo started on {{.GRPCPort}}; sleep 30`)
	if err != nil {
		t.Fatal(err)
	}
	addrs, err := c.Start(t.Context(), harness.TargetEnv{GRPCPort: 4242, HealthPort: 4243, LogDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	// No {{.HealthPort}} in the template: the EPP cannot know that port, so health is probed on
	// the ext_proc port.
	if addrs.GRPC != "127.0.0.1:4242" || addrs.Health != "127.0.0.1:4242" || addrs.Metrics != "" {
		t.Fatalf("addrs = %+v", addrs)
	}
	withHealth, err := NewCommandTarget("command", `exit 0 # {{.HealthPort}}`)
	if err != nil {
		t.Fatal(err)
	}
	if a, err := withHealth.Start(t.Context(), harness.TargetEnv{GRPCPort: 4242, HealthPort: 4243, LogDir: t.TempDir()}); err != nil ||
		a.Health != "127.0.0.1:4243" || withHealth.ReadinessHint() != "" {
		t.Fatalf("template with {{.HealthPort}}: addrs %+v, %v, hint %q", a, err, withHealth.ReadinessHint())
	}
	if err := harness.Eventually(5*time.Second, 20*time.Millisecond, 1, func() error {
		if !strings.Contains(c.LogTail(5), "started on 4242") {
			return errors.New("not yet logged")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.Exited():
		t.Fatalf("target exited before Stop: %v", c.ExitErr())
	case <-time.After(100 * time.Millisecond):
	}
	start := time.Now()
	if err := c.Stop(5 * time.Second); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if d := time.Since(start); d > 4*time.Second {
		t.Fatalf("Stop took %s: SIGTERM did not reach the sleep", d)
	}
	select {
	case <-c.Exited():
	default:
		t.Fatal("Exited not closed after Stop")
	}
	// A process that exits at once is seen as exited, with the reason.
	c2, _ := NewCommandTarget("command", `exit 7`)
	if _, err := c2.Start(t.Context(), harness.TargetEnv{LogDir: dir}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c2.Exited():
	case <-time.After(5 * time.Second):
		t.Fatal("exit 7 not observed")
	}
	if err := c2.ExitErr(); err == nil || !strings.Contains(err.Error(), "7") {
		t.Fatalf("ExitErr = %v, want exit status 7", err)
	}
}

func TestAddressTargetAndTLS(t *testing.T) {
	if _, err := NewAddressTarget("", ""); err == nil || !strings.Contains(err.Error(), "--address") {
		t.Fatalf("empty address: %v", err)
	}
	if _, err := NewAddressTarget("nohostport", ""); err == nil {
		t.Fatal("address without port accepted")
	}
	a, err := NewAddressTarget("10.0.0.1:9002", "")
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := a.Start(t.Context(), harness.TargetEnv{}); got.Health != "10.0.0.1:9002" {
		t.Fatalf("health defaults to the address, got %+v", got)
	}
	if c, err := extprocclient.ParseTLSSpec("--target-tls", "plaintext"); c != nil || err != nil {
		t.Fatalf("plaintext = %v, %v", c, err)
	}
	if c, err := extprocclient.ParseTLSSpec("--target-tls", "insecure"); err != nil || c == nil || !c.InsecureSkipVerify {
		t.Fatalf("insecure = %v, %v", c, err)
	}
	for _, bad := range []string{"tls", "ca:/does/not/exist"} {
		if _, err := extprocclient.ParseTLSSpec("--target-tls", bad); err == nil || !strings.Contains(err.Error(), "--target-tls") {
			t.Errorf("ParseTLSSpec(--target-tls, %q) = %v", bad, err)
		}
	}
	notPEM := filepath.Join(t.TempDir(), "ca.pem")
	os.WriteFile(notPEM, []byte("hello"), 0o644)
	if _, err := extprocclient.ParseTLSSpec("--target-tls", "ca:"+notPEM); err == nil {
		t.Error("a CA file without PEM was accepted")
	}
}

// TestNewCommandTargetFlag: errors of a template given by another flag name that flag, at parse
// time and at render time.
func TestNewCommandTargetFlag(t *testing.T) {
	if _, err := NewCommandTargetFlag("--command-target mine", "mine", "x {{.Nope}}"); err == nil || !strings.HasPrefix(err.Error(), "--command-target mine: ") {
		t.Errorf("unknown field: %v, want an error naming --command-target mine", err)
	}
	if _, err := NewCommandTargetFlag("--command-target mine", "mine", " "); err == nil || !strings.HasPrefix(err.Error(), "--command-target mine: required") {
		t.Errorf("empty template: %v, want an error naming --command-target mine", err)
	}
	c, err := NewCommandTargetFlag("--command-target mine", "mine", "epp --grpc-port {{.GRPCPort}}")
	if err != nil {
		t.Fatal(err)
	}
	if inst := c.NewInstance().(*CommandTarget); inst.flag != "--command-target mine" || inst.PID() != 0 {
		t.Errorf("instance flag %q, PID %d; want the flag kept and no PID before Start", inst.flag, inst.PID())
	}
}
