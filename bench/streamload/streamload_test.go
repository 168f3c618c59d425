package streamload

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/eppkit/eppkit/fakes/fleet"
	"github.com/eppkit/eppkit/fakes/vllm"
)

// startFake starts one fake vLLM server of model "m", closed when the test ends.
func startFake(t *testing.T) *fleet.Fleet {
	t.Helper()
	base := vllm.DefaultConfig()
	base.Model = "m"
	f, err := fleet.Start(fleet.Options{Count: 1, Base: base, DistinctPorts: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	return f
}

// TestRunAgainstAFake: every stream of a fake vLLM server carries exactly max_tokens tokens, so
// 3 workers × 2 rounds × 5 tokens give 6 TTFTs and 24 gaps and no error; a wrong model is counted
// as failed requests, not returned as an error.
func TestRunAgainstAFake(t *testing.T) {
	f := startFake(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := Run(ctx, Options{URL: f.Members()[0].URL(), Model: "m", Concurrency: 3, Rounds: 2, MaxTokens: 5, ServerPID: os.Getpid()})
	if err != nil {
		t.Fatal(err)
	}
	out := res.String()
	for _, want := range []string{"requests 6, errors 0, tokens 30", "inter-token gap (n=24)", "TTFT (n=6)", "server CPU"} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	bad, err := Run(ctx, Options{URL: f.Members()[0].URL(), Model: "no-such-model", Concurrency: 1, Rounds: 1, MaxTokens: 5})
	if err != nil || bad.Errors() != 1 || !strings.Contains(bad.String(), "first error:") {
		t.Errorf("wrong model: %v, %v", bad, err)
	}
	if _, err := Run(ctx, Options{URL: "http://127.0.0.1:1", Concurrency: 0, Rounds: 1, MaxTokens: 1}); err == nil {
		t.Error("concurrency 0 accepted")
	}
}

// TestRunEachAPI: every streaming API's tokens are counted (the fake streams every one), and an
// unknown API is refused naming --api.
func TestRunEachAPI(t *testing.T) {
	f := startFake(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for name := range apis {
		res, err := Run(ctx, Options{URL: f.Members()[0].URL(), Model: "m", Concurrency: 2, Rounds: 1, MaxTokens: 4, API: name})
		if err != nil || res.Errors() != 0 || !strings.Contains(res.String(), "tokens 8") {
			t.Errorf("--api %s: %v, %v", name, res, err)
		}
	}
	if _, err := Run(ctx, Options{URL: f.Members()[0].URL(), Concurrency: 1, Rounds: 1, MaxTokens: 1, API: "grpc"}); err == nil ||
		!strings.Contains(err.Error(), "--api") {
		t.Errorf("unknown API: %v", err)
	}
}
