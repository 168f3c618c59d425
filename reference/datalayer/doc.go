// Package datalayer is the reference EPP's data layer: one scraper per endpoint reads
// http://<ip>:<port>/metrics in the Prometheus text format every Interval (default 50 ms) and turns
// the vLLM metric families into a framework.Metrics snapshot; Stale tells the director which
// endpoints' metrics are too old or failed to arrive (SPEC §3, "Stale endpoints").
//
// The metric names and their meaning follow the upstream Gateway API Inference Extension EPP v1.5.0
// (gateway-api-inference-extension, pkg/epp/server/options.go for the default names;
// pkg/epp/framework/plugins/datalayer/extractor/metrics/{extractor,loraspec,spec}.go for how a
// series is chosen and how LoRA and cache-config labels are read). eppkit differs where noted:
//
//   - Data-parallel engines inside one server export one series per engine, told apart by an
//     `engine` label. Upstream keeps one series (the one with the latest timestamp, in practice the
//     first); eppkit sums the queue and running counts over the engine series and averages their
//     KV-cache use, so an endpoint reports the whole server's load.
//   - A missing optional family (vllm:lora_requests_info, vllm:cache_config_info) is not an error;
//     upstream reports it as one.
//   - An adapter listed both as running and as waiting counts once, as running.
//   - A scrape whose transport, status or text format fails leaves the last good values in place
//     and records the error; a scrape that parses but lacks a required family (queue, running,
//     KV) or carries a malformed value records the error as well, with the values it could read.
//     Either way Stale reports true until a clean scrape.
package datalayer
