// Package sim simulates routing at fleet scale: N fake vLLM engines (fakes/vllm/engine, configured
// exactly as `eppkit bench` configures its fake endpoints, with SPEC §7's frozen profiles) on a
// virtual clock, the bench's workloads and arrival processes (same seeds, same requests), metrics
// "scraped" for the picker every refresh interval of virtual time, and a Picker deciding every
// request. One goroutine runs a discrete-event loop: it moves the clock from event to event
// (arrival, token due, scrape, monitor sample), so 1,024 endpoints cost what their events cost,
// not wall time.
//
// The picker is an interface, so the simulation itself does not depend on the reference EPP: it
// ships round-robin (the gateway stand-in's round-robin) and an oracle baseline; bench/simepp drives the reference EPP's real director, framework and plugins in process
// with the same request data (headers and body) the gateway would send over ext_proc, no sockets.
//
// Results are bench.Results (the vllm bench serve block, ladder, per-endpoint table, plots),
// marked simulated, plus the real CPU time each scheduling decision took. Everything is
// deterministic for a seed: the workload, the arrivals, every engine's jitter, the scrape phases
// and the picker's seed; a test runs a simulation twice and compares every outcome.
//
// What the simulation leaves out (the real-time bench has it; `eppkit bench simulate --validate`
// measures the difference): the client, the gateway and the ext_proc hops (real TTFTs are a few
// milliseconds longer), scrape latency and Prometheus text parsing (metrics are read from the
// engine at the scrape instant), CPU contention between the fakes, the EPP and the load generator,
// and background sweepers (see Clock).
package sim
