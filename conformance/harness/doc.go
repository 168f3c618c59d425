// Package harness is what a conformance test runs against: Suite (the fake vLLM fleet or an
// external one, the fake gateway in strict mode in front of the target EPP, the endpoint source
// that tells the EPP the pool, the latency predictor sidecar) and Start, which brings it up and
// waits for the target's readiness (gRPC health SERVING and an ext_proc stream that answers). It
// also holds what tests use with it: TestingT (and Recorder, the runner's implementation),
// TimeoutConfig, MustEventually and the statistical plans of SPEC §6, and the Target and
// EndpointSource interfaces that conformance/target and conformance/endpointsource implement.
package harness
