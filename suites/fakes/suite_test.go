// Package fakes_test is the local end-to-end suite of eppkit's fake vLLM server (fakes/vllm) and
// fleet (fakes/fleet), SPEC.md §7: real HTTP against servers on loopback addresses, streaming and
// not, Prometheus metrics parsed with expfmt (internal/promscrape), the upstream GIE sim-deployment argument list, the
// prefix cache, data-parallel ranks, /admin/config validation and every failure kind.
//
// Run it alone:
//
//	go run github.com/onsi/ginkgo/v2/ginkgo --race --label-filter=fakes ./suites/fakes
//
// Seeds (the fakes' --seed) come from ginkgo's --seed (GinkgoRandomSeed) unless EPPKIT_SEED is
// set; a failing spec prints its seed and the command that reproduces it.
package fakes_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
	dto "github.com/prometheus/client_model/go"

	"github.com/eppkit/eppkit/internal/promscrape"
	"github.com/eppkit/eppkit/internal/testseed"

	"github.com/eppkit/eppkit/fakes/vllm"
)

// Names and defaults used by every spec.
const (
	// baseModel is the fakes' base model, as in GIE's sim-deployment.yaml.
	baseModel = "meta-llama/Llama-3.1-8B-Instruct"
	// adapter is the LoRA adapter of GIE's sim-deployment.yaml.
	adapter = "food-review-1"
	// fleetSize is the number of fakes in the fleet specs.
	fleetSize = 4
	// waitTimeout bounds every wait for a server to become healthy or a condition to hold.
	waitTimeout = 10 * time.Second
)

func TestFakes(t *testing.T) {
	gomega.RegisterFailHandler(ginkgo.Fail)
	ginkgo.RunSpecs(t, "Fake vLLM and fleet suite")
}

var _ = ginkgo.JustAfterEach(func() {
	if ginkgo.CurrentSpecReport().Failed() {
		seed := testseed.Seed()
		ginkgo.GinkgoWriter.Println(testseed.Repro{Seed: seed, Suite: "fakes", LabelFilter: "fakes",
			Focus: ginkgo.CurrentSpecReport().LeafNodeText, Race: true})
	}
})

// client is the suite's HTTP client; each request has its own timeout.
var client = &http.Client{Timeout: 20 * time.Second}

// postJSON sends body to url and returns the response with its body read.
func postJSON(url, body string) (*http.Response, []byte) {
	ginkgo.GinkgoHelper()
	resp, err := client.Post(url, "application/json", strings.NewReader(body))
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "POST %s", url)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "reading the body of POST %s", url)
	return resp, b
}

// completion is the decoded non-streaming response.
type completion struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Model   string `json:"model"`
	Choices []struct {
		Text    *string `json:"text"`
		Message *struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage vllm.Usage `json:"usage"`
}

func decodeCompletion(b []byte) completion {
	ginkgo.GinkgoHelper()
	var c completion
	gomega.Expect(json.Unmarshal(b, &c)).To(gomega.Succeed(), "body %s", b)
	gomega.Expect(c.Choices).To(gomega.HaveLen(1))
	return c
}

// apiError decodes an OpenAI error body strictly: exactly {"error":{message,type,param,code}}.
func apiError(b []byte) vllm.APIError {
	ginkgo.GinkgoHelper()
	var e struct {
		Error *vllm.APIError `json:"error"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	gomega.Expect(dec.Decode(&e)).To(gomega.Succeed(), "body %s", b)
	gomega.Expect(e.Error).NotTo(gomega.BeNil(), "body %s", b)
	var raw map[string]map[string]json.RawMessage
	gomega.Expect(json.Unmarshal(b, &raw)).To(gomega.Succeed())
	gomega.Expect(raw["error"]).To(gomega.HaveKey("param"), "param is always present (null when unset)")
	return *e.Error
}

// sseStream is a parsed SSE response.
type sseStream struct {
	frames []string // every data: payload in order, "[DONE]" included
	chunks []map[string]any
}

func readSSE(r io.Reader) (sseStream, error) {
	var s sseStream
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		payload, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			return s, fmt.Errorf("line %q is not an SSE data line", line)
		}
		s.frames = append(s.frames, payload)
		if payload == "[DONE]" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(payload), &m); err != nil {
			return s, fmt.Errorf("frame %q: %w", payload, err)
		}
		s.chunks = append(s.chunks, m)
	}
	return s, sc.Err()
}

// scrape fetches url/metrics and parses it with expfmt (internal/promscrape).
func scrape(url string) map[string]*dto.MetricFamily {
	ginkgo.GinkgoHelper()
	fams, err := promscrape.Get(context.Background(), client, url+"/metrics")
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "scraping %s/metrics", url)
	return fams
}

func labels(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, l := range m.GetLabel() {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

// gaugeValue returns the value of the single series of family name.
func gaugeValue(fams map[string]*dto.MetricFamily, name string) float64 {
	ginkgo.GinkgoHelper()
	f, ok := fams[name]
	gomega.Expect(ok).To(gomega.BeTrue(), "metric %s missing", name)
	gomega.Expect(f.GetMetric()).To(gomega.HaveLen(1), "metric %s", name)
	return f.GetMetric()[0].GetGauge().GetValue()
}

// startFake starts one fake from a simulator-style argument list and waits for /health.
func startFake(args ...string) *vllm.Instance {
	ginkgo.GinkgoHelper()
	cfg, warnings, err := vllm.ParseArgs(args, nil)
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "args %q", args)
	gomega.Expect(warnings).To(gomega.BeEmpty())
	inst, err := vllm.Start(cfg, vllm.Options{})
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	ginkgo.DeferCleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		gomega.Expect(inst.Shutdown(ctx)).To(gomega.Succeed())
	})
	for _, r := range inst.Ranks {
		gomega.Eventually(func() (int, error) {
			resp, err := client.Get(r.URL() + "/health")
			if err != nil {
				return 0, err
			}
			resp.Body.Close()
			return resp.StatusCode, nil
		}).WithTimeout(waitTimeout).WithPolling(20 * time.Millisecond).Should(gomega.Equal(http.StatusOK))
	}
	return inst
}
