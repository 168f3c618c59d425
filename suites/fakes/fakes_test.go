package fakes_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	"github.com/eppkit/eppkit/internal/testseed"

	"github.com/eppkit/eppkit/fakes/fleet"
	"github.com/eppkit/eppkit/fakes/vllm"
)

// allMetricNames are the metric families every fake exports (SPEC §7).
var allMetricNames = []string{
	vllm.MetricRunning, vllm.MetricWaiting, vllm.MetricKVCacheUsage, vllm.MetricLoraInfo,
	vllm.MetricCacheConfig, vllm.MetricPrefixQueries, vllm.MetricPrefixHits,
	vllm.MetricPromptTokens, vllm.MetricGenerationTokens, vllm.MetricRequestSuccess,
	vllm.MetricTTFT, vllm.MetricInterToken, vllm.MetricE2E, vllm.MetricQueueTime,
}

var _ = ginkgo.Describe("Fake vLLM fleet", ginkgo.Label("fakes"), func() {
	var f *fleet.Fleet

	ginkgo.When("a fleet of 4 fakes is started", func() {
		ginkgo.BeforeEach(func() {
			base := vllm.DefaultConfig()
			base.Model = baseModel
			base.Seed = testseed.Seed()
			base.InterTokenLatency = vllm.Duration(2 * time.Millisecond)
			base.LoraModules = []vllm.LoraModule{{Name: adapter}}
			base.MaxLoras = 2
			var err error
			f, err = fleet.Start(fleet.Options{Count: fleetSize, Base: base})
			gomega.Expect(err).NotTo(gomega.HaveOccurred())
			ginkgo.DeferCleanup(f.Close)
			ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
			defer cancel()
			gomega.Expect(f.WaitHealthy(ctx)).To(gomega.Succeed())
		})

		ginkgo.It("should give every member its own address and name it in x-inference-pod", func() {
			gomega.Expect(f.Members()).To(gomega.HaveLen(fleetSize))
			seen := map[string]bool{}
			for i, m := range f.Members() {
				if f.Loopback() {
					gomega.Expect(m.Host).To(gomega.Equal(fmt.Sprintf("127.0.10.%d", i+1)))
					gomega.Expect(m.Port).To(gomega.Equal(f.Member(0).Port), "members share one port in loopback mode")
				}
				seen[m.Addr()] = true
				resp, b := postJSON(m.URL()+"/v1/completions", fmt.Sprintf(`{"model":%q,"prompt":"hello fleet","max_tokens":4}`, baseModel))
				gomega.Expect(resp.StatusCode).To(gomega.Equal(http.StatusOK), "body %s", b)
				gomega.Expect(resp.Header.Get(vllm.HeaderPod)).To(gomega.Equal(fmt.Sprintf("fake-vllm-%d", i)))
				gomega.Expect(resp.Header.Get(vllm.HeaderNamespace)).To(gomega.Equal(fleet.DefaultNamespace))
				gomega.Expect(resp.Header.Get(vllm.HeaderPort)).To(gomega.Equal(strconv.Itoa(m.Port)))
				c := decodeCompletion(b)
				gomega.Expect(c.Object).To(gomega.Equal("text_completion"))
				gomega.Expect(c.Choices[0].FinishReason).To(gomega.Equal("length"), "random mode emits exactly max_tokens")
				gomega.Expect(c.Usage.CompletionTokens).To(gomega.Equal(4))
				gomega.Expect(c.Usage.PromptTokens).To(gomega.Equal(2))
			}
			gomega.Expect(seen).To(gomega.HaveLen(fleetSize))
		})

		ginkgo.It("should stream chat completions as SSE: role chunk, one chunk per token with finish_reason on the last (as vLLM), usage chunk, [DONE]", func() {
			for _, m := range f.Members() {
				req, err := http.NewRequest(http.MethodPost, m.URL()+"/v1/chat/completions", strings.NewReader(fmt.Sprintf(
					`{"model":%q,"stream":true,"stream_options":{"include_usage":true},"max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`, adapter)))
				gomega.Expect(err).NotTo(gomega.HaveOccurred())
				req.Header.Set("x-request-id", "req-"+m.Name)
				resp, err := client.Do(req)
				gomega.Expect(err).NotTo(gomega.HaveOccurred())
				gomega.Expect(resp.StatusCode).To(gomega.Equal(http.StatusOK))
				gomega.Expect(resp.Header.Get("Content-Type")).To(gomega.HavePrefix("text/event-stream"))
				gomega.Expect(resp.Header.Get(vllm.HeaderRequestID)).To(gomega.Equal("req-" + m.Name))
				gomega.Expect(resp.Header.Get(vllm.HeaderPod)).To(gomega.Equal(m.Name))
				s, err := readSSE(resp.Body)
				resp.Body.Close()
				gomega.Expect(err).NotTo(gomega.HaveOccurred())
				// role + 5 tokens (the last with finish_reason, vLLM's placement) + usage, then [DONE].
				gomega.Expect(s.chunks).To(gomega.HaveLen(7))
				gomega.Expect(s.frames[len(s.frames)-1]).To(gomega.Equal("[DONE]"))
				delta := func(i int) map[string]any {
					return s.chunks[i]["choices"].([]any)[0].(map[string]any)["delta"].(map[string]any)
				}
				gomega.Expect(delta(0)).To(gomega.HaveKeyWithValue("role", "assistant"))
				for i := 1; i <= 5; i++ {
					gomega.Expect(delta(i)).To(gomega.HaveKey("content"))
					if i < 5 {
						gomega.Expect(s.chunks[i]["choices"].([]any)[0].(map[string]any)["finish_reason"]).To(gomega.BeNil())
					}
				}
				gomega.Expect(s.chunks[5]["choices"].([]any)[0].(map[string]any)["finish_reason"]).To(gomega.Equal("length"))
				gomega.Expect(s.chunks[6]["choices"]).To(gomega.BeEmpty())
				usage := s.chunks[6]["usage"].(map[string]any)
				gomega.Expect(usage).To(gomega.HaveKeyWithValue("completion_tokens", 5.0))
				gomega.Expect(usage).NotTo(gomega.HaveKey("prompt_tokens_details"), "vLLM writes it only with --enable-prompt-tokens-details and a cache hit")
				for _, c := range s.chunks {
					gomega.Expect(c).To(gomega.HaveKeyWithValue("object", "chat.completion.chunk"))
					gomega.Expect(c).To(gomega.HaveKeyWithValue("id", "chatcmpl-req-"+m.Name))
					gomega.Expect(c).To(gomega.HaveKeyWithValue("model", adapter))
				}
			}
		})

		ginkgo.It("should export every vllm metric name with model_name and engine and the LoRA and cache-config labels", func() {
			m := f.Member(2)
			resp, b := postJSON(m.URL()+"/v1/completions", fmt.Sprintf(`{"model":%q,"prompt":"count me","max_tokens":3}`, baseModel))
			gomega.Expect(resp.StatusCode).To(gomega.Equal(http.StatusOK), "body %s", b)
			fams := scrape(m.URL())
			for _, name := range allMetricNames {
				gomega.Expect(fams).To(gomega.HaveKey(name), "metric family %s", name)
			}
			for _, name := range []string{vllm.MetricRunning, vllm.MetricWaiting, vllm.MetricKVCacheUsage, vllm.MetricPromptTokens, vllm.MetricGenerationTokens, vllm.MetricTTFT} {
				gomega.Expect(labels(fams[name].GetMetric()[0])).To(gomega.And(gomega.HaveKeyWithValue("model_name", baseModel),
					gomega.HaveKeyWithValue("engine", "0")), "metric %s", name)
			}
			lora := fams[vllm.MetricLoraInfo].GetMetric()
			gomega.Expect(lora).To(gomega.HaveLen(1))
			gomega.Expect(labels(lora[0])).To(gomega.BeComparableTo(map[string]string{"max_lora": "2", "running_lora_adapters": "", "waiting_lora_adapters": ""}))
			gomega.Expect(lora[0].GetGauge().GetValue()).To(gomega.BeNumerically(">", 1.7e9), "value is the update time in unix seconds")
			cc := fams[vllm.MetricCacheConfig].GetMetric()
			// vLLM labels the family with every CacheConfig field and the engine.
			gomega.Expect(labels(cc[0])).To(gomega.And(gomega.HaveKeyWithValue("block_size", "16"),
				gomega.HaveKeyWithValue("num_gpu_blocks", "1024"), gomega.HaveKeyWithValue("engine", "0")))
			gomega.Expect(fams[vllm.MetricGenerationTokens].GetMetric()[0].GetCounter().GetValue()).To(gomega.Equal(3.0))
			var lengthCount float64
			for _, s := range fams[vllm.MetricRequestSuccess].GetMetric() {
				if labels(s)["finished_reason"] == "length" {
					lengthCount = s.GetCounter().GetValue()
				}
			}
			gomega.Expect(lengthCount).To(gomega.Equal(1.0))
			gomega.Expect(fams[vllm.MetricTTFT].GetMetric()[0].GetHistogram().GetSampleCount()).To(gomega.Equal(uint64(1)))
			gomega.Expect(fams[vllm.MetricInterToken].GetMetric()[0].GetHistogram().GetSampleCount()).To(gomega.Equal(uint64(2)))
			gomega.Expect(fams[vllm.MetricTTFT].GetMetric()[0].GetHistogram().GetBucket()).To(gomega.HaveLen(len(vllm.TTFTBuckets)+1), "vLLM's buckets plus +Inf")
		})

		ginkgo.It("should report running requests and LoRA adapters while a slow request streams", func() {
			m := f.Member(1)
			inst := m.Instance()
			_, err := inst.Ranks[0].UpdateAdminConfig([]byte(`{"inter-token-latency":"100ms"}`))
			gomega.Expect(err).NotTo(gomega.HaveOccurred())
			// 50 tokens at 100 ms: the request runs for about 5 s, ample time to observe it even on a
			// loaded machine; the spec cancels it once seen.
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() {
				defer ginkgo.GinkgoRecover()
				defer close(done)
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, m.URL()+"/v1/completions",
					strings.NewReader(fmt.Sprintf(`{"model":%q,"prompt":"slow","max_tokens":50,"stream":true}`, adapter)))
				resp, err := client.Do(req)
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}()
			gomega.Eventually(func(g gomega.Gomega) {
				fams := scrape(m.URL())
				g.Expect(gaugeValue(fams, vllm.MetricRunning)).To(gomega.Equal(1.0))
				g.Expect(gaugeValue(fams, vllm.MetricKVCacheUsage)).To(gomega.BeNumerically(">", 0))
				g.Expect(labels(fams[vllm.MetricLoraInfo].GetMetric()[0])).To(gomega.HaveKeyWithValue("running_lora_adapters", adapter))
			}).WithTimeout(waitTimeout).WithPolling(10 * time.Millisecond).Should(gomega.Succeed())
			cancel()
			<-done
			gomega.Eventually(func() float64 { return gaugeValue(scrape(m.URL()), vllm.MetricRunning) }).
				WithTimeout(waitTimeout).WithPolling(10*time.Millisecond).Should(gomega.Equal(0.0), "a cancelled request frees its slot")
		})

		ginkgo.It("should stop, kill and restart a member on the same address", func() {
			m := f.Member(3)
			addr := m.Addr()
			m.Kill()
			_, err := client.Get(m.URL() + "/health")
			gomega.Expect(err).To(gomega.HaveOccurred(), "a killed member refuses connections")
			gomega.Expect(m.Start()).To(gomega.Succeed())
			gomega.Expect(m.Addr()).To(gomega.Equal(addr))
			ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
			defer cancel()
			gomega.Expect(m.WaitHealthy(ctx)).To(gomega.Succeed())
			gomega.Expect(m.Stop(ctx)).To(gomega.Succeed())
			gomega.Expect(m.Running()).To(gomega.BeFalse())
			gomega.Expect(m.Restart()).To(gomega.Succeed())
			gomega.Expect(m.WaitHealthy(ctx)).To(gomega.Succeed())
			resp, b := postJSON(m.URL()+"/v1/completions", fmt.Sprintf(`{"model":%q,"prompt":"back","max_tokens":1}`, baseModel))
			gomega.Expect(resp.StatusCode).To(gomega.Equal(http.StatusOK), "body %s", b)
		})
	})

	ginkgo.When("the fleet is forced onto distinct ports", func() {
		ginkgo.It("should put every member on 127.0.0.1 with its own port", func() {
			base := vllm.DefaultConfig()
			base.Model = baseModel
			base.Seed = testseed.Seed()
			f, err := fleet.Start(fleet.Options{Count: 2, Base: base, DistinctPorts: true,
				PerServer: func(i int, c *vllm.Config) { c.DPSize = 2 }})
			gomega.Expect(err).NotTo(gomega.HaveOccurred())
			ginkgo.DeferCleanup(f.Close)
			ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
			defer cancel()
			gomega.Expect(f.WaitHealthy(ctx)).To(gomega.Succeed())
			gomega.Expect(f.Loopback()).To(gomega.BeFalse())
			gomega.Expect(f.Member(0).Host).To(gomega.Equal("127.0.0.1"))
			gomega.Expect(f.Member(0).Port).NotTo(gomega.Equal(f.Member(1).Port))
			gomega.Expect(f.Member(1).RankURLs()).To(gomega.HaveLen(2))
		})
	})
})

var _ = ginkgo.Describe("Fake vLLM server", ginkgo.Label("fakes"), func() {
	ginkgo.When("started with the upstream GIE sim-deployment arguments plus the KV cache in echo mode", func() {
		var inst *vllm.Instance
		ginkgo.BeforeEach(func() {
			// config/manifests/vllm/sim-deployment.yaml of gateway-api-inference-extension, with a free
			// port instead of 8000.
			inst = startFake("--model", baseModel, "--port", strconv.Itoa(freePort()), "--max-loras", "2",
				"--lora-modules", `{"name": "food-review-1"}`,
				"--enable-kvcache", "--kv-cache-size", "1024", "--block-size", "16", "--mode", "echo",
				"--seed", strconv.FormatInt(testseed.Seed(), 10))
		})

		ginkgo.It("should list the base model and the adapter and echo through both", func() {
			resp, err := client.Get(inst.URL() + "/v1/models")
			gomega.Expect(err).NotTo(gomega.HaveOccurred())
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			gomega.Expect(string(body)).To(gomega.And(gomega.ContainSubstring(`"id":"`+baseModel+`"`), gomega.ContainSubstring(`"id":"food-review-1"`)))
			for _, model := range []string{baseModel, adapter} {
				resp, b := postJSON(inst.URL()+"/v1/chat/completions", fmt.Sprintf(
					`{"model":%q,"messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"Say this back, please."}]}`, model))
				gomega.Expect(resp.StatusCode).To(gomega.Equal(http.StatusOK), "body %s", b)
				c := decodeCompletion(b)
				gomega.Expect(c.Object).To(gomega.Equal("chat.completion"))
				gomega.Expect(c.Choices[0].Message.Role).To(gomega.Equal("assistant"))
				gomega.Expect(c.Choices[0].Message.Content).To(gomega.Equal("Say this back, please."))
				gomega.Expect(c.Choices[0].FinishReason).To(gomega.Equal("stop"))
			}
		})

		ginkgo.It("should report cached_tokens > 0 for a repeated prompt only with --enable-prompt-tokens-details, as vLLM", func() {
			prompt := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 12)
			body := fmt.Sprintf(`{"model":%q,"prompt":%q,"max_tokens":2}`, baseModel, prompt)
			// sim-deployment.yaml's flags: vLLM's default, prompt_tokens_details null (a non-streamed
			// response is vLLM's model_dump(), which keeps None fields).
			postJSON(inst.URL()+"/v1/completions", body)
			_, b := postJSON(inst.URL()+"/v1/completions", body)
			gomega.Expect(string(b)).To(gomega.ContainSubstring(`"prompt_tokens_details":null`))
			gomega.Expect(scrape(inst.URL())[vllm.MetricPrefixHits].GetMetric()[0].GetCounter().GetValue()).To(gomega.BeNumerically(">", 0),
				"the cache hit; only the usage key is off")

			withDetails := startFake("--model", baseModel, "--port", "0", "--enable-kvcache", "--kv-cache-size", "1024",
				"--block-size", "16", "--mode", "echo", "--enable-prompt-tokens-details", "--seed", strconv.FormatInt(testseed.Seed(), 10))
			_, b = postJSON(withDetails.URL()+"/v1/completions", body)
			gomega.Expect(string(b)).To(gomega.ContainSubstring(`"prompt_tokens_details":null`), "a cold cache has no hits, and vLLM writes no zero")
			first := decodeCompletion(b)
			_, b = postJSON(withDetails.URL()+"/v1/completions", body)
			second := decodeCompletion(b)
			gomega.Expect(second.Usage.PromptTokens).To(gomega.Equal(first.Usage.PromptTokens))
			gomega.Expect(second.Usage.PromptTokensDetails).NotTo(gomega.BeNil(), "body %s", b)
			gomega.Expect(second.Usage.Cached()).To(gomega.BeNumerically(">", 0))
			gomega.Expect(second.Usage.Cached()%16).To(gomega.Equal(0), "hits are whole blocks")
			gomega.Expect(second.Usage.Cached()).To(gomega.BeNumerically("<", second.Usage.PromptTokens))
			fams := scrape(withDetails.URL())
			gomega.Expect(fams[vllm.MetricPrefixHits].GetMetric()[0].GetCounter().GetValue()).To(gomega.Equal(float64(second.Usage.Cached())))
			gomega.Expect(fams[vllm.MetricPrefixQueries].GetMetric()[0].GetCounter().GetValue()).To(gomega.Equal(float64(2 * first.Usage.PromptTokens)))
		})
	})

	ginkgo.When("data-parallel-size is 3", func() {
		ginkgo.It("should answer on port, port+1 and port+2, each rank naming its own port", func() {
			port := freePortRun(3)
			inst := startFake("--model", baseModel, "--port", strconv.Itoa(port), "--data-parallel-size", "3", "--pod-name", "dp-pod")
			gomega.Expect(inst.Ranks).To(gomega.HaveLen(3))
			for r := 0; r < 3; r++ {
				url := fmt.Sprintf("http://127.0.0.1:%d", port+r)
				resp, b := postJSON(url+"/v1/completions", fmt.Sprintf(`{"model":%q,"prompt":"rank","max_tokens":1}`, baseModel))
				gomega.Expect(resp.StatusCode).To(gomega.Equal(http.StatusOK), "body %s", b)
				gomega.Expect(resp.Header.Get(vllm.HeaderPort)).To(gomega.Equal(strconv.Itoa(port + r)))
				gomega.Expect(resp.Header.Get(vllm.HeaderPod)).To(gomega.Equal("dp-pod"))
			}
			// Ranks have their own engines: only rank 1 counted a request after one more to rank 1.
			_, _ = postJSON(fmt.Sprintf("http://127.0.0.1:%d/v1/completions", port+1), fmt.Sprintf(`{"model":%q,"prompt":"again","max_tokens":1}`, baseModel))
			gen := func(r int) float64 {
				return scrape(fmt.Sprintf("http://127.0.0.1:%d", port+r))[vllm.MetricGenerationTokens].GetMetric()[0].GetCounter().GetValue()
			}
			gomega.Expect([]float64{gen(0), gen(1), gen(2)}).To(gomega.BeComparableTo([]float64{1, 2, 1}))
		})
	})

	ginkgo.When("POST /admin/config is called", func() {
		var inst *vllm.Instance
		ginkgo.BeforeEach(func() {
			inst = startFake("--model", baseModel, "--port", "0", "--max-loras", "2")
		})

		ginkgo.DescribeTable("should reject invalid input with 400 and an OpenAI error naming the key",
			func(body, wantParam, wantMessage string) {
				resp, b := postJSON(inst.URL()+"/admin/config", body)
				gomega.Expect(resp.StatusCode).To(gomega.Equal(http.StatusBadRequest), "body %s", b)
				e := apiError(b)
				gomega.Expect(e.Type).To(gomega.Equal("BadRequestError"))
				if wantParam != "" {
					gomega.Expect(e.Param).NotTo(gomega.BeNil())
					gomega.Expect(*e.Param).To(gomega.Equal(wantParam))
				}
				gomega.Expect(e.Message).To(gomega.ContainSubstring(wantMessage))
			},
			ginkgo.Entry("unknown key", `{"max-num-seqs":3}`, "max-num-seqs", "unknown configuration key"),
			ginkgo.Entry("unknown fake-metrics key", `{"fake-metrics":{"running":1}}`, "fake-metrics", "unknown key"),
			ginkgo.Entry("kv-cache-usage over 1", `{"fake-metrics":{"kv-cache-usage":1.2}}`, "fake-metrics", "kv-cache-usage"),
			ginkgo.Entry("negative running-requests", `{"fake-metrics":{"running-requests":-1}}`, "fake-metrics", "running-requests"),
			ginkgo.Entry("rate above 100", `{"failure-injection-rate":101}`, "", "failure-injection-rate"),
			ginkgo.Entry("unknown failure type", `{"failure-types":["explode"]}`, "", "failure-types"),
			ginkgo.Entry("duration that is not a duration", `{"time-to-first-token":"later"}`, "time-to-first-token", "invalid duration"),
			ginkgo.Entry("std dev above 30% of its mean", `{"inter-token-latency":"10ms","inter-token-latency-std-dev":"4ms"}`, "", "30%"),
			ginkgo.Entry("malformed JSON", `{"failure-injection-rate":`, "", "invalid JSON"),
		)

		ginkgo.It("should pin the gauges and LoRA info with fake-metrics, and unpin them with null", func() {
			resp, b := postJSON(inst.URL()+"/admin/config",
				`{"fake-metrics":{"running-requests":7,"waiting-requests":3,"kv-cache-usage":0.25,"loras":[{"running":"a,b","waiting":"c","timestamp":1700000000}]}}`)
			gomega.Expect(resp.StatusCode).To(gomega.Equal(http.StatusOK), "body %s", b)
			fams := scrape(inst.URL())
			gomega.Expect(gaugeValue(fams, vllm.MetricRunning)).To(gomega.Equal(7.0))
			gomega.Expect(gaugeValue(fams, vllm.MetricWaiting)).To(gomega.Equal(3.0))
			gomega.Expect(gaugeValue(fams, vllm.MetricKVCacheUsage)).To(gomega.Equal(0.25))
			lora := fams[vllm.MetricLoraInfo].GetMetric()
			gomega.Expect(lora).To(gomega.HaveLen(1))
			gomega.Expect(labels(lora[0])).To(gomega.BeComparableTo(map[string]string{"max_lora": "2", "running_lora_adapters": "a,b", "waiting_lora_adapters": "c"}))
			gomega.Expect(lora[0].GetGauge().GetValue()).To(gomega.Equal(1.7e9))
			resp, b = postJSON(inst.URL()+"/admin/config", `{"fake-metrics":null}`)
			gomega.Expect(resp.StatusCode).To(gomega.Equal(http.StatusOK), "body %s", b)
			gomega.Expect(gaugeValue(scrape(inst.URL()), vllm.MetricRunning)).To(gomega.Equal(0.0))
		})
	})

	ginkgo.When("failure injection is at 100% for one kind", func() {
		var inst *vllm.Instance
		ginkgo.BeforeEach(func() {
			inst = startFake("--model", baseModel, "--port", "0", "--inter-token-latency", "1ms", "--slow-first-byte-delay", "300ms")
		})
		setFailure := func(kind string) {
			resp, b := postJSON(inst.URL()+"/admin/config", fmt.Sprintf(`{"failure-injection-rate":100,"failure-types":[%q]}`, kind))
			gomega.Expect(resp.StatusCode).To(gomega.Equal(http.StatusOK), "body %s", b)
		}
		body := fmt.Sprintf(`{"model":%q,"stream":true,"max_tokens":20,"messages":[{"role":"user","content":"x"}]}`, baseModel)

		ginkgo.DescribeTable("should answer the simulator's failure kinds with its status and error type",
			func(kind string, status int, errType string) {
				setFailure(kind)
				resp, b := postJSON(inst.URL()+"/v1/chat/completions", body)
				gomega.Expect(resp.StatusCode).To(gomega.Equal(status), "body %s", b)
				e := apiError(b)
				gomega.Expect(e.Type).To(gomega.Equal(errType))
				gomega.Expect(e.Code).To(gomega.Equal(status))
			},
			ginkgo.Entry("rate_limit", vllm.FailureRateLimit, 429, "RateLimitError"),
			ginkgo.Entry("invalid_api_key", vllm.FailureInvalidAPIKey, 401, "AuthenticationError"),
			ginkgo.Entry("context_length", vllm.FailureContextLength, 400, "BadRequestError"),
			ginkgo.Entry("server_error", vllm.FailureServerError, 503, "InternalServerError"),
			ginkgo.Entry("invalid_request", vllm.FailureInvalidRequest, 400, "BadRequestError"),
			ginkgo.Entry("model_not_found", vllm.FailureModelNotFound, 404, "NotFoundError"),
		)

		ginkgo.It("should reset the TCP connection for reset", func() {
			setFailure(vllm.FailureReset)
			_, err := client.Post(inst.URL()+"/v1/chat/completions", "application/json", strings.NewReader(body))
			gomega.Expect(err).To(gomega.HaveOccurred())
			gomega.Expect(errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF) || strings.Contains(err.Error(), "reset")).
				To(gomega.BeTrue(), "error %v should be a connection reset", err)
		})

		ginkgo.It("should close the stream after the first token, without [DONE], for abort", func() {
			setFailure(vllm.FailureAbort)
			resp, err := client.Post(inst.URL()+"/v1/chat/completions", "application/json", strings.NewReader(body))
			gomega.Expect(err).NotTo(gomega.HaveOccurred())
			defer resp.Body.Close()
			gomega.Expect(resp.StatusCode).To(gomega.Equal(http.StatusOK))
			s, err := readSSE(resp.Body)
			gomega.Expect(err).To(gomega.HaveOccurred(), "the body ends abruptly")
			gomega.Expect(s.frames).NotTo(gomega.ContainElement("[DONE]"))
			gomega.Expect(len(s.chunks)).To(gomega.BeNumerically("<", 20))
		})

		ginkgo.It("should hold the first byte back for slow-first-byte and then answer normally", func() {
			setFailure(vllm.FailureSlowFirstByte)
			start := time.Now()
			resp, b := postJSON(inst.URL()+"/v1/chat/completions", body)
			gomega.Expect(time.Since(start)).To(gomega.BeNumerically(">=", 300*time.Millisecond))
			gomega.Expect(resp.StatusCode).To(gomega.Equal(http.StatusOK))
			gomega.Expect(string(b)).To(gomega.HaveSuffix("data: [DONE]\n\n"))
		})
	})

	ginkgo.When("it receives bad input", func() {
		ginkgo.It("should answer 4xx with OpenAI errors and keep serving", func() {
			inst := startFake("--model", baseModel, "--port", "0", "--max-model-len", "32", "--max-request-body-size-mb", "1")
			cases := []struct {
				path, body string
				status     int
			}{
				{"/v1/completions", `{"model":`, 400},
				{"/v1/completions", `{"model":"other","prompt":"x"}`, 404},
				{"/v1/chat/completions", fmt.Sprintf(`{"model":%q,"messages":[]}`, baseModel), 400},
				{"/v1/completions", fmt.Sprintf(`{"model":%q,"prompt":%q}`, baseModel, strings.Repeat("w ", 40)), 400},
				{"/v1/completions", fmt.Sprintf(`{"model":%q,"prompt":%q}`, baseModel, strings.Repeat("x", 2<<20)), 413},
			}
			for _, c := range cases {
				resp, b := postJSON(inst.URL()+c.path, c.body)
				gomega.Expect(resp.StatusCode).To(gomega.Equal(c.status), "body %.200s", b)
				gomega.Expect(apiError(b).Message).NotTo(gomega.BeEmpty())
			}
			resp, b := postJSON(inst.URL()+"/v1/completions", fmt.Sprintf(`{"model":%q,"prompt":"ok","max_tokens":1}`, baseModel))
			gomega.Expect(resp.StatusCode).To(gomega.Equal(http.StatusOK), "body %s", b)
		})
	})
})

// freePort returns a port that was free on 127.0.0.1 a moment ago.
func freePort() int {
	ginkgo.GinkgoHelper()
	return freePortRun(1)
}

// freePortRun returns p such that p..p+n-1 were free on 127.0.0.1 a moment ago.
func freePortRun(n int) int {
	ginkgo.GinkgoHelper()
	for attempt := 0; attempt < 50; attempt++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		gomega.Expect(err).NotTo(gomega.HaveOccurred())
		p := ln.Addr().(*net.TCPAddr).Port
		_ = ln.Close()
		ok := p+n-1 <= 65535
		for i := 1; i < n && ok; i++ {
			l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p+i)))
			if err != nil {
				ok = false
				break
			}
			_ = l.Close()
		}
		if ok {
			return p
		}
	}
	ginkgo.Fail(fmt.Sprintf("no run of %d free ports found", n))
	return 0
}
