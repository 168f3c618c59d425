package simfleet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// standInEnv makes the test binary a stand-in for the simulator: it listens on every address
// (":<--port>", as llm-d-inference-sim does) and answers /health and /whoami (POD_NAME).
const standInEnv = "EPPKIT_SIMFLEET_STANDIN"

func TestMain(m *testing.M) {
	if os.Getenv(standInEnv) == "1" {
		standIn()
		return
	}
	os.Exit(m.Run())
}

func standIn() {
	port := ""
	for i, a := range os.Args {
		if a == "--port" && i+1 < len(os.Args) {
			port = os.Args[i+1]
		}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/health", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	mux.HandleFunc("/whoami", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, os.Getenv("POD_NAME")+" "+strings.Join(os.Args[1:], " "))
	})
	ln, err := net.Listen("tcp4", ":"+port)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	_ = http.Serve(ln, mux)
}

func requireNetns(t *testing.T) {
	t.Helper()
	if err := Preflight(context.Background(), ""); err != nil {
		if errors.Is(err, ErrNoPrivileges) {
			t.Skipf("skipped: %v", err)
		}
		t.Fatalf("Preflight: %v", err)
	}
}

func netnsList(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		t.Fatalf("ip netns list: %v", err)
	}
	return string(out)
}

func TestStartServesEachMemberInItsOwnNamespace(t *testing.T) {
	requireNetns(t)
	t.Setenv(standInEnv, "1")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	f, err := Start(context.Background(), Options{Binary: self, Count: 3, Model: "m", Adapters: [][]string{{"a0"}, nil, {"c0", "c1"}},
		Seed: 5, LogDir: t.TempDir(), PodNamePrefix: "p-", StartTimeout: 30 * time.Second})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	closed := false
	defer func() {
		if !closed {
			f.Close()
		}
	}()
	seen := map[string]bool{}
	client := &http.Client{Timeout: 2 * time.Second}
	for i, m := range f.Members() {
		if m.Port != DefaultPort {
			t.Errorf("member %d port %d, want %d (one port for the pool)", i, m.Port, DefaultPort)
		}
		if seen[m.Host] {
			t.Errorf("member %d shares IP %s", i, m.Host)
		}
		seen[m.Host] = true
		resp, err := client.Get("http://" + m.Addr() + "/whoami")
		if err != nil {
			t.Fatalf("member %d at %s: %v", i, m.Addr(), err)
		}
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		got := string(b)
		if !strings.HasPrefix(got, fmt.Sprintf("p-%d ", i)) {
			t.Errorf("member %d answered %q, want its own POD_NAME p-%d", i, got, i)
		}
		for _, want := range []string{"--fake-metrics", "--force-dummy-tokenizer", fmt.Sprintf("--seed %d", 5+i)} {
			if !strings.Contains(got, want) {
				t.Errorf("member %d args %q lack %q", i, got, want)
			}
		}
		if i == 2 && !strings.Contains(got, `--max-loras 2 --lora-modules {"base_model_name":"m","name":"c0"`) {
			t.Errorf("member 2 args %q: want --max-loras 2 and both adapters", got)
		}
		if !strings.Contains(netnsList(t), m.NetNS) {
			t.Errorf("namespace %s not listed", m.NetNS)
		}
	}
	f.Close()
	closed = true
	list := netnsList(t)
	for _, m := range f.Members() {
		if strings.Contains(list, m.NetNS) {
			t.Errorf("namespace %s left after Close", m.NetNS)
		}
		if err := exec.Command("ip", "link", "show", m.HostLink).Run(); err == nil {
			t.Errorf("host link %s left after Close", m.HostLink)
		}
		if !m.Exited() {
			t.Errorf("member %d still running after Close", m.Index)
		}
	}
}

func TestStartFailureCleansUp(t *testing.T) {
	requireNetns(t)
	// /bin/false exits at once: Start must fail with the log and remove the namespaces.
	_, err := Start(context.Background(), Options{Binary: "/bin/false", Count: 2, Model: "m", LogDir: t.TempDir(), StartTimeout: 10 * time.Second})
	if err == nil || !strings.Contains(err.Error(), "exited before it was healthy") {
		t.Fatalf("Start with /bin/false: err = %v, want an exit before healthy", err)
	}
	if list := netnsList(t); strings.Contains(list, fmt.Sprintf("%s%d-", NamePrefix, os.Getpid())) {
		t.Errorf("namespaces left after a failed Start:\n%s", list)
	}
}

func TestReapStaleRemovesNamespacesOfDeadRuns(t *testing.T) {
	requireNetns(t)
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	ns := fmt.Sprintf("%s%d-0", NamePrefix, dead.Process.Pid)
	if err := exec.Command("ip", "netns", "add", ns).Run(); err != nil {
		t.Fatalf("ip netns add %s: %v", ns, err)
	}
	mine := fmt.Sprintf("%s%d-7", NamePrefix, os.Getpid())
	if err := exec.Command("ip", "netns", "add", mine).Run(); err != nil {
		t.Fatalf("ip netns add %s: %v", mine, err)
	}
	defer func() { _ = exec.Command("ip", "netns", "del", mine).Run() }()
	ReapStale(context.Background(), "", nil)
	list := netnsList(t)
	if strings.Contains(list, ns) {
		_ = exec.Command("ip", "netns", "del", ns).Run()
		t.Errorf("the namespace %s of dead pid %d was not removed", ns, dead.Process.Pid)
	}
	if !strings.Contains(list, mine) {
		t.Errorf("ReapStale removed %s of this live process", mine)
	}
}
